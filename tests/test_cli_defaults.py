"""One default per option: every CLI option (or argument) that fills a field of a request dataclass defaults to
that field's default, so `mlit-edge X` and the Python call that builds the dataclass do the same thing.

The default compared is the one the command receives (click's type and callback applied, as `make_context`
parses an empty command line), so `--batch 1,8,64` is compared as the tuple (1, 8, 64)."""
from __future__ import annotations

import dataclasses
import inspect

import click
import pytest

from mlit_edge.bench.options import BenchConfig, provider_names
from mlit_edge.cli import main
from mlit_edge.export.requests import BuildRequest, ExportRequest
from mlit_edge.runtime.stream_options import StreamOptions
from mlit_edge.train.run_config import RunConfig




# command -> (the dataclass its options fill, what its command line needs besides them)
FILLS = {"export": (lambda: ExportRequest, []), "build": (lambda: BuildRequest, []),
         "bench": (lambda: BenchConfig, ["a.onnx"]),
         "stream": (lambda: StreamOptions, ["clip.mp4", "--model", "m.onnx"]),
         "train": (lambda: RunConfig, []), "pretrain": (lambda: RunConfig, []),
         "finetune": (lambda: RunConfig, ["--from", "mmlit.pt"])}
# options whose text the command turns into the field's value itself: compared as it turns them
CONVERTED = {("bench", "providers"): provider_names,
             ("stream", "camera"): lambda text: tuple(int(v) for v in text.replace("@", "x").split("x"))}
# options whose None the command replaces with a value of its own, not the field's default
DERIVED = {("build", "calib_cache"),  # ~/.cache/mlit-edge/calibration unless --no-calib-cache
           ("train", "out"), ("pretrain", "out"), ("finetune", "out")}  # RunConfig.for_task: runs/TASK-SIZE-DATA


def field_default(cls, name: str):
    f = cls.__dataclass_fields__[name]
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def mismatches(command: click.Command, cls, args: list[str], converted=None, derived=()) -> tuple[list[str], int]:
    """'--option: CLI default X, Class.field default Y' for each option of `command` that fills a field of `cls`
    with another default, and how many options were compared."""
    converted = converted or {}
    parsed = command.make_context(command.name, list(args)).params
    fields = {f.name for f in dataclasses.fields(cls)}
    out, compared = [], 0
    for param in command.params:
        if param.name not in fields or param.required or param.name in derived:
            continue
        value = converted.get(param.name, lambda v: v)(parsed[param.name])
        want = field_default(cls, param.name)
        compared += 1
        if value != want:
            out.append(f"{param.opts[0]}: CLI default {value!r}, {cls.__name__}.{param.name} default {want!r}")
    return out, compared


@pytest.mark.parametrize("name", sorted(FILLS))
def test_each_option_defaults_to_its_dataclass_field(name):
    make_cls, args = FILLS[name]
    cls = make_cls()
    command = main.commands[name]
    found, compared = mismatches(command, cls, args, {p: f for (c, p), f in CONVERTED.items() if c == name},
                                 {p for c, p in DERIVED if c == name})
    assert not found, f"mlit-edge {name} restates a default its dataclass does not hold: {found}"
    assert compared >= 4, f"mlit-edge {name}: only {compared} options matched {cls.__name__}'s fields"


def test_every_command_that_fills_a_dataclass_is_checked():
    """A command that builds one of the request dataclasses from its options is in FILLS (a new one must be)."""
    builds = ("ExportRequest(", "BuildRequest(", "BenchConfig(", "StreamOptions(", "_train_command(")
    filling = {name for name, command in main.commands.items()
               if any(b in inspect.getsource(command.callback) for b in builds)}
    assert filling == set(FILLS)


def test_the_check_fails_on_a_restated_different_default():
    """The check above must bite: an option that writes out another default than its field's is named, and
    one that reads the field's default passes."""
    from mlit_edge.cli.common import default

    @click.command("fake")
    @click.option("--warmup-iters", default=default(BenchConfig, "warmup_iters") + 1, type=int)
    @click.option("--split", default="train")
    @click.option("--isolate/--in-process", default=not default(BenchConfig, "isolate"))
    @click.option("--data-root", default=default(BenchConfig, "data_root"))
    def fake(**kw):
        pass

    found, compared = mismatches(fake, BenchConfig, [])
    assert compared == 4
    assert [line.split(":")[0] for line in found] == ["--warmup-iters", "--split", "--isolate"], found
    assert "BenchConfig.isolate default True" in found[2]
