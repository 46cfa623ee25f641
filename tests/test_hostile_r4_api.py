"""Issue 47, serious item 6: the Python API refuses what the CLI refuses, in the CLI's words, before any work.

Every parameter of `mlit_edge.load`, `Model.export`, `Model.build`, `mlit_edge.bench`, `Classifier.load` and
`Classifier.predict` gets the hostile values (nan, inf, negative, huge, bool, a str number, '', None, a Path
where a number goes). "Before any work" is asserted by replacing the export, build and bench stages with
functions that fail the test when called: a refusal has to come from the request's own validation.
"""
from __future__ import annotations

import math
import os
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import mlit_edge
from mlit_edge.bench.options import BenchConfig
from mlit_edge.export.requests import BuildRequest, ExportRequest
from mlit_edge.runtime import Classifier
from mlit_edge.base.values import max_threads

NAN, INF = math.nan, math.inf
NO_RULE = {"precisions", "providers"}  # checked by their request's own code (names against a list)


@pytest.fixture
def no_work(monkeypatch):
    """The slow stages, replaced by a failure: a value that reaches one was not refused first."""
    def reached(*a, **k):
        pytest.fail("a hostile value reached the export, build or bench stage")

    monkeypatch.setattr("mlit_edge.api.run_export", reached)  # where the API calls them from
    monkeypatch.setattr("mlit_edge.api.run_build", reached)
    monkeypatch.setattr("mlit_edge.bench.call.bench_and_save", reached)


@pytest.fixture
def model():
    return mlit_edge.Model("pretrained:xxs-mnist5k", source=None)  # the source is never opened by a refusal


def test_every_field_has_a_rule():
    """A request field without a rule would take any value: each one the API passes through has one."""
    for cls in (ExportRequest, BuildRequest, BenchConfig):
        bare = [f.name for f in fields(cls) if "rule" not in f.metadata and f.name not in NO_RULE]
        assert not bare, (cls.__name__, bare)


def _hostile(rule) -> list:
    """The values every field of `rule`'s kind must refuse."""
    kind = type(rule).__name__
    common = [Path("x") if kind not in ("PathArg",) else 3, b"x"]
    if kind in ("Int", "Float"):
        # every number field refuses these; the two range probes only where the rule has that bound
        return [NAN, INF, -INF, True, "4", "", Path("4"), *common,
                *(v for v in (-10 ** 9, 10 ** 30) if not _accepted(rule, v))]
    if kind == "Ints":
        return [NAN, True, "1,8", "", [0], [-1], ["1"], [1.5], *common]
    if kind == "Flag":
        return ["no", "", 0, 1, None, NAN, Path("x")]
    if kind == "Text":
        return ["", " ", 3, NAN, True, b"x", Path("x"), "a\0b"]
    return ["", 3, NAN, True, b"x", "a\0b"]  # PathArg


def _accepted(rule, value) -> bool:
    try:
        rule.check(value)
        return True
    except (TypeError, ValueError):
        return False


def _cases(cls, skip=()):
    for f in fields(cls):
        rule = f.metadata.get("rule")
        if rule is None or f.name in skip:
            continue
        values = _hostile(rule) + ([] if getattr(rule, "optional", True) else [None])
        for v in values:
            yield f.name, v


EXPORT = list(_cases(ExportRequest, skip=("checkpoint", "size", "num_classes", "random_weights")))
BUILD = list(_cases(BuildRequest, skip=("checkpoint", "size", "num_classes", "random_weights")))
BENCH = list(_cases(BenchConfig))


def _one_line(err) -> str:
    text = str(err.value)
    assert text and "\n" not in text and "Traceback" not in text, text
    return text


@pytest.mark.parametrize("name, value", EXPORT, ids=[f"{n}={v!r}" for n, v in EXPORT])
def test_export_refuses_hostile_values_before_any_work(model, no_work, name, value):
    with pytest.raises((TypeError, ValueError)) as err:
        model.export(**{name: value})
    assert _one_line(err).startswith(("--", "export:")), str(err.value)


@pytest.mark.parametrize("name, value", BUILD, ids=[f"{n}={v!r}" for n, v in BUILD])
def test_build_refuses_hostile_values_before_any_work(model, no_work, name, value):
    with pytest.raises((TypeError, ValueError)) as err:
        model.build(**{name: value})
    _one_line(err)


@pytest.mark.parametrize("name, value", BENCH, ids=[f"{n}={v!r}" for n, v in BENCH])
def test_bench_refuses_hostile_values_before_any_work(no_work, tmp_path, name, value):
    with pytest.raises((TypeError, ValueError)) as err:
        mlit_edge.bench([tmp_path / "x.onnx"], **{name: value})
    _one_line(err)


