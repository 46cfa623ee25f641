"""Hostile input and faults: the corpus replayed through the CLI, the inbox service under a slow writer,
a vanishing file and a bomb, builds that must not replace good artifacts, kills between the two
renames of a pair, concurrent builds, and bounded memory."""
import hashlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("onnxruntime")
Image = pytest.importorskip("PIL.Image")

from tests.hostile_corpus import make_corpus, png_bomb  # noqa: E402
from mlit_edge.cli import main  # noqa: E402
from mlit_edge.runtime import Classifier  # noqa: E402
from mlit_edge.artifacts.sidecar import read_sidecar  # noqa: E402
from tests.helpers import CLI, ENV, KILL_AT, ROOT, run_cli  # noqa: E402



def sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def hashes(folder: Path) -> dict[str, str]:
    return {p.name: sha(p) for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def good(trained_onnx, trained_checkpoint) -> tuple[Path, Path]:
    """A trained artifact pair (.onnx + sidecar) and its checkpoint (tests/conftest.py)."""
    return trained_onnx, trained_checkpoint[1]


def replay(cases, art: Path, corpus: Path) -> list[str]:
    """Run each case through the CLI in this process: the problems, one line per case that did not get its
    outcome (exit code, one `Error:` line with its phrase, no traceback or raw escape code, files kept)."""
    runner, failures = CliRunner(), []
    for case in cases:
        kept = {path: sha(path) for path in case.extra.get("unchanged", ())}
        r = runner.invoke(main, case.args, env=case.extra.get("env"))
        text = r.output + r.stderr
        problems = []
        if r.exit_code != case.exit_code:
            problems.append(f"exit {r.exit_code}, expected {case.exit_code}")
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            problems.append(f"raised {type(r.exception).__name__}: {r.exception}")
        if "Traceback" in text:
            problems.append("printed a traceback")
        if "\x1b" in text:
            problems.append("printed a raw escape code")
        if case.error and case.error not in text:
            problems.append(f"no {case.error!r} in {text[-300:]!r}")
        if case.exit_code == 1 and len([line for line in r.stderr.splitlines() if line.startswith("Error:")]) != 1:
            problems.append(f"not one error line: {r.stderr[-300:]!r}")
        if case.same_as:
            want = json.loads(runner.invoke(main, ["predict", case.same_as, "--model", str(art), "--json"]).output)[0]
            got = json.loads(r.output)[0]
            if (got.get("class_id"), round(got.get("prob", -1), 6)) != (want["class_id"], round(want["prob"], 6)):
                problems.append(f"predicted {got}, the 8-bit image gets {want}")
        if "no_folder" in case.extra and (corpus / case.extra["no_folder"]).exists():
            problems.append("left an output folder behind")
        changed = [path for path, digest in kept.items() if not Path(path).is_file() or sha(path) != digest]
        if changed:
            problems.append(f"changed {changed}")
        if "check" in case.extra and (problem := case.extra["check"]()):
            problems.append(problem)
        if problems:
            failures.append(f"{case.defect}: {case.name}: {'; '.join(problems)}")
    return failures


@pytest.mark.slow
def test_corpus_replays_with_one_line_errors_and_no_good_artifact_changed(good, tmp_path):
    art, ckpt = good
    cases = make_corpus(tmp_path / "corpus", art, ckpt)
    before = {**hashes(art.parent), "ckpt": sha(ckpt)}
    failures = replay(cases, art, tmp_path / "corpus")
    assert not failures, "\n".join(failures)
    assert {**hashes(art.parent), "ckpt": sha(ckpt)} == before  # nothing good was touched
    assert {c.defect for c in cases} == {"bomb", "modes", "sidecar", "memory", "checkpoint", "round2", "round3",
                                          "device", "runtime", "clobber", "triton", "minor"}
    assert len([c for c in cases if c.defect == "round3"]) >= 20 and len(cases) >= 144
    per_defect = {d: sum(c.defect == d for c in cases) for d in ("clobber", "triton")}
    assert per_defect["clobber"] >= 8 and per_defect["triton"] >= 12  # issue 35


# Round 4 (issue 47), one corpus module per surface, replayed side by side: tests/hostile_r4_<surface>.py
ROUND4 = {"check": 57, "deepstream": 39, "weights": 24, "api": 20, "device": 5}  # each surface's cases, at least


def test_every_round4_corpus_module_is_replayed():
    """A tests/hostile_r4_<surface>.py that ROUND4 does not name would never run."""
    found = {p.stem.removeprefix("hostile_r4_") for p in Path(__file__).parent.glob("hostile_r4_*.py")}
    assert found == set(ROUND4)


@pytest.mark.slow
@pytest.mark.parametrize("surface", ROUND4)
def test_round4_corpus_replays(good, tmp_path, surface):
    import importlib

    art, ckpt = good
    cases = importlib.import_module(f"tests.hostile_r4_{surface}").cases(tmp_path / "corpus", art, ckpt)
    assert len(cases) >= ROUND4[surface], f"{surface}: {len(cases)} cases, {ROUND4[surface]} expected"
    before = {**hashes(art.parent), "ckpt": sha(ckpt)}
    failures = replay(cases, art, tmp_path / "corpus")
    assert not failures, "\n".join(failures)
    assert {**hashes(art.parent), "ckpt": sha(ckpt)} == before


@pytest.mark.slow
def test_bomb_in_a_list_of_files_leaves_the_good_ones_classified(good, tmp_path):
    art, _ = good
    (tmp_path / "bomb.png").write_bytes(png_bomb())
    Image.fromarray(np.full((30, 30), 200, np.uint8)).save(tmp_path / "ok.png")
    r = CliRunner().invoke(main, ["predict", str(tmp_path / "bomb.png"), str(tmp_path / "ok.png"), "--model",
                                  str(art), "--json"])
    rows = json.loads(r.output)
    assert r.exit_code == 2 and "error" in rows[0] and "class_id" in rows[1]


@pytest.mark.slow
def test_serve_survives_a_slow_writer_a_vanishing_file_and_a_bomb(good, tmp_path, monkeypatch):
    from mlit_edge.runtime import serve

    art, _ = good
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    Image.fromarray(np.full((28, 28), 255, np.uint8)).save(tmp_path / "whole.jpg")
    jpeg = (tmp_path / "whole.jpg").read_bytes()
    real_read = serve.read_claimed

    def read_claimed(claimed, label, max_pixels):
        if label.name == "vanish.png":  # "vanish.png" disappears between its claim and its reading
            claimed.unlink()
        return real_read(claimed, label, max_pixels)

    monkeypatch.setattr(serve, "read_claimed", read_claimed)

    def writer():
        (inbox / "bomb.png").write_bytes(png_bomb())
        Image.fromarray(np.zeros((28, 28), np.uint8)).save(inbox / "vanish.png")
        with open(inbox / "slow.jpg", "wb") as f:  # a third of the JPEG, then the rest 1.5 s later
            f.write(jpeg[: len(jpeg) // 3])
            f.flush()
            time.sleep(1.5)
            f.write(jpeg[len(jpeg) // 3:])
        time.sleep(0.5)
        for i in range(2):  # later good files, dropped the documented safe way
            Image.fromarray(np.full((28, 28), 60 * i, np.uint8)).save(inbox / f".later{i}.png")
            os.replace(inbox / f".later{i}.png", inbox / f"later{i}.png")

    t = threading.Thread(target=writer)
    t.start()
    handled = serve.watch(art, inbox, tmp_path / "results.jsonl", interval_s=0.05, max_files=4, settle_s=0.3,
                          retry_s=3.0)
    t.join()
    rows = {r["path"]: r for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert handled == 4 and set(rows) == {"bomb.png", "slow.jpg", "later0.png", "later1.png"}
    assert "error" in rows["bomb.png"] and (inbox / "failed" / "bomb.png").is_file()
    assert "class_id" in rows["slow.jpg"] and (inbox / "done" / "slow.jpg").is_file()  # not judged corrupt
    assert all("class_id" in rows[f"later{i}.png"] for i in range(2))
    assert not (inbox / "vanish.png").exists() and "vanish.png" not in rows


@pytest.mark.parametrize("error", [MemoryError(), KeyError(), RuntimeError("")])
@pytest.mark.slow
def test_serve_keeps_serving_after_an_exception_with_an_empty_message(good, tmp_path, monkeypatch, error):
    """An unexpected error with no message on one file (MemoryError() has none) is recorded for that file
    by its type, and the next file is still classified: the loop does not die on the error line."""
    from mlit_edge.runtime import serve

    art, _ = good
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for name in ("a-poison.png", "b-fine.png"):
        Image.fromarray(np.full((28, 28), 200, np.uint8)).save(inbox / name)
    real_read = serve.read_claimed

    def read_claimed(claimed, label, max_pixels):
        if label.name == "a-poison.png":
            raise error
        return real_read(claimed, label, max_pixels)

    monkeypatch.setattr(serve, "read_claimed", read_claimed)
    handled = serve.watch(art, inbox, tmp_path / "results.jsonl", interval_s=0.01, max_files=2, settle_s=0.0)
    rows = {r["path"]: r for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert handled == 2 and rows["a-poison.png"]["error"] == f"internal error: {type(error).__name__}"
    assert "class_id" in rows["b-fine.png"] and (inbox / "failed" / "a-poison.png").is_file()


@pytest.mark.slow
def test_build_does_not_replace_an_artifact_of_another_source_without_force(trained_checkpoint, tmp_path):
    import torch

    from mlit_edge.train.checkpoint import load_checkpoint
    from tests.helpers import export_tiny

    _, ckpt = trained_checkpoint
    out = tmp_path / "out"

    def build(*args):
        return CliRunner().invoke(main, ["build", "--target", "onnxruntime", "--no-eval", "--out", str(out), *args])

    assert build("--checkpoint", str(ckpt), "--precision", "fp16").exit_code == 0
    kept = hashes(out)
    other = tmp_path / "other.pt"  # the same model size, other weights
    c = load_checkpoint(ckpt)
    c["model"] = {k: v + 0.01 if v.is_floating_point() else v for k, v in c["model"].items()}
    torch.save(c, other)
    r = build("--checkpoint", str(other), "--precision", "fp16")
    assert r.exit_code == 1 and "holds a model built from checkpoint" in r.stderr and "--force" in r.stderr
    # random weights named like the trained model: `build --onnx` names its output after its input
    random_onnx = tmp_path / "dev" / "mlit-xxs-custom-fp32.onnx"
    random_onnx.parent.mkdir()
    export_tiny(random_onnx)  # random weights, recorded as `export --random-weights` records them; a tiny graph
    r = build("--onnx", str(random_onnx), "--precision", "fp16")
    assert r.exit_code == 1 and "this build is from random weights" in r.stderr and len(r.stderr.splitlines()) <= 6
    assert hashes(out) == kept  # the trained pair and everything beside it, byte for byte
    r = build("--checkpoint", str(ckpt), "--precision", "fp16")  # the same source: no --force needed
    assert r.exit_code == 0 and "reusing" in r.stderr and hashes(out) == kept
    r = build("--checkpoint", str(other), "--precision", "fp16", "--force")
    assert r.exit_code == 0 and read_sidecar(out / "mlit-xxs-custom-fp16.onnx")["checkpoint_sha256"] == sha(other)


@pytest.mark.parametrize("suffix, which", [(".onnx", "old"), (".onnx.json", "new")])
@pytest.mark.slow
def test_a_kill_between_the_renames_of_a_pair_leaves_the_old_pair_or_the_new(good, tmp_path, suffix, which):
    """A SIGKILL just before the artifact's rename keeps the old pair; one between the artifact's rename
    and its sidecar's leaves the new artifact with its pending sidecar, which loaders accept and the
    next build completes. Never a new artifact with the old sidecar."""
    art, ckpt = good
    out = tmp_path / "out"
    args = ["build", "--checkpoint", str(ckpt), "--precision", "fp32", "--target", "onnxruntime", "--no-eval",
            "--out", str(out)]
    run_cli(*args, "--batch", "2")  # the build before and the one after in this process; the killed one in its own
    target = out / "mlit-xxs-custom-fp32-ort.onnx"
    old = sha(target)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_AT.format(suffix=suffix))
    killed = subprocess.run([*CLI, *args, "--batch", "1"], capture_output=True, text=True,
                            env={**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    record = read_sidecar(target)  # verifies the sha256 of the artifact on disk against the sidecar it picks
    assert (record["batch"] == 2 and sha(target) == old) if which == "old" else record["batch"] == 1
    with Classifier.load(target) as clf:
        assert clf.predict([np.zeros((28, 28), np.uint8)])[0].prob > 0
    run_cli(*args, "--batch", "1")
    assert read_sidecar(target)["batch"] == 1 and not list(out.glob(".*"))


@pytest.mark.slow
def test_concurrent_builds_into_one_folder_both_finish(trained_checkpoint, tmp_path):
    _, ckpt = trained_checkpoint
    out = tmp_path / "out"
    procs = [subprocess.Popen([*CLI, "build", "--checkpoint", str(ckpt), "--precision", p, "--target", "onnxruntime",
                               "--out", str(out), "--calib-n", "64", "--no-calib-cache"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=ENV) for p in ("int8", "fp16")]
    results = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [r[1][-1500:] for r in results]
    assert "waiting for another mlit-edge process" in results[0][1] + results[1][1]
    for p in ("fp32", "fp16", "int8-ort"):
        read_sidecar(out / f"mlit-xxs-custom-{p}.onnx")
    assert not list(out.glob(".*"))


def test_resize_runs_in_bounded_steps_with_the_same_result():
    from mlit_edge.artifacts.preprocess import resize_images

    frames = np.random.default_rng(0).integers(0, 256, (12, 48, 64, 3), dtype=np.uint8)
    whole = resize_images(frames, budget=1 << 40)
    assert np.array_equal(resize_images(frames, budget=4096), whole)  # one image, column slices
    assert np.array_equal(resize_images(frames, budget=48 * 64 * 3 * 8 * 5), whole)  # five images a step
    assert np.array_equal(resize_images(list(frames), budget=4096), whole)


@pytest.mark.slow
def test_classifier_after_close_and_unwritable_run_folder(good, tmp_path):
    art, _ = good
    clf = Classifier.load(art)
    clf.close()
    with pytest.raises(RuntimeError, match="was closed; load it again"):
        clf.predict([np.zeros((28, 28), np.uint8)])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    start = time.monotonic()
    r = CliRunner().invoke(main, ["train", "--epochs", "1", "--out", str(blocker / "run"), "--no-progress"])
    assert r.exit_code == 1 and "cannot write the run folder" in r.stderr and time.monotonic() - start < 60


@pytest.mark.parametrize("name", ["done", "failed"])
@pytest.mark.slow
def test_serve_starts_with_a_file_named_like_its_folders_in_the_inbox(good, tmp_path, name, capsys):
    """A file called `done` used to stop every start on "File exists": a crash loop under systemd. It is
    renamed, classified like any image, and the folders are made."""
    from mlit_edge.runtime import serve

    art, _ = good
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    Image.fromarray(np.full((28, 28), 255, np.uint8)).save(inbox / "x.png")
    (inbox / name).write_bytes((inbox / "x.png").read_bytes())
    assert serve.watch(art, inbox, tmp_path / "r.jsonl", interval_s=0.05, max_files=2, settle_s=0) == 2
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert sorted(r["path"] for r in rows) == sorted([f"{name}-1", "x.png"]) and all("class_id" in r for r in rows)
    assert (inbox / "done").is_dir() and (inbox / "failed").is_dir() and f"renamed it to {name}-1" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("claimed", ["a/../../escaped", "\x1b]0;PWNED\x07", "xxs"])
def test_a_checkpoint_s_size_field_never_names_a_file(trained_checkpoint, tmp_path, claimed):
    """The artifact name comes from a registered size (or `custom`), never from the checkpoint's field:
    no file outside --out, no escape code in a name or on the terminal."""
    import torch

    _, ckpt = trained_checkpoint
    state = torch.load(ckpt, weights_only=True)
    state["size"] = claimed
    evil = tmp_path / "evil.pt"
    torch.save(state, evil)
    (tmp_path / "out" / "mlit-a").mkdir(parents=True)  # the folder a traversal would go through
    proc = run_cli("build", "--checkpoint", evil, "--precision", "fp32", "--target", "onnxruntime", "--out",
                   tmp_path / "out")
    made = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file() and p != evil)
    stem = "mlit-xxs-custom" if claimed == "xxs" else "mlit-custom"  # the tiny config is not XXS's; others: custom
    assert made == [f"out/{stem}-fp32-ort.onnx", f"out/{stem}-fp32-ort.onnx.json"], made
    assert "\x1b" not in proc.stderr + proc.stdout + "".join(made)


@pytest.mark.slow
def test_serve_survives_any_name_in_its_inbox(good, tmp_path):
    """Names with a newline, a leading dash, 255 bytes, non-UTF-8 bytes, no extension, a file called `done`;
    and entries that are not regular files (a FIFO, a link to /dev/zero, a folder), which are never opened."""
    from mlit_edge.runtime import serve

    art, _ = good
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    image = Image.fromarray(np.full((28, 28), 200, np.uint8))
    names = ["a\nb.png", "-rf.png", "x" * 251 + ".png", "sp ace.png", "noext",
             b"\xff\xfe.png".decode("utf-8", "surrogateescape")]
    for name in names:
        image.save(inbox / name, format="PNG")
    (inbox / "done").write_bytes((inbox / "noext").read_bytes())
    (inbox / "subdir").mkdir()
    (inbox / "zero.png").symlink_to("/dev/zero")
    if hasattr(os, "mkfifo"):
        os.mkfifo(inbox / "fifo.png")
    start = time.monotonic()
    handled = serve.watch(art, inbox, tmp_path / "r.jsonl", interval_s=0.05, max_files=len(names) + 1, settle_s=0)
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert handled == len(names) + 1 and time.monotonic() - start < 120
    assert sorted(r["path"] for r in rows) == sorted([*names, "done-1"]) and all("class_id" in r for r in rows)
    assert {p.name for p in inbox.iterdir()} >= {"subdir", "zero.png"} and (inbox / "done").is_dir()
