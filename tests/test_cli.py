import json

from click.testing import CliRunner

from mlit_edge.cli import main
from tests.helpers import run_cli


def test_info_prints_per_layer_table():
    result = CliRunner().invoke(main, ["info", "--size", "xxs"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].split()[:3] == ["layer", "hidden", "experts"]
    rows = [line.split() for line in lines if line.strip() and line.split()[0].isdigit()]
    assert [int(r[1]) for r in rows] == [81, 74, 67, 60, 54, 47, 40, 33, 27]
    assert "total: 659,357 parameters" in result.output
    # the deploy graph's last layer is for the dummy token alone (export/last_token.py); every token: 131.0M
    assert "120.1M dense" in result.output and "131.0M with every token" in result.output
    assert "vs paper" in result.output


def test_info_json_totals_agree_with_rows():
    result = CliRunner().invoke(main, ["info", "--size", "xs", "--json"])
    data = json.loads(result.output)
    layers = data["layers"]
    assert len(layers) == 12
    assert data["params"] == sum(r["params"] for r in layers) + data["embed_params"] + data["head_params"]
    assert abs(data["paper"]["delta_pct"]) < 2
    assert [r["tokens"] for r in layers] == [145] * 11 + [1]  # the last layer: the dummy token alone
    assert data["macs"] < data["macs_all_tokens"] == data["macs"] + layers[-1]["macs_all_tokens"] - layers[-1]["macs"]


def test_bad_size_is_one_line_error_with_valid_names():
    proc = run_cli("info", "--size", "huge", check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == ["Error: unknown model size 'huge'; valid sizes: s, xs, xxs"]
    assert "Traceback" not in proc.stderr


def test_help_explains_commands():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0 and "info" in result.output
    assert "MACs" in CliRunner().invoke(main, ["info", "--help"]).output


def test_readme_has_two_setup_commands_and_ci_runs_the_test_one():
    """The README's fresh-machine commands: exactly two, the main job and the tests, and `.ci/run`
    runs the test command verbatim (so CI tests what the README tells users to run)."""
    from pathlib import Path

    root = Path(__file__).parent.parent
    readme = root.joinpath("README.md").read_text()
    setup = readme.split("## Set-up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in setup.splitlines() if line.startswith("python3 -m venv")]
    assert len(commands) == 2, commands
    main_job, tests = commands
    assert main_job.endswith("mlit-edge quickstart") and tests.endswith("python -m pytest")
    ci = [line for line in root.joinpath(".ci/run").read_text().splitlines() if not line.startswith("#")]
    assert tests in ci
