"""artifacts/targets.py is the one table of build targets and artifact formats: the CLI's choices, the schema's
runtimes, the loader's suffixes, the engine's builders, the flavours, Triton's platforms and who loads a plan all
read it; a target added to it is taken everywhere (a copy of the package with one more row, checked in a
subprocess), and nothing in the package compares a target's name to decide."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from mlit_edge.artifacts import targets
from mlit_edge.artifacts.schema import RUNTIMES, ArtifactRecord, SidecarError, check_record
from mlit_edge.artifacts.targets import FORMATS, TABLE
from mlit_edge.cli.deploy import build
from mlit_edge.devices.plan_consumer import check_plan_consumer
from mlit_edge.engine.build import BUILDERS
from mlit_edge.export.flavours import FLAVOURS
from mlit_edge.runtime.artifact import OPENERS, artifact_format
from mlit_edge.stacks.triton import PLATFORMS

PACKAGE = Path(__file__).parents[2] / "mlit_edge"


def _choices(command: click.Command, option: str) -> tuple:
    param = next(p for p in command.params if p.name == option)
    return tuple(param.type.choices)


def test_the_clis_choices_are_the_tables():
    assert _choices(build, "target") == ("auto", *(t.name for t in TABLE.values() if not t.frontend_of))
    assert _choices(build, "frontend") == ("onnx", *(t.name for t in TABLE.values() if t.frontend_of))
    assert _choices(build, "precision") == targets.PRECISIONS
    assert set(targets.AUTO) <= set(TABLE) and "help" not in TABLE


def test_the_schema_accepts_each_targets_graph_and_nothing_else(tmp_path):
    assert RUNTIMES == ("any", *dict.fromkeys(t.graph for t in TABLE.values()))
    for runtime in RUNTIMES:
        check_record({"runtime": runtime}, tmp_path / "m.onnx")
    with pytest.raises(SidecarError, match="runtime is 'coreml'"):
        check_record({"runtime": "coreml"}, tmp_path / "m.onnx")
    for precision in targets.PRECISIONS:
        check_record({"precision": precision}, tmp_path / "m.onnx")


def test_the_loader_knows_each_formats_suffixes_and_opens_what_each_target_makes(tmp_path):
    for fmt in FORMATS.values():
        assert all(artifact_format(f"m{s.upper()}").name == fmt.name for s in fmt.suffixes)
    with pytest.raises(ValueError) as e:
        artifact_format(tmp_path / "m.mlpackage")
    assert e.value.args[0].endswith(", ".join(s for f in FORMATS.values() for s in f.suffixes))
    assert {t.format for t in TABLE.values()} <= set(OPENERS) <= set(FORMATS)


def test_each_row_is_built_made_and_served_by_what_the_table_names():
    for t in TABLE.values():
        assert t.builder is None or t.builder in BUILDERS, t.name
        assert all((p, t.graph) in FLAVOURS for p in t.precisions), t.name
        assert t.frontend_of is None or TABLE[t.frontend_of].format == t.format
        assert set(t.consumers) <= set(targets.CONSUMERS), t.name
    assert PLATFORMS == {f.suffixes[0]: (f.triton, f"model{f.suffixes[0]}") for f in FORMATS.values() if f.triton}


@pytest.mark.parametrize("name", [t.name for t in TABLE.values() if t.builder and not t.frontend_of])
@pytest.mark.parametrize("consumer", ["triton", "deepstream"])
def test_a_plan_is_refused_by_a_consumer_its_row_does_not_name(name, consumer, tmp_path):
    row = TABLE[name]
    record = ArtifactRecord.from_json({"target": name, "precision": "fp16", "source_onnx": "m-fp16.onnx",
                                       "engine": {"builder": {"module": row.module}, "device": {
                                           "platform": "Linux aarch64", "module": "orin-nano"}}})
    if consumer in row.consumers:
        check_plan_consumer(record, tmp_path / "m.plan", consumer)
    else:
        with pytest.raises(ValueError, match=f"is a {re.escape(row.title)} plan"):
            check_plan_consumer(record, tmp_path / "m.plan", consumer)


def test_no_module_compares_a_target_name_to_decide():
    """A target, frontend or graph runtime compared (`==`, `!=`, `in`) with a target's name outside the table would
    be a second place to edit when a target comes or goes."""
    names = "|".join(re.escape(n) for n in TABLE)
    compare = re.compile(rf"""(target|frontend|runtime)\b[^#\n]*?(==|!=|\bin\b)\s*[(\[]?\s*"({names})"|"""
                         rf""""({names})"\s*(==|!=)[^#\n]*(target|frontend|runtime)\b""")
    found = [f"{p.relative_to(PACKAGE)}:{n}" for p in PACKAGE.rglob("*.py") if p.name != "targets.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if compare.search(line)]
    assert not found, found


def test_a_new_target_is_one_row_of_the_table(tmp_path):
    """A copy of the package with one more row (a target that takes the ONNX Runtime graph as it is): the CLI offers
    it, the request takes it and `resolve_target` resolves it, with no other edit."""
    copy = tmp_path / "mlit_edge"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "weights"))
    table = copy / "artifacts" / "targets.py"
    text = table.read_text()
    row = '    Target("x-ort", "X", "onnxruntime", "onnxruntime"),\n'
    anchor = '    Target("torch-tensorrt",'
    assert text.count(anchor) == 1
    table.write_text(text.replace(anchor, row + anchor))
    probe = """
import click
from mlit_edge.cli.deploy import build
from mlit_edge.export.requests import BuildRequest
from mlit_edge.export.resolve import resolve_target
from mlit_edge.artifacts.schema import RUNTIMES
from mlit_edge.artifacts.targets import TABLE
choices = next(p for p in build.params if p.name == "target").type.choices
req = BuildRequest(target="x-ort", precision="int8")
print("x-ort" in choices, resolve_target("x-ort"), TABLE["x-ort"].graph in RUNTIMES)
"""
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "('x-ort',", "None)", "True"]