@pytest.mark.parametrize("kw, words", [
    ({"duration_s": NAN}, "--duration: nan is not a finite number"),
    ({"threads": 10 ** 6}, f"--threads: 1000000 is not in the range 1<=x<={max_threads()}"),
    ({"threads": "4"}, "--threads: '4' is not an integer (a str)"),
    ({"batches": (8, "64")}, "--batch: '64' is not an integer (a str)"),
    ({"warmup_iters": -1}, "--warmup-iters: -1 is not in the range x>=0"),
    ({"isolate": "no"}, "--isolate: 'no' is not True or False (a str)")])
def test_bench_named_issue_values(no_work, tmp_path, kw, words):
    """The issue's own: duration nan never returned, threads=10**6 was a SIGSEGV, str numbers a '<' TypeError."""
    with pytest.raises((TypeError, ValueError)) as err:
        mlit_edge.bench([tmp_path / "x.onnx"], **kw)
    assert str(err.value) == words


@pytest.mark.parametrize("kw, words", [
    ({"workspace": NAN}, "--workspace: nan is not a finite number"),
    ({"dla_core": -1, "precision": "fp16", "batch": 1}, "--dla-core: -1 is not in the range x>=0"),
    ({"calib_seed": 2 ** 64}, "--calib-seed: 18446744073709551616 is not in the range 0<=x<=4294967295"),
    ({"jetpack": ""}, "--jetpack: '' is not one of"),
    ({"jetpack": "5.1", "opset": 18}, "--opset 18: jetpack-5.1"),
    ({"opset": "18"}, "--opset: '18' is not an integer (a str)"),
    ({"pad_heads": "\u00b2"}, "--pad-heads '\u00b2': choose auto, off or a head size N"),
    ({"out": ""}, "--out: '' is not a path (an empty name)"),
    ({"evaluate": "false"}, "--eval: 'false' is not True or False (a str)")])
def test_build_named_issue_values(model, no_work, kw, words):
    """The issue's own: workspace nan and dla_core -1 ran a 20-s export first; jetpack '' meant no JetPack."""
    with pytest.raises((TypeError, ValueError)) as err:
        model.build(**kw)
    assert str(err.value).startswith(words), str(err.value)


def test_export_takes_a_path_for_out(model, monkeypatch, tmp_path):
    """out=Path(...) (the API's own results are PathLike) reaches the export as the CLI's str: no AttributeError."""
    seen = {}

    def fake(req, source):
        seen["out"] = req.out
        return []

    monkeypatch.setattr("mlit_edge.api.run_export", fake)
    with pytest.raises(KeyError):  # the fake made nothing, so the precision asked for is missing
        model.export(out=tmp_path / "m.onnx", jetpack=6.2, pad_heads=24)
    assert seen["out"] == str(tmp_path / "m.onnx")


@pytest.mark.parametrize("spec, error, words", [
    ("", ValueError, "--checkpoint: '' is not a path (an empty name)"),
    (None, TypeError, "--checkpoint: None is not a path (None)"),
    (3, TypeError, "--checkpoint: 3 is not a path (an int)"),
    ("/dev/zero", ValueError, "checkpoint /dev/zero is not a regular file (it is a device)")])
def test_load_refuses_what_is_not_a_checkpoint(spec, error, words):
    """load('') opened the default pretrained model; a device was read."""
    with pytest.raises(error) as err:
        mlit_edge.load(spec)
    assert str(err.value) == words


def test_load_says_a_folder_is_a_folder(tmp_path):
    with pytest.raises(ValueError, match="is not a regular file \\(it is a folder\\)"):
        mlit_edge.load(tmp_path)


def test_cli_and_api_refuse_in_the_same_words(tmp_path, no_work):
    """One validator: the CLI's message holds the API's, word for word, after the option's name."""
    from mlit_edge.cli import main

    runner = CliRunner()
    pairs = [(["bench", str(tmp_path / "x.onnx"), "--threads", "1000000"], {"threads": 10 ** 6}),
             (["bench", str(tmp_path / "x.onnx"), "--duration", "nan"], {"duration_s": NAN}),
             (["bench", str(tmp_path / "x.onnx"), "--batch", "1,0"], {"batches": (1, 0)})]
    for args, kw in pairs:
        with pytest.raises(ValueError) as err:
            mlit_edge.bench([tmp_path / "x.onnx"], **kw)
        detail = str(err.value).split(": ", 1)[1]
        out = runner.invoke(main, args)
        assert out.exit_code == 2 and detail in out.output, (detail, out.output)
    model = mlit_edge.Model("pretrained:xxs-mnist5k", source=None)
    for args, kw in [(["build", "--workspace", "nan"], {"workspace": NAN}),
                     (["build", "--dla-core", "-1"], {"dla_core": -1}),
                     (["export", "--opset", "99"], {"opset": 99})]:
        with pytest.raises(ValueError) as err:
            model.build(**kw) if args[0] == "build" else model.export(**kw)
        detail = str(err.value).split(": ", 1)[1]
        out = runner.invoke(main, args)
        assert out.exit_code == 2 and detail in out.output, (detail, out.output)


