"""One JetPack table, mlit_edge/devices/jetpacks.json: the device profiles, mha_rules.JETSON_SM,
deploy/install-jetson.sh (which reads it from the source it installs), the Dockerfile's default image and the
tables of deploy/README.md and docs/export-and-build.md all agree with it, and a new L4T release is one line
in it, with no other edit.

`python tests/engine/test_jetpack_table.py` prints deploy/README.md's two tables as the JSON makes them."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
TABLE_FILE = ROOT / "mlit_edge" / "devices" / "jetpacks.json"
SCRIPT = ROOT / "deploy" / "install-jetson.sh"
README = ROOT / "deploy" / "README.md"
BUILD_DOC = ROOT / "docs" / "export-and-build.md"
PIN_ORDER = ("cuda-python", "numpy", "pillow", "click")


def _key(release: str) -> tuple:
    return tuple(int(x) for x in release.lstrip("R").split("."))


def readme_tables(table: dict) -> str:
    """deploy/README.md's tables, as the JSON makes them: one row per JetPack, then one per L4T release key."""
    from mlit_edge.devices.profiles import l4t_lines

    lines = ["| JetPack | L4T | `--build-arg L4T_IMAGE=` | TensorRT | CUDA | Python | profile | pins | `WITH_ORT=1` "
             "| GPUs (SM) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for jetpack, row in table.items():
        image = f"`{row['container']}`" if row["container"] else "none: see below"
        pins = " ".join(f"`{row['pins'][name]}`" for name in PIN_ORDER)
        gpus = ", ".join(f"{name} {sm / 10:.1f}" for name, sm in row["modules"].items())
        lines.append(f"| {jetpack} | {l4t_lines(row['l4t'])} | {image} | {row['tensorrt']} | {row['cuda']} | "
                     f"{row['python']} | `jetpack-{jetpack}` | {pins} | `onnxruntime=={row['onnxruntime']}` | {gpus} |")
    lines += ["", "| L4T | JetPack | profile |", "|---|---|---|"]
    keys = sorted(((release, name, jetpack) for jetpack, row in table.items() for release, name in row["l4t"].items()),
                  key=lambda k: _key(k[0]))
    for release, name, jetpack in keys:
        shown = release + ".x" if release.count(".") == 1 else release
        lines.append(f"| {shown} | {name} | `jetpack-{jetpack}` |")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def table() -> dict:
    return json.loads(TABLE_FILE.read_text())["jetpacks"]


# --- the file itself --------------------------------------------------------------------------------------------
def test_every_row_has_its_facts_and_cites_them(table):
    sources = json.loads(TABLE_FILE.read_text())["sources"]
    assert list(table) == ["5.1", "6.0", "6.1", "6.2", "7"]
    for jetpack, row in table.items():
        assert row["tensorrt"].startswith(row["tensorrt_major_minor"] + "."), jetpack
        assert set(row["pins"]) == set(PIN_ORDER) and all(row["pins"][n].startswith(n) for n in PIN_ORDER)
        assert re.fullmatch(r"\d+\.\d+\.\d+", row["onnxruntime"]) and re.fullmatch(r"3\.\d+", row["python"])
        assert row["container"] is None or re.fullmatch(r"nvcr\.io/nvidia/l4t-jetpack:r\d+\.\d+\.\d+", row["container"])
        assert re.fullmatch(r"/usr/lib/aarch64-linux-gnu/(tegra|nvidia)/libcuda\.so\.1", row["driver_lib"]), jetpack
        assert all(re.fullmatch(r"R\d+\.\d+(\.\d+)?", r) and re.fullmatch(r"\d+(\.\d+)*(\.x)?", n)
                   for r, n in row["l4t"].items()), jetpack
        for fact in ("l4t", "tensorrt", "modules", "pins", "onnxruntime", "container", "driver_lib"):
            assert row["sources"][fact], (jetpack, fact)
    assert table["7"]["modules"] == {"Thor": 110} and "SM110" in sources["cuda-13.0-sm110"]
    keys = [r for row in table.values() for r in row["l4t"]]
    assert len(keys) == len(set(keys)), "an L4T release in two rows"


def test_r36_5_is_a_jetpack_6_2_release(table):
    """Item 7: Orin NX units ship with L4T R36.5 (JetPack 6.2.2 by NVIDIA's own nvidia-jetpack package), which has
    R36.4's TensorRT 10.3 and CUDA 12.6."""
    from mlit_edge.devices.profiles import match_release

    assert match_release("R36.5.0", table) == ("6.2", "6.2.2") and match_release("R36.5.2", table) == ("6.2", "6.2.x")
    assert match_release("R36.2.0", table) is None and match_release("R39.0.0", table) is None


# --- the package --------------------------------------------------------------------------------------------------
def test_profiles_are_the_rows(table):
    from mlit_edge.devices.profiles import JETPACKS, PARSER, PROFILES, TENSORRTS, l4t_lines

    assert JETPACKS == tuple(table) and set(PARSER) == set(table)
    for jetpack, row in table.items():
        p = PROFILES[f"jetpack-{jetpack}"]
        assert (p.jetpack, p.tensorrt, p.cuda, p.l4t) == (jetpack, row["tensorrt_major_minor"], row["cuda"],
                                                           l4t_lines(row["l4t"]))
        assert TENSORRTS[p.tensorrt] == max((f"jetpack-{j}" for j, r in table.items()
                                             if r["tensorrt_major_minor"] == p.tensorrt), key=list(PROFILES).index)
    assert PROFILES["jetpack-5.1"].l4t == "R35.2-R35.6" and PROFILES["jetpack-6.2"].l4t == "R36.4, R36.5"


def test_parser_facts_are_kept_as_before():
    """The opset, LayerNorm, TopK and typing of each profile come from the parser tables, not the JSON."""
    from mlit_edge.devices.profiles import PROFILES

    facts = {name: (p.max_opset, p.opset, p.layernorm, p.topk_k_initializer, p.strongly_typed)
             for name, p in PROFILES.items()}
    strong = (20, 18, "native", False, True)
    assert facts == {"jetpack-5.1": (17, 17, "decomposed", True, False),
                     "jetpack-6.0": (17, 17, "native", False, False), "jetpack-6.1": strong, "jetpack-6.2": strong, "jetpack-7": strong, "tensorrt-10": strong}


def test_jetson_sm_is_the_rows_modules(table):
    from mlit_edge.devices.mha_rules import JETSON_SM, sm_rule

    assert JETSON_SM == {j: tuple(row["modules"].items()) for j, row in table.items()}
    assert JETSON_SM["7"] == (("Thor", 110),) and sm_rule("7") == (None, "SM >= 75 (DG): met on Thor (SM 11.0)")
    assert "not on Xavier (SM 7.2)" in sm_rule("5.1")[1]


# --- the script: it reads the table, so a copy with one more line is all a new release needs ---------------------
FAKE_PYTHON3 = """#!/bin/sh
case "$*" in
  *"import tensorrt"*) [ -n "$FAKE_TRT" ] || exit 1; echo "$FAKE_TRT" ;;
  *version_info*) echo "$FAKE_PYTHON" ;;
  "- "*) exec "$REAL_PYTHON" "$@" ;;
  *) echo "fake python3: unexpected $*" >&2; exit 2 ;;
esac
"""


def run_script(tmp_path: Path, source: Path, release: str, python: str, trt: str) -> subprocess.CompletedProcess:
    """install-jetson.sh SOURCE with DRY_RUN=1 and L4T_RELEASE on a fake device whose python3 reports `python` and
    TensorRT `trt` (the one the script reads the table with is this interpreter)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "python3").write_text(FAKE_PYTHON3)
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "DRY_RUN": "1", "L4T_RELEASE": release,
           "PREFIX": str(tmp_path / "prefix"), "FAKE_PYTHON": python, "FAKE_TRT": trt, "REAL_PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), str(source)], capture_output=True, text=True, env=env)


def releases_of(release_key: str) -> str:
    return release_key + ".0" if release_key.count(".") == 1 else release_key


def test_the_script_installs_each_release_as_its_row_says(table, tmp_path):
    """Every L4T key of every row, and each row's container tag (the Dockerfile passes its release), through the
    script: the row's JetPack name, TensorRT, CUDA, profile, pins and ONNX Runtime."""
    for jetpack, row in table.items():
        tags = [f"R{row['container'].split(':r')[1]}"] if row["container"] else []
        for release in [releases_of(k) for k in row["l4t"]] + tags:
            proc = run_script(tmp_path / release, ROOT, release, row["python"], row["tensorrt"])
            assert proc.returncode == 0, (release, proc.stderr)
            head = proc.stdout.splitlines()[0]
            assert f"(L4T {release}): TensorRT {row['tensorrt_major_minor']}, CUDA {row['cuda']}, profile" in head, head
            if release not in tags:  # a tag's release may be another row's with the same TensorRT (r36.4.0: 6.1's)
                assert head.endswith(f"profile jetpack-{jetpack}"), head
            pip = [line.split() for line in proc.stdout.splitlines() if "would run:" in line and " install " in line]
            assert set(row["pins"].values()) <= set(pip[2]), (release, pip)
    one = run_script(tmp_path / "one", ROOT, "R36.5.0", "3.10", "10.3.0.30")
    assert one.stdout.startswith("install-jetson: JetPack 6.2.2 (L4T R36.5.0): TensorRT 10.3, CUDA 12.6, profile "
                                 "jetpack-6.2\n"), one.stdout


def test_a_new_l4t_release_is_one_line_of_the_table(tmp_path):
    """A copy of the source whose table has one line more: the script takes the new release, with no other edit
    (the script itself is the checkout's)."""
    source = tmp_path / "src"
    (source / "mlit_edge" / "devices").mkdir(parents=True)
    text = TABLE_FILE.read_text()
    shutil.copy(TABLE_FILE, source / "mlit_edge" / "devices" / "jetpacks.json")
    before = run_script(tmp_path / "before", source, "R36.6.0", "3.10", "10.3.0.30")
    assert before.returncode != 0 and "L4T R36.6.0 is not a supported release" in before.stderr
    anchor = '        "R36.5.0": "6.2.2"\n'
    assert anchor in text
    added = text.replace(anchor, '        "R36.5.0": "6.2.2",\n        "R36.6.0": "6.2.9"\n')
    assert len(added.splitlines()) == len(text.splitlines()) + 1
    (source / "mlit_edge" / "devices" / "jetpacks.json").write_text(added)
    after = run_script(tmp_path / "after", source, "R36.6.0", "3.10", "10.3.0.30")
    assert after.returncode == 0, after.stderr
    assert after.stdout.splitlines()[0] == ("install-jetson: JetPack 6.2.9 (L4T R36.6.0): TensorRT 10.3, CUDA 12.6, "
                                            "profile jetpack-6.2")


def test_the_script_keeps_no_table_of_its_own():
    script = SCRIPT.read_text()
    assert "mlit_edge/devices/jetpacks.json" in script
    assert not re.search(r"^\s*3[5-9]\.[0-9\[*]", script, re.M), "a case on L4T releases in the script"
    assert not re.search(r"(cuda-python|numpy|pillow|click)[=<>]=?\d", script), "a pin in the script"


def test_the_refusal_names_the_rows_as_the_profiles_do(tmp_path):
    from mlit_edge.devices.profiles import PROFILES

    proc = run_script(tmp_path, ROOT, "R34.1.1", "3.8", "8.5.2.2")
    rows = ", ".join(f"JetPack {p.jetpack} ({p.l4t})" for p in PROFILES.values() if p.jetpack)
    assert proc.stderr == f"install-jetson: L4T R34.1.1 is not a supported release: {rows} " \
                          f"(mlit_edge/devices/jetpacks.json)\n"


# --- the Dockerfile and the docs -------------------------------------------------------------------------------
def test_dockerfile_default_is_the_newest_rows_container(table):
    default = re.search(r"^ARG L4T_IMAGE=(\S+)$", (ROOT / "deploy" / "Dockerfile").read_text(), re.M).group(1)
    assert default == [row["container"] for row in table.values() if row["container"]][-1]


def test_readme_tables_are_the_json(table):
    want = readme_tables(table)
    assert want in README.read_text(), f"deploy/README.md's tables differ from jetpacks.json; they should read:\n{want}"


def test_export_and_build_table_is_the_json(table):
    """docs/export-and-build.md's profile table: JetPack, L4T, TensorRT and profile from the JSON, opset and typing
    from the profiles."""
    from mlit_edge.devices.profiles import PROFILES

    rows = {}
    for line in BUILD_DOC.read_text().split("## Every JetPack: device profiles", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 10 and cells[0] in table:
            rows[cells[0]] = cells
    assert list(rows) == list(table)
    for jetpack, cells in rows.items():
        p, row = PROFILES[f"jetpack-{jetpack}"], table[jetpack]
        assert cells[1:5] == [p.l4t, row["tensorrt"], f"`{p.name}`", str(p.opset)], cells[:5]
        assert cells[7].startswith("strong" if p.strongly_typed else "weak"), cells[7]


if __name__ == "__main__":
    print(readme_tables(json.loads(TABLE_FILE.read_text())["jetpacks"]))
