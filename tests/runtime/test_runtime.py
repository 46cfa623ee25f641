"""The embedded runtime: no torch, the training eval preprocessing, the bench's predictions, bad input."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
Image = pytest.importorskip("PIL.Image")

from mlit_edge.train.data import Loader, load_dataset, mnist5k_raw  # noqa: E402
from mlit_edge.engine.plan import write_plan  # noqa: E402
from mlit_edge.runtime.runners import OnnxRuntimeRunner, predict_all  # noqa: E402
from mlit_edge.runtime import Classifier, InputError  # noqa: E402
from mlit_edge.artifacts.sidecar import sidecar_path  # noqa: E402
from tests.helpers import ENV, NO_TORCH, run_cli  # noqa: E402

# every test here runs the trained model (tests/conftest.py), whose training is most of the fast subset's budget
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_onnx(trained_onnx) -> Path:
    """The trained small mLiT (so predictions vary), exported with its sidecar (tests/conftest.py)."""
    return trained_onnx


def png(path: Path, array: np.ndarray) -> Path:
    Image.fromarray(array).save(path)
    return path


def test_runtime_and_predict_cli_never_import_torch(model_onnx, tmp_path):
    digit = mnist5k_raw("test")[0][0]
    img = png(tmp_path / "digit.png", digit)
    script = NO_TORCH + textwrap.dedent(f"""
        import numpy as np
        from mlit_edge.runtime import Classifier
        with Classifier.load({str(model_onnx)!r}) as clf:
            a = clf.predict([np.zeros((50, 70, 3), np.uint8), {str(img)!r}], top_k=3)
        from mlit_edge.cli import main
        try:
            main(["predict", {str(img)!r}, "--model", {str(model_onnx)!r}, "--json"])
        except SystemExit as e:
            assert e.code in (0, None), e.code
        assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules)
        print("OK", len(a), a[1].name)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "OK 2" in proc.stdout and '"class_id"' in proc.stdout


def test_preprocessing_equals_the_training_eval_preprocessing(model_onnx):
    raw, _ = mnist5k_raw("test")  # the original 28x28 digits
    with Classifier.load(model_onnx) as clf:
        got = clf.preprocess(list(raw[:200]))
    ds = load_dataset("mnist5k", "test")
    x, _ = next(iter(Loader(ds, 200, train=False)))  # what evaluation feeds the model during training
    assert got.shape == tuple(x.shape) and got.dtype == np.float32
    assert np.abs(got - x.numpy()).max() <= 1e-6


def test_predictions_equal_the_bench_onnxruntime_predictions(model_onnx):
    raw, _ = mnist5k_raw("test")
    ds = load_dataset("mnist5k", "test")
    with OnnxRuntimeRunner(model_onnx) as run:  # the bench's path: stored 36x36 images, normalised
        bench_logits, _ = predict_all(run, ((ds.images.float() / 255 - torch.tensor(ds.mean).view(1, 3, 1, 1))
                                            / torch.tensor(ds.std).view(1, 3, 1, 1)).numpy())
    with Classifier.load(model_onnx) as clf:
        preds = clf.predict(list(raw))  # the runtime's path: raw 28x28 uint8 digits
    ids = np.array([p.class_id for p in preds])
    assert np.array_equal(ids, bench_logits.argmax(1))
    assert len(set(ids.tolist())) > 3  # predictions vary, so equality is not trivially met
    assert all(abs(sum(c[2] for c in p.top) - p.prob) < 1e-12 for p in preds)
    assert preds[0].name == str(preds[0].class_id) and 0 < preds[0].prob <= 1


def test_onnx_is_loaded_from_the_bytes_its_sidecar_verified(model_onnx, monkeypatch):
    """One read of the .onnx: ONNX Runtime gets the bytes whose sha256 was checked, not a second read
    of a file that could have been swapped in between."""
    import onnxruntime

    import mlit_edge.artifacts.sidecar as sidecar_mod

    hashed_files, sources = [], []
    real_session = onnxruntime.InferenceSession
    monkeypatch.setattr(sidecar_mod, "sha256_file", lambda path, *a: hashed_files.append(path))
    monkeypatch.setattr(onnxruntime, "InferenceSession",
                        lambda model, *a, **k: sources.append(model) or real_session(model, *a, **k))
    with Classifier.load(model_onnx) as clf:
        assert clf.predict([np.zeros((28, 28, 3), np.uint8)])[0].prob > 0
    assert hashed_files == [] and sources == [model_onnx.read_bytes()]