@pytest.fixture
def fifo(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    path = tmp_path / "m.onnx"
    os.mkfifo(path)
    return path


def test_classifier_load_says_what_the_path_is(tmp_path, fifo):
    """A folder, a device and a FIFO were all "does not exist"; a FIFO must not block the load."""
    folder = tmp_path / "f.onnx"
    folder.mkdir()
    for path, error, words in [(folder, IsADirectoryError, "is not a regular file (it is a folder)"),
                               (fifo, OSError, "is not a regular file (it is a FIFO, a named pipe)"),
                               (Path("/dev/null"), OSError, "is not a regular file (it is a device)"),
                               (tmp_path / "none.onnx", FileNotFoundError, "does not exist"),
                               ("", ValueError, "--model: '' is not a path (an empty name)"),
                               (None, TypeError, "--model: None is not a path (None)")]:
        with pytest.raises(error) as err:
            Classifier.load(path)
        assert str(err.value).endswith(words), str(err.value)


@pytest.mark.parametrize("kw, error, words", [
    ({"threads": 10 ** 6}, ValueError, "--threads: 1000000 is not in the range"),
    ({"threads": NAN}, TypeError, "--threads: nan is not an integer (a float)"),
    ({"threads": True}, TypeError, "--threads: True is not an integer (a bool)"),
    ({"threads": "2"}, TypeError, "--threads: '2' is not an integer (a str)"),
    ({"max_pixels": 0}, ValueError, "--max-pixels: 0 is not in the range x>=1"),
    ({"max_pixels": INF}, TypeError, "--max-pixels: inf is not an integer (a float)"),
    ({"cuda_graph": "yes"}, TypeError, "cuda_graph: 'yes' is not True or False (a str)"),
    ({"force": 1}, TypeError, "force: 1 is not True or False (an int)")])
def test_classifier_load_refuses_hostile_options_before_opening(tmp_path, kw, error, words):
    junk = tmp_path / "m.onnx"
    junk.write_bytes(b"not a model")  # refused before it is read: the options come first
    with pytest.raises(error) as err:
        Classifier.load(junk, **kw)
    assert str(err.value).startswith(words), str(err.value)


@pytest.mark.parametrize("top_k, error, words", [
    (0, ValueError, "--top-k: 0 is not in the range x>=1"), (NAN, TypeError, "--top-k: nan is not an integer"),
    ("1", TypeError, "--top-k: '1' is not an integer (a str)"), (True, TypeError, "--top-k: True is not an integer")])
def test_predict_refuses_a_hostile_top_k(tiny_onnx, top_k, error, words):
    with Classifier.load(tiny_onnx) as clf:
        with pytest.raises(error, match=None) as err:
            clf.predict([np.zeros((36, 36, 3), np.uint8)], top_k=top_k)
        assert str(err.value).startswith(words), str(err.value)
        assert len(clf.predict([np.zeros((36, 36, 3), np.uint8)], top_k=np.int64(2))[0].top) == 2


def test_api_errors_quoting_a_file_are_escaped(tmp_path):
    """A plan's recorded module name reached the caller raw (an escape code in an exception or a warning)."""
    from mlit_edge.artifacts.schema import ArtifactRecord
    from mlit_edge.devices.trt_env import DeviceEnv, EngineError, check_compatible

    builder = {"module": "tensorrt\x1b]0;PWNED\x07", "version": "10.3"}
    record = ArtifactRecord.from_json({"artifact": "m.plan", "device": {}, "target": "tensorrt",
                                       "engine": {"builder": builder}})
    env = DeviceEnv("tensorrt", "10.3", "GPU", "8.7", "12.6", None, None, "Linux aarch64", None)
    with pytest.raises(EngineError) as err:
        check_compatible(record, env)
    assert "\x1b" not in str(err.value) and "\\x1b]0;PWNED\\x07" in str(err.value)
