"""Hostile round 4 (issue 47), the DeepStream surface beyond CLI replays: `export-deepstream` and `export-triton`
killed at their last rename (SIGKILL leaves the staging folder, which the next run removes; SIGTERM leaves
nothing), the staging sweep leaving alone what is not a dead run's, and GLib's own parser on the key-file
checker's verdicts."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mlit_edge.stacks.glib_keyfile import KeyFileError, keyfile_text, value_problem
from mlit_edge.artifacts.staging import MARK, sweep
from tests.helpers import ENV, python_with_gi

pytest.importorskip("onnx")

# the CLI in a process that sends itself `sig` when it renames its staging folder to the final path (argv[1])
KILLED_AT_RENAME = """
import os, signal, sys
real = os.rename
def rename(src, dst, *a, **kw):
    if os.fspath(dst) == sys.argv[1]:
        os.kill(os.getpid(), getattr(signal, sys.argv[2]))
    return real(src, dst, *a, **kw)
os.rename = rename
from mlit_edge.cli import main
main(sys.argv[3:])
"""


def _run_killed(final: Path, sig: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", KILLED_AT_RENAME, str(final), sig, *map(str, args)],
                          capture_output=True, text=True, env=ENV, timeout=300)


def _staging(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if MARK in p.name)


def _commands(tiny_onnx: Path, parent: Path, out: str) -> tuple[Path, list]:
    """(the final path, the CLI arguments) of each export writing `out` under `parent`."""
    return {"deepstream": (parent / out, ["export-deepstream", tiny_onnx, "--out", parent / out]),
            "triton": (parent / out / "m", ["export-triton", tiny_onnx, "--repo", parent / out, "--name", "m"])}


@pytest.mark.parametrize("command", ["deepstream", "triton"])
def test_a_kill_at_the_last_rename_leaves_staging_that_the_next_run_removes(command, tiny_onnx, tmp_path):
    if command == "triton":
        pytest.importorskip("tritonclient")
    final, args = _commands(tiny_onnx, tmp_path, "first")[command]
    r = _run_killed(final, "SIGKILL", *args)
    assert r.returncode == -signal.SIGKILL and not final.exists()
    left = _staging(final.parent)
    assert len(left) == 1 and left[0].startswith(f".{final.name}{MARK}"), left  # what the issue saw: left for good
    # the next run in the same folder: another --out beside it, or the same model again in the same repository
    final2, args2 = _commands(tiny_onnx, tmp_path, "second" if command == "deepstream" else "first")[command]
    r = subprocess.run([sys.executable, "-m", "mlit_edge.cli", *map(str, args2)], capture_output=True, text=True,
                       env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr
    assert final2.is_dir() and _staging(final.parent) == []


@pytest.mark.parametrize("command", ["deepstream", "triton"])
def test_sigterm_at_the_last_rename_leaves_nothing(command, tiny_onnx, tmp_path):
    if command == "triton":
        pytest.importorskip("tritonclient")
    final, args = _commands(tiny_onnx, tmp_path, "out")[command]
    r = _run_killed(final, "SIGTERM", *args)
    assert r.returncode == 128 + signal.SIGTERM and "terminated" in r.stderr and "Traceback" not in r.stderr
    assert not final.exists() and _staging(final.parent) == []


def test_the_sweep_leaves_live_runs_links_and_other_names_alone(tmp_path):
    import fcntl

    live = tmp_path / f".out{MARK}{os.getpid()}-abc12345"  # ours, locked: a run writing it now
    live.mkdir()
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    fresh = tmp_path / f".new{MARK}{os.getpid()}-def67890"  # unlocked, but its process lives and it is new
    fresh.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "theirs.txt").write_text("keep")
    (tmp_path / f".link{MARK}999999999-aaaa0000").symlink_to(elsewhere, target_is_directory=True)
    other = tmp_path / ".out.partial"  # a name this module never makes
    other.mkdir()
    dead = tmp_path / f".dead{MARK}999999999-bbbb1111"  # no such pid, lock free: a killed run's
    (dead / "1").mkdir(parents=True)
    try:
        assert sweep(tmp_path) == [dead]
    finally:
        os.close(fd)
    assert live.is_dir() and fresh.is_dir() and other.is_dir() and (elsewhere / "theirs.txt").read_text() == "keep"
    old = os.stat(fresh).st_mtime - 2 * 3600  # an hour-old folder whose lock is free: its pid was reused
    os.utime(fresh, (old, old))
    assert sweep(tmp_path) == [fresh] and live.is_dir()  # live: its process (this one) runs, and it is new


# g_key_file_get_string, as nvinfer reads onnx-file, on one file: {group: {key: string}}, or None if GLib refuses it
GET_STRINGS = """
import json, sys
from gi.repository import GLib
kf = GLib.KeyFile()
try:
    kf.load_from_file(sys.argv[1], GLib.KeyFileFlags.NONE)
    print(json.dumps({g: {k: kf.get_string(g, k) for k in kf.get_keys(g)[0]} for g in kf.get_groups()[0]}))
except GLib.Error:
    print("null")
"""


def glib_strings(path: Path):
    import json

    proc = subprocess.run([python_with_gi(), "-c", GET_STRINGS, str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("value, glib_reads_it", [
    ("a\n[property]\ncustom-lib-path=x", False), (" lead", False), ("back\\slash", False), ("cr\r", False),
    ("bad\udcff", False), ("trail ", True), ("tab\tbed", True), ("nbsp\u00a0", True), ("ls\u2028", True)])
def test_every_value_the_checker_refuses_glib_reads_otherwise_or_is_invisible(value, glib_reads_it, tmp_path):
    """The checker's verdicts held against GLib itself: each refused value, written raw, is read back by
    g_key_file_get_string as something else (or the file is refused), except the invisible ones, which GLib
    reads as written and our own rule refuses."""
    assert value_problem(value) is not None
    with pytest.raises(KeyFileError):
        keyfile_text(["[property]", f"onnx-file={value}"], "config")
    raw = tmp_path / "raw.txt"
    raw.write_bytes(f"[property]\nonnx-file={value}\n".encode("utf-8", "surrogateescape"))
    assert (glib_strings(raw) == {"property": {"onnx-file": value}}) == glib_reads_it


@pytest.mark.parametrize("value", ["model-probabilities.onnx", "file:///opt/v%%20x.mp4", "é∑ names", "a;b"])
def test_what_the_checker_allows_glib_reads_as_written(value, tmp_path):
    path = tmp_path / "ok.txt"
    path.write_text(keyfile_text(["# a comment", "[property]", f"onnx-file={value}"], "config"))
    assert glib_strings(path) == {"property": {"onnx-file": value}}
