"""Hostile round 4 (issue 47), the weights surface beyond a CLI replay: `export-weights --force` killed with
SIGKILL between the renames of its pair, bounded reads (a 2 GiB sparse config.json, a /proc file whose
stat says 0 bytes, a FIFO), and the recovery of a torn weights pair through the API."""
import json
import os
import resource
import signal
import subprocess

import pytest
import torch

from mlit_edge.model.mlit import MLiT
from mlit_edge.artifacts.sidecar import recover_publishes
from mlit_edge.base.textfile import read_bytes, read_json
from mlit_edge.train.checkpoint import load_checkpoint, make_checkpoint, save_atomic
from mlit_edge.train.export_weights import export_weights
from tests.helpers import CLI, ENV, ROOT, run_cli
from tests.hostile_r4_weights import sparse
from tests.helpers import KILL_AT  # noqa: E402  the one SIGKILL-at-a-rename shim

META = {"name": "toy", "classes": list("abcde"), "mean": [0.5] * 3, "std": [0.25] * 3, "img_size": 12}


def _checkpoints(tmp_path, cfg):
    """Two checkpoints of one config with different weights."""
    paths = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        path = tmp_path / f"ckpt{seed}.pt"
        save_atomic(make_checkpoint("mlit", MLiT(cfg), cfg, None, META), path)
        paths.append(path)
    return paths


def _same(ckpt: dict, source) -> bool:
    state = torch.load(source, weights_only=True)["model"]
    return all(torch.equal(state[k], ckpt["model"][k]) for k in state)


@pytest.mark.slow
@pytest.mark.parametrize("suffix, which", [("model.safetensors", "old"), ("config.json", "new")])
def test_a_kill_between_the_renames_of_a_weights_pair_leaves_a_pair_that_loads(tmp_path, tiny_cfg, suffix, which):
    """SIGKILL before the weights' rename keeps the old pair; one between the weights' rename and the
    config's leaves the new weights with their pending config, which loads. The next run leaves no
    temporaries and no pending config."""
    old, new = _checkpoints(tmp_path, tiny_cfg)
    out = tmp_path / "pair"
    export_weights(str(old), out)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_AT.format(suffix=suffix))
    args = [*CLI, "export-weights", str(new), "--out", str(out), "--force"]
    killed = subprocess.run(args, capture_output=True, text=True,
                            env={**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (out / ".config.json.pending").is_file()  # the kill left its traces
    if which == "old":
        assert list(out.glob(".model.safetensors.*.tmp"))
    ckpt = load_checkpoint(out / "model.safetensors")  # the weights with the config that matches them
    assert _same(ckpt, old if which == "old" else new)
    run_cli(*args[len(CLI):])  # the next run, in this process: only the killed one needs a process of its own
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert _same(load_checkpoint(out / "model.safetensors"), new)


def test_recovery_completes_a_torn_weights_pair_and_drops_a_stale_pending_config(tmp_path, tiny_cfg):
    old, new = _checkpoints(tmp_path, tiny_cfg)
    export_weights(str(old), tmp_path / "a")
    export_weights(str(new), tmp_path / "b")
    os.replace(tmp_path / "b" / "model.safetensors", tmp_path / "a" / "model.safetensors")
    os.replace(tmp_path / "b" / "config.json", tmp_path / "a" / ".config.json.pending")
    assert _same(load_checkpoint(tmp_path / "a" / "model.safetensors"), new)
    assert recover_publishes(tmp_path / "a") == ["completed config.json"]
    assert json.loads((tmp_path / "a" / "config.json").read_text())["provenance"]["checkpoint"] == str(new)
    (tmp_path / "a" / ".config.json.pending").write_text('{"format": "mlit-edge-weights", "weights": {}}')
    assert recover_publishes(tmp_path / "a") == ["dropped an unfinished config.json"]
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["README.md", "config.json", "model.safetensors"]


def test_a_2_gib_config_is_refused_before_it_is_read(tmp_path, tiny_cfg):
    old, _ = _checkpoints(tmp_path, tiny_cfg)
    export_weights(str(old), tmp_path / "w")
    sparse(tmp_path / "w" / "config.json")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ValueError, match=r"^refused config.json .*: it holds 2147483648 bytes \(2048.0 MiB\), over "
                                         r"the limit of 4194304 bytes \(4.0 MiB\) for a config.json$"):
        load_checkpoint(tmp_path / "w" / "model.safetensors")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB: not 3.3 GB


def test_the_cap_bounds_the_read_not_only_the_stat(tmp_path):
    """/proc files say 0 bytes to stat(2), and a file may grow after it: the read itself stops at the limit."""
    with pytest.raises(ValueError, match="over the limit of 16 bytes for a status file"):
        read_bytes("/proc/self/status", "status file", 16)
    assert read_bytes("/proc/self/status", "status file").startswith(b"Name:")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match=r"^recipe .*fifo.json .*FIFO"):
        read_json(fifo, "recipe")  # returns at once: the FIFO is never opened for a blocking read
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        read_json(deep, "sidecar")
    junk = tmp_path / "junk.json"
    junk.write_bytes(b"\xff\x1b[2J")
    with pytest.raises(ValueError, match=r"^sidecar .*junk.json is not valid JSON \(not UTF-8 at byte 0\); redo$"):
        read_json(junk, "sidecar", hint="redo")
