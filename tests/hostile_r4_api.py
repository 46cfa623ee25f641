"""Issue 47's CLI cases of the `api` surface: the options the Python API shares with the CLI (one validator,
base.values), the opset a JetPack's parser cannot read, `--pad-heads` spelt with a non-ASCII digit, and input
paths that are not regular files (said as what they are, never opened: a FIFO would block, /dev/zero never ends).
The Python API's own cases are ordinary tests in tests/test_hostile_r4_api.py."""
from __future__ import annotations

import os
from pathlib import Path

from tests.hostile_corpus import Case


def _absent(path: Path):
    return lambda: f"{path} was written" if path.exists() else None


def cases(folder: Path, good: Path, checkpoint: Path) -> list[Case]:
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "out"
    out.mkdir()
    (folder / "a-folder.onnx").mkdir()
    onnx = out / "m.onnx"
    export = ["export", "--checkpoint", str(checkpoint), "--out", str(onnx)]
    bench = ["bench", str(good), "--batch", "1", "--iterations", "2"]
    cases = [
        Case("export --jetpack 5.1 --opset 18", "minor", [*export, "--jetpack", "5.1", "--opset", "18"], 1,
             "--opset 18: jetpack-5.1: JetPack 5.1", extra={"check": _absent(onnx)}),
        Case("export --jetpack 6.0 --opset 20", "minor", [*export, "--jetpack", "6.0", "--opset", "20"], 1,
             "its parser reads opset 17 at most", extra={"check": _absent(onnx)}),
        Case("export --pad-heads \u00b2", "minor", [*export, "--pad-heads", "\u00b2"], 1,
             "--pad-heads '\u00b2': choose auto, off or a head size N", extra={"check": _absent(onnx)}),
        Case("export --pad-heads 2_4", "minor", [*export, "--pad-heads", "2_4"], 1,
             "--pad-heads '2_4': choose auto, off or a head size N", extra={"check": _absent(onnx)}),
        Case("export --batch \u00b2", "serious", [*export, "--batch", "\u00b2"], 2, "'\u00b2' is not a valid integer",
             extra={"check": _absent(onnx)}),
        Case("check /dev/zero", "minor", ["check", "/dev/zero", "--no-build"], 1,
             "/dev/zero is not a regular file (it is a device)"),
        Case("check on a folder", "minor", ["check", str(folder / "a-folder.onnx"), "--no-build"], 2,
             "is a directory"),
        Case("build --dla-core -1", "serious", ["build", "--checkpoint", str(checkpoint), "--target", "tensorrt",
                                                "--precision", "fp16", "--batch", "1", "--dla-core", "-1", "--out",
                                                str(folder / "out-dla")], 2, "-1 is not in the range x>=0",
             extra={"no_folder": "out-dla"}),
        Case("build --workspace inf", "serious", ["build", "--workspace", "1e309", "--out", str(folder / "out-ws")], 2,
             "inf is not a finite number", extra={"no_folder": "out-ws"}),
        Case("build --dynamic-batch 1,8", "serious", ["build", "--dynamic-batch", "1,8", "--out",
                                                      str(folder / "out-db")], 2,
             "[1, 8]: expected 3 integers, e.g. 1,8,64", extra={"no_folder": "out-db"}),
        Case("bench --threads 1000000", "serious", [*bench, "--threads", "1000000"], 2,
             "1000000 is not in the range 1<=x<="),
        Case("bench --duration nan", "serious", [*bench[:-2], "--duration", "nan"], 2, "nan is not a finite number"),
        Case("bench --batch 1,\u00b2", "serious", ["bench", str(good), "--batch", "1,\u00b2"], 2,
             "'\u00b2' is not a valid integer"),
    ]
    if hasattr(os, "mkfifo"):  # each would block forever if the path were opened to find out what it is
        for name in ("m.fifo.onnx", "recipe.json", "m.fifo.plan"):
            os.mkfifo(folder / name)
        fifo = folder / "m.fifo.onnx"
        said = "is not a regular file (it is a FIFO, a named pipe)"
        cases += [
            Case("check on a FIFO", "minor", ["check", str(fifo), "--no-build"], 1, said),
            Case("predict --model on a FIFO", "minor", ["predict", str(good), "--model", str(fifo)], 1, said),
            Case("predict --model on a FIFO .plan", "minor", ["predict", str(good), "--model",
                                                              str(folder / "m.fifo.plan")], 1, said),
            Case("predict --model /dev/null", "minor", ["predict", str(good), "--model", "/dev/null"], 1,
                 "/dev/null is not a regular file (it is a device)"),
            Case("bench on a FIFO", "minor", ["bench", str(fifo), "--iterations", "1"], 1, said),
            Case("build --onnx on a FIFO", "minor", ["build", "--onnx", str(fifo), "--target", "onnxruntime",
                                                     "--precision", "fp32", "--out", str(folder / "out-fifo")], 1,
                 f"--onnx {fifo} {said}"),
            Case("build --calib-data on a FIFO recipe", "minor",
                 ["build", "--checkpoint", str(checkpoint), "--target", "onnxruntime", "--precision", "int8",
                  "--calib-data", str(folder / "recipe.json"), "--out", str(folder / "out-recipe")], 1,
                 f"calibration recipe {folder / 'recipe.json'} {said}"),
        ]
    return cases