@pytest.mark.parametrize("env, want", [("1", 1), ("2", 2), (None, None), ("", None), ("0", None), ("two", None),
                                       ("99999", None)])
def test_onnxruntime_takes_its_default_threads_from_omp_num_threads(tiny_onnx, monkeypatch, env, want):
    """ONNX Runtime ignores OMP_NUM_THREADS: a process held to one core by it would start a spinning pool
    per session; the runner passes it on, and anything but a whole number in range leaves ORT's default."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if env is not None:
        monkeypatch.setenv("OMP_NUM_THREADS", env)
    with OnnxRuntimeRunner(tiny_onnx) as run:
        assert run.settings["threads"] == want  # read back from the session's own options
    with OnnxRuntimeRunner(tiny_onnx, threads=3) as run:
        assert run.settings["threads"] == 3  # an explicit count wins


def test_arena_off_predicts_the_same(model_onnx):
    x = np.random.default_rng(0).integers(0, 256, (64, 28, 28, 3), dtype=np.uint8)
    with Classifier.load(model_onnx) as on, Classifier.load(model_onnx, ort_arena=False) as off:
        assert on.runner.settings["cpu_mem_arena"] is True  # read back from the session's own options
        assert off.runner.settings["cpu_mem_arena"] is False
        assert np.array_equal(on.logits(on.preprocess(x)), off.logits(off.preprocess(x)))
        assert on.runner.settings["mem_pattern"] is False  # the Classifier puts memory first
        batch = on.preprocess(x)
        with OnnxRuntimeRunner(model_onnx) as plain:  # bench's runner keeps ONNX Runtime's default
            assert plain.settings["mem_pattern"] is True
            # the planned memory can place buffers at other alignments, which moves the last float bit
            np.testing.assert_allclose(plain.infer({plain.input_name: batch})["logits"], on.logits(batch),
                                       rtol=0, atol=1e-5)


def test_bad_input_is_a_clear_error_and_the_classifier_survives(model_onnx, tmp_path):
    good = png(tmp_path / "ok.png", np.full((20, 30, 3), 128, np.uint8))
    corrupt = tmp_path / "broken.png"
    corrupt.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    text = tmp_path / "notes.png"
    text.write_text("this is not an image\n")
    with Classifier.load(model_onnx) as clf:
        cases = [([corrupt], "corrupt image"), ([text], "not an image file"), ([tmp_path / "nope.png"], "does not exist"),
                 ([], "empty batch"), (np.zeros((0, 36, 36, 3), np.uint8), "empty batch"),
                 (np.full((36, 36, 3), np.nan, np.float32), "contains NaN"),
                 ([np.zeros((36, 36, 3), np.int64)], "dtype int64"),
                 ([np.zeros((36, 36, 5), np.uint8)], "shape (36, 36, 5)"), (["ok.png", 3], "does not exist")]
        for images, words in cases:
            with pytest.raises(InputError, match=None) as err:
                clf.predict(images)
            assert words in str(err.value), (words, str(err.value))
        x = np.zeros((2, 3, 36, 36), np.float32)
        x[1, 0, 0, 0] = np.nan
        with pytest.raises(InputError, match="NaN"):
            clf.logits(x)
        assert clf.predict([good])[0].prob > 0  # still serving after every refusal


def test_missing_tampered_or_mismatched_sidecar_is_refused(model_onnx, tmp_path):
    art = tmp_path / "a.onnx"
    art.write_bytes(model_onnx.read_bytes())
    with pytest.raises(FileNotFoundError, match="no sidecar"):
        Classifier.load(art)
    sidecar_path(art).write_text(sidecar_path(model_onnx).read_text())
    Classifier.load(art).close()  # same bytes: accepted
    data = bytearray(art.read_bytes())
    data[-10] ^= 0xFF
    art.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256 differs"):
        Classifier.load(art)
    art.write_bytes(model_onnx.read_bytes())
    record = json.loads(sidecar_path(art).read_text())
    del record["classes"]
    sidecar_path(art).write_text(json.dumps(record))
    with pytest.raises(ValueError, match="lacks"):
        Classifier.load(art)
    # an engine built for a Jetson Orin with another TensorRT than this machine's: refused for that reason, whether
    # or not this machine has a GPU (a refusal for "no CUDA GPU" alone would not show the version is checked)
    from mlit_edge.devices.trt_env import EngineError, local_env

    here = local_env("tensorrt")
    other = "8.5.2.2" if here.trt_version == "10.3.0" else "10.3.0"
    have = f"tensorrt {here.trt_version}" if here.trt_module else "no TensorRT"
    plan = tmp_path / "m.plan"
    write_plan(b"engine", plan, {"kind": "tensorrt-engine", "target": "tensorrt", "precision": "fp16",
                                 "classes": ["a"], "preprocess": {"mean": [0] * 3, "std": [1] * 3},
                                 "engine": {"builder": {"module": "tensorrt", "version": other},
                                            "device": {"gpu_name": "Orin", "compute_capability": "8.7"}}})
    with pytest.raises(EngineError) as refused:
        Classifier.load(plan)
    assert f"m.plan was built with tensorrt {other}; this machine has {have}" in str(refused.value), refused.value
    assert "rebuild it here: mlit-edge build --onnx" in str(refused.value), refused.value
    # the same engine from this machine's own TensorRT, where one imports: now the GPU it was built for decides
    target = next((t for t in ("tensorrt", "tensorrt-rtx") if local_env(t).trt_module), None)
    if target is None:
        return
    here = local_env(target)
    if here.compute_capability == "8.7":  # an Orin itself: the module check (tests/engine/test_profiles.py) decides
        return
    write_plan(b"engine", plan, {"kind": "tensorrt-engine", "target": target, "precision": "fp16",
                                 "classes": ["a"], "preprocess": {"mean": [0] * 3, "std": [1] * 3},
                                 "engine": {"builder": {"module": here.trt_module, "version": here.trt_version},
                                            "device": {"gpu_name": "Orin", "compute_capability": "8.7"}}})
    with pytest.raises(EngineError) as refused:
        Classifier.load(plan)
    want = "no CUDA GPU on this machine" if here.compute_capability is None else "was built for Orin (sm_87)"
    assert want in str(refused.value), refused.value


def test_predict_cli_reports_bad_files_and_classifies_the_rest(model_onnx, tmp_path):
    good = png(tmp_path / "ok.png", mnist5k_raw("test")[0][3])
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    proc = run_cli("predict", good, bad, "--model", model_onnx, "--json", "--top-k", "2", check=False)
    assert proc.returncode == 2, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out) == 2, out
    assert len(out[0]["top"]) == 2 and "error" not in out[0], out[0]
    assert "corrupt" in out[1].get("error", "") or "not an image" in out[1].get("error", ""), out[1]


def test_serve_loop_classifies_an_inbox(model_onnx, tmp_path):
    from mlit_edge.runtime import watch

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    png(inbox / "a.png", mnist5k_raw("test")[0][1])
    (inbox / "b.png").write_text("junk")
    # the junk file is retried until unchanged for retry_s (10 s by default, for a file still being written);
    # tests/test_hostile.py (a JPEG written in two parts) holds that rule
    n = watch(model_onnx, inbox, tmp_path / "results.jsonl", interval_s=0.01, max_files=2, retry_s=0.2)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert n == 2 and {r["path"] for r in rows} == {"a.png", "b.png"}
    assert (inbox / "done" / "a.png").is_file() and (inbox / "failed" / "b.png").is_file()
    assert "error" in next(r for r in rows if r["path"] == "b.png")


CHUNKS = """
import json, sys
import numpy as np
from mlit_edge.bench.host import peak_rss_mb, rss_mb
from mlit_edge.runtime import Classifier

with Classifier.load(sys.argv[1]) as clf:
    clf.predict([np.zeros((2, 2), np.uint8)])
    base = rss_mb()
    preds = clf.predict([np.full((2, 2), i % 255, np.uint8) for i in range(int(sys.argv[2]))])
    print(json.dumps({"n": len(preds), "base": base, "peak": peak_rss_mb()}))
"""


def test_predict_works_in_chunks_of_the_artifact_s_batch(model_onnx):
    """Memory follows the chunk, not the count: 8,000 tiny arrays peak where 1,000 do (100,000 took 5.3 GB
    before; 210 MB now: python benchmarks/runtime_memory.py)."""
    import subprocess
    import sys

    from tests.helpers import ENV

    peaks = []
    for n in (1000, 8000):
        proc = subprocess.run([sys.executable, "-c", CHUNKS, str(model_onnx), str(n)], capture_output=True,
                              text=True, env=ENV, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        got = json.loads(proc.stdout)
        assert got["n"] == n
        peaks.append(got["peak"])
    assert peaks[1] - peaks[0] < 40 and peaks[1] < 300, peaks
