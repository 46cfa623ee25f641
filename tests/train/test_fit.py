"""End-to-end training runs through the CLI on tiny models: in subprocesses where processes are the point (torchrun,
kill -9), in this process where a command's files, messages and exit status are."""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mlit_edge.train.data import Loader
from tests.helpers import CLI, ENV, TINY, run_cli, synthetic_set, tiny_step_model

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_process_gloo_ddp_gradients_match_one_process(tmp_path):
    out = tmp_path / "grads.pt"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={_free_port()}", str(Path(__file__).parent / "ddp_step.py"), str(out)],
                          capture_output=True, text=True, env={**ENV, "PYTHONPATH": f"{ENV['PYTHONPATH']}:"
                                                                f"{Path(__file__).parent}"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = torch.load(out, weights_only=True)
    model = tiny_step_model()
    loader = Loader(synthetic_set(), 8, train=True, seed=0, augment=False)  # the same global batch of 8
    loader.set_epoch(0)
    x, y = next(iter(loader))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(ddp[name], p.grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.slow
def test_torchrun_training_writes_from_rank_zero_only(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={_free_port()}", "-m", "mlit_edge.cli", "train", *TINY, "--epochs", "1",
                           "--batch-size", "256", "--out", tmp_path / "run", "--no-progress"],
                          capture_output=True, text=True, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("2 process(es)") == 1  # rank 0 logs, rank 1 stays quiet
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert len(ckpt["rng"]) == 2 and ckpt["epoch"] == 1


def _weights(path: Path) -> dict:
    return torch.load(path, weights_only=True)["model"]


@contextlib.contextmanager
def _one_thread():
    """torch on one thread for the block (as the subprocesses' OMP_NUM_THREADS=1 has it), then as it was."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_resume_after_kill_9_is_bitwise_identical(tmp_path):
    # a class-balanced fifth of the split (--labels-per-class): resume is exercised the same, at a fifth the cost
    common = ["train", *TINY, "--epochs", "2", "--batch-size", "100", "--deterministic", "--no-progress",
              "--eval-every", "2", "--labels-per-class", "80"]
    with _one_thread():  # the straight run and the resume in this process, on the killed child's one thread
        run_cli(*common, "--out", tmp_path / "straight")

    run = tmp_path / "killed"
    proc = subprocess.Popen([*CLI, *map(str, common), "--out", str(run)], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (run / "checkpoint.pt").exists():
        assert proc.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    epoch_at_kill = torch.load(run / "checkpoint.pt", weights_only=True)["epoch"]
    assert epoch_at_kill < 2, "killed too late to test anything"

    with _one_thread():
        run_cli(*common, "--out", run, "--resume")
    a, b = _weights(tmp_path / "straight" / "checkpoint.pt"), _weights(run / "checkpoint.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1]  # no duplicate or missing epochs in the log


@pytest.mark.slow
def test_pretrain_then_finetune_on_embedded_data(tmp_path):
    decoder = ["--set", "dec_dim=12", "--set", "dec_heads=2", "--set", "dec_groups=1", "--set", "dec_hidden=8"]
    run_cli("pretrain", *TINY, *decoder, "--epochs", "2", "--batch-size", "200", "--lr", "2e-3", "--no-progress",
            "--out", tmp_path / "pre")
    rows = [json.loads(line) for line in (tmp_path / "pre" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["train"]["loss"] < rows[0]["train"]["loss"]
    assert (tmp_path / "pre" / "loss.png").stat().st_size > 0 and (tmp_path / "pre" / "experts.png").exists()
    assert (tmp_path / "pre" / "reconstruction.png").stat().st_size > 0  # MAE's figure, at each eval and the end
    assert len(rows[-1]["experts"]) == 3 + 2  # encoder and decoder MoE layers
    assert torch.load(tmp_path / "pre" / "checkpoint.pt", weights_only=True)["config"]["dec_dim"] == 12
    proc = run_cli("finetune", "--from", tmp_path / "pre" / "checkpoint.pt", "--epochs", "1", "--batch-size", "200",
                   "--labels-per-class", "40", "--no-progress", "--out", tmp_path / "ft")  # few labels
    assert "final test top-1" in proc.stdout
    ckpt = torch.load(tmp_path / "ft" / "checkpoint.pt", weights_only=True)
    assert ckpt["kind"] == "mlit" and ckpt["config"]["num_classes"] == 10 and ckpt["config"]["dim"] == 12
    proc = run_cli("eval", "--checkpoint", tmp_path / "ft" / "checkpoint.pt", "--json")
    result = json.loads(proc.stdout)
    assert result["images"] == 1000 and 0 <= result["top1"] <= 1 and len(result["experts"]) == 3


@pytest.mark.parametrize("args,message", [
    (["finetune", "--from", "MISSING.pt"], "does not exist"),
    (["train", "--set", "depth=x"], "not a valid int"),
    (["train", "--set", "colour=red"], "expected KEY=VALUE"),
    (["train", "--set", "dec_dim=12"], "only pretrain builds"),
    (["train", "--labels-per-class", "0"], "must be at least 1"),
    (["train", "--labels-per-class", "401"], "has only 400 training images"),
    (["train", "--data", "imagenet"], "unknown dataset"),
    (["train", "--resume"], "nothing to resume"),
    (["train", "--amp", "fp16", "--device", "cpu"], "needs a CUDA GPU"),
    (["eval", "--checkpoint", "MISSING.pt"], "does not exist"),
])
def test_bad_input_is_a_one_line_error(tmp_path, args, message):
    """In-process, through click's runner: the command, its checks and its one-line error are the CLI's own, and
    a subprocess per case (a torch import each) would prove nothing more. An exception that escaped the command
    would be `r.exception` (the subprocess's traceback), not click's SystemExit."""
    from click.testing import CliRunner

    from mlit_edge.cli import main

    deterministic, benchmark = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
    try:
        r = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "x")] if args[0] != "eval" else args)
    finally:  # a check that fails after `train` set these must not leave them set for the worker's next tests
        torch.use_deterministic_algorithms(deterministic)
        torch.backends.cudnn.benchmark = benchmark
    assert r.exit_code != 0 and isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("Error:") and message in last


@pytest.mark.slow
def test_existing_run_is_not_overwritten_and_wrong_resume_is_refused(tmp_path):
    run = tmp_path / "run"
    run_cli("train", *TINY, "--epochs", "1", "--batch-size", "500", "--no-progress", "--out", run)
    before = (run / "checkpoint.pt").read_bytes()
    assert torch.load(run / "checkpoint.pt", weights_only=True)["size"] == "xxs-custom"  # --set changed the model
    proc = run_cli("train", *TINY, "--epochs", "1", "--out", run, check=False)
    assert proc.returncode != 0 and "--resume" in proc.stderr
    proc = run_cli("train", "--epochs", "1", "--out", run, "--resume", check=False)  # a different (real-size) model
    assert proc.returncode != 0 and "this run is mlit-xxs" in proc.stderr
    proc = run_cli("finetune", "--from", run / "checkpoint.pt", "--out", tmp_path / "ft", check=False)
    assert proc.returncode != 0 and "mmLiT pre-training checkpoint is needed" in proc.stderr
    assert (run / "checkpoint.pt").read_bytes() == before


def test_a_checkpoint_written_before_a_config_field_existed_still_resumes(tiny_cfg, tmp_path):
    """A field added later (here `pos_init`) is missing from an older checkpoint's config: resuming compares it
    at its default, while a real difference is still refused."""
    from types import SimpleNamespace

    from mlit_edge.train import checkpoint as ck
    from mlit_edge.train.run_folder import check_resume

    old = ck.config_to_dict(tiny_cfg)
    del old["pos_init"]
    data = SimpleNamespace(name="mnist5k")
    state = {"optimizer": {}, "scheduler": {}, "rng": [], "epoch": 1}
    check_resume({"kind": "mlit", "config": old, "data": {"name": "mnist5k"}, **state}, "mlit", tiny_cfg, "xxs", data,
                  tmp_path / "checkpoint.pt")
    with pytest.raises(ck.CheckpointError, match="holds a"):
        check_resume({"kind": "mlit", "config": old, "data": {"name": "mnist5k"}}, "mlit",
                      tiny_cfg.replace(pos_init="sincos"), "xxs", data, tmp_path / "checkpoint.pt")


@pytest.mark.slow
def test_few_label_training_records_its_subset_and_resumes_only_on_it(tmp_path):
    """`--labels-per-class`: the run trains on that many images of each class, records the draw in its
    checkpoint and metrics.jsonl, and refuses to continue on another draw."""
    common = ["train", *TINY, "--labels-per-class", "10", "--subset-seed", "3", "--batch-size", "20", "--no-progress"]
    run_cli(*common, "--epochs", "1", "--out", tmp_path / "run")
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert ckpt["subset"] == row["subset"] and row["subset"]["images"] == 100
    assert ckpt["subset"]["labels_per_class"] == 10 and ckpt["subset"]["seed"] == 3
    other = run_cli("train", *TINY, "--labels-per-class", "10", "--subset-seed", "4", "--batch-size", "20",
                    "--no-progress", "--epochs", "2", "--out", tmp_path / "run", "--resume", check=False)
    assert other.returncode == 1 and "another labelled subset" in other.stderr and "Traceback" not in other.stderr
    run_cli(*common, "--epochs", "2", "--out", tmp_path / "run", "--resume")  # the same draw continues
    from mlit_edge.train.run_config import RunConfig

    with pytest.raises(ValueError, match="pre-training uses every image"):  # pretrain has no such option
        RunConfig(task="pretrain", labels_per_class=10)
