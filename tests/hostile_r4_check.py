"""Hostile round 4 (issue 47), the check surface, as CLI replays: `check` on degenerate graphs (a 0-byte file,
no input, no output, no nodes, no opset import, nodes with missing inputs or outputs, a TopK whose K is
missing, empty, two values or computed, bytes that are not ONNX, a truncated protobuf), each a FAIL line of the
report and rc 1 with one `Error:` line; the sidecar's profile used where it is the graph's; a dynamic H/W input
and a UINT8 intermediate tensor reported; names with control characters escaped; and `build --onnx` refusing a
sidecar profile the graph contradicts or that does not exist. `cases(folder, good, checkpoint)` writes each
case's files into `folder`; tests/test_hostile.py replays them. The Python-level cases (a TensorRT that crashes,
the escaping logger) are in tests/test_hostile_r4_check.py."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from tests.hostile_corpus import Case

ESC = "\x1b]0;pwned\x07\x1b[2J"  # an OSC title and a clear-screen: what a name must not do to a terminal


def graph(nodes: list, inputs: list | None = None, outputs: list | None = None, inits: list | None = None,
          opset: int | None = 18):
    """A tiny ONNX model: x (1, 4) float -> y by default; `opset` None imports no default domain."""
    from onnx import TensorProto as T, helper as h

    x, y = h.make_tensor_value_info("x", T.FLOAT, [1, 4]), h.make_tensor_value_info("y", T.FLOAT, [1, 4])
    g = h.make_graph(nodes, "g", [x] if inputs is None else inputs, [y] if outputs is None else outputs, inits or [])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)] if opset else [])


def degenerate() -> dict[str, tuple[object, str]]:
    """name -> (a model, or the bytes of a file, and a phrase of the FAIL line it must get)."""
    from onnx import TensorProto as T, helper as h

    relu = h.make_node("Relu", ["x"], ["y"], name="relu")
    k = lambda *v: h.make_tensor("k", T.INT64, [len(v)], list(v))  # noqa: E731
    idx = h.make_tensor_value_info("i", T.INT64, [1, 2])
    topk = lambda *ins, **kw: h.make_node("TopK", list(ins), ["y", "i"], name="topk", **kw)  # noqa: E731
    y2 = [h.make_tensor_value_info("y", T.FLOAT, [1, 2]), idx]
    good = graph([relu]).SerializeToString()
    return {
        "a 0-byte file": (b"", "the file is empty (0 bytes)"),
        "bytes that are not ONNX": (b"\x00garbage", "not a loadable ONNX model"),
        "a truncated protobuf": (good[: len(good) // 2], "not a loadable ONNX model"),
        "a model without a graph": (b"\x08\x07", "holds no graph"),
        "a graph without input": (graph([h.make_node("Constant", [], ["y"], value=h.make_tensor(
            "v", T.FLOAT, [1, 4], [1, 2, 3, 4]))], inputs=[]), "the graph has no input"),
        "an empty graph": (graph([], inputs=[], outputs=[]), "the graph has no nodes"),
        "a graph without outputs": (graph([relu], outputs=[]), "the graph has no output"),
        "a graph without opset_import": (graph([relu], opset=None), "imports no version of the default ONNX domain"),
        "a TopK with one input": (graph([topk("x")], outputs=y2), "TopK 'topk' has 1 input(s); ONNX's TopK-11 takes 2"),
        "a Constant without an output": (graph([h.make_node("Constant", [], [], name="c", value=h.make_tensor(
            "v", T.FLOAT, [1], [1])), relu]), "Constant 'c' has 0 output(s)"),
        "a TopK with an empty K": (graph([topk("x", "k")], outputs=y2, inits=[k()]), "K holds 0 values"),
        # TensorRT-RTX 1.7's parser takes SIGSEGV on these two: never handed to it
        "a TopK whose K holds two values": (graph([topk("x", "k")], outputs=y2, inits=[k(2, 2)]), "K holds 2 values"),
        "a TopK whose K is computed with two values": (graph([h.make_node("Shape", ["x"], ["s"]), topk("x", "s")],
                                                             outputs=y2), "K is computed, with shape [2]"),
        "a TopK with a float K": (graph([topk("x", "f")], outputs=y2, inits=[h.make_tensor("f", T.FLOAT, [1], [2])]),
                                  "ONNX's TopK takes an int64 K"),
        "a node without inputs": (graph([h.make_node("Relu", [], ["y"], name="r")]), "Relu 'r' has 0 input(s)"),
        "a required input named ''": (graph([h.make_node("Relu", [""], ["y"], name="r")]),
                                      "leaves its required input 'X' unnamed"),
        "a node reading a tensor nothing makes": (graph([h.make_node("Add", ["x", "ghost"], ["y"], name="a")]),
                                                  "reads 'ghost', which no input, initializer or node makes"),
        "a Softmax without output": (graph([h.make_node("Softmax", ["x"], [], name="sm"), relu]),
                                     "Softmax 'sm' has 0 output(s)"),
        "a Constant without a value": (graph([h.make_node("Constant", [], ["c"], name="c"), relu]),
                                       "has 0 value attributes"),
        "an initializer whose bytes do not fit it": (graph([relu], inits=[T(name="w", data_type=T.FLOAT, dims=[3],
                                                                            raw_data=b"\x00")]),
                                                     "its data do not fit its type and shape"),
        "an input without a shape": (graph([relu], inputs=[h.make_tensor_value_info("x", T.FLOAT, None)]),
                                     "input 'x' has no shape"),
    }


def _write(path: Path, model) -> Path:
    path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    return path


def _with_sidecar(path: Path, model, profile) -> Path:
    from mlit_edge.artifacts.sidecar import write_sidecar

    _write(path, model)
    write_sidecar(path, {"precision": "fp32", **({"profile": profile} if profile is not None else {})})
    return path


def _edited_good(good: Path, folder: Path, name: str, profile) -> Path:
    """A copy of the trained artifact (opset 18, LayerNormalization) whose sidecar records `profile`; the
    sidecar's sha256 still matches the graph."""
    art = folder / name / good.name
    art.parent.mkdir(parents=True)
    shutil.copyfile(good, art)
    record = json.loads(Path(f"{good}.json").read_text())
    record["profile"] = profile
    Path(f"{art}.json").write_text(json.dumps(record))
    return art


def cases(folder: Path, good: Path, checkpoint: Path) -> list[Case]:
    """The check surface's cases, their files written into `folder`."""
    from onnx import TensorProto as T, helper as h

    from mlit_edge.devices.profiles import PROFILES

    folder.mkdir(parents=True, exist_ok=True)
    out: list[Case] = []
    # serious 1: every degenerate graph is a FAIL line and rc 1, never a traceback or a crash
    for i, (what, (model, phrase)) in enumerate(degenerate().items()):
        path = _write(folder / f"degenerate-{i}.onnx", model)
        out.append(Case(f"check on {what}", "serious", ["check", str(path)], 1, phrase))
        out.append(Case(f"check --jetpack 5.1 on {what}", "serious", ["check", str(path), "--jetpack", "5.1"], 1,
                        phrase))
    relu17 = graph([h.make_node("Relu", ["x"], ["y"], name="relu")], opset=17)
    def topk17(*ins, **kw):
        return graph([h.make_node("TopK", list(ins), ["y", "i"], name="topk")], opset=17, **kw)

    y2 = [h.make_tensor_value_info("y", T.FLOAT, [1, 2]), h.make_tensor_value_info("i", T.INT64, [1, 2])]
    empty_k = _write(folder / "topk-empty-k-17.onnx", topk17("x", "k", outputs=y2,
                                                             inits=[h.make_tensor("k", T.INT64, [0], [])]))
    no_k = _write(folder / "topk-no-k-17.onnx", topk17("x", outputs=y2))
    out += [Case("check --jetpack 5.1 on an opset-17 TopK with an empty K", "serious",
                 ["check", str(empty_k), "--jetpack", "5.1"], 1, "K holds 0 values"),
            Case("check --jetpack 5.1 on an opset-17 TopK without K", "serious",
                 ["check", str(no_k), "--jetpack", "5.1"], 1, "TopK 'topk' has 1 input(s)")]
    # minor: the sidecar's profile decides without --jetpack when it is the graph's sidecar, and says so
    jp51 = PROFILES["jetpack-5.1"].record()
    matched = _with_sidecar(folder / "jp51.onnx", relu17, jp51)
    out.append(Case("check without --jetpack on an opset-17 graph whose sidecar records jetpack-5.1", "minor",
                    ["check", str(matched), "--no-build"], 0, "checked against jetpack-5.1, the profile its sidecar "
                                                              "records"))
    stale = _with_sidecar(folder / "jp51-stale.onnx", relu17, jp51)
    _write(stale, graph([h.make_node("Relu", ["x"], ["y"], name="other")], opset=17))
    out.append(Case("check on an opset-17 graph whose sidecar (jetpack-5.1) is another graph's", "minor",
                    ["check", str(stale), "--no-build"], 1, "opset 17: use 18-20"))
    for value, shown in ((5, "its sidecar's profile 5 is not a device profile"),
                         ({"name": "jetpack-9"}, "its sidecar's profile 'jetpack-9' is not a device profile")):
        path = _with_sidecar(folder / f"profile-{len(out)}.onnx", relu17, value)
        out.append(Case(f"check with a sidecar profile {value!r}", "minor", ["check", str(path), "--no-build"], 1,
                        shown))
    # minor: a dynamic H/W input is a FAIL line naming the input and its dims, in the static report
    dyn = _write(folder / "dynamic-hw.onnx", graph(
        [h.make_node("Relu", ["images"], ["y"])], inputs=[h.make_tensor_value_info("images", T.FLOAT,
                                                                                   ["N", 3, "H", "W"])],
        outputs=[h.make_tensor_value_info("y", T.FLOAT, ["N", 3, "H", "W"])]))
    out.append(Case("check on a dynamic H/W input", "minor", ["check", str(dyn)], 1,
                    "input images has dynamic non-batch dimensions ['H', 'W'] (its shape: ['N', 3, 'H', 'W'])"))
    # minor: a UINT8 intermediate tensor (onnx-tensorrt refuses it) is not called buildable
    u8 = _write(folder / "uint8-intermediate.onnx", graph(
        [h.make_node("Cast", ["x"], ["c"], to=T.FLOAT, name="cast"),
         h.make_node("QuantizeLinear", ["c", "s", "z"], ["q"], name="quant"),
         h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant")],
        inits=[h.make_tensor("s", T.FLOAT, [], [0.1]), h.make_tensor("z", T.UINT8, [], [0])]))
    out.append(Case("check on Cast -> QuantizeLinear with a uint8 zero point", "minor", ["check", str(u8)], 1,
                    "QuantizeLinear quant makes the intermediate UINT8 tensor 'q'"))
    # minor: control characters in op, node and tensor names are escaped (the replay refuses a raw ESC)
    names = {"an op type": graph([h.make_node(f"Evil{ESC}", ["x"], ["y"])]),
             "a node name": graph([h.make_node("TopK", ["x", "k"], ["y", "i"], name=f"t{ESC}\nOK: buildable")],
                                  outputs=y2, inits=[h.make_tensor("k", T.INT64, [2], [1, 1])]),
             "a tensor name": graph([h.make_node("Add", ["x", f"w{ESC}"], ["y"])])}
    for i, (what, model) in enumerate(names.items()):
        path = _write(folder / f"escape-{i}.onnx", model)
        out.append(Case(f"check on control characters in {what}", "minor", ["check", str(path)], 1, "\\x1b"))
    # minor: build --onnx: the graph decides, a sidecar profile that contradicts it or does not exist is refused
    import importlib.util

    target = "tensorrt-rtx" if importlib.util.find_spec("tensorrt_rtx") else "onnxruntime"  # refused before either
    for name, value, phrase in (
            ("says-5.1", jp51, "its sidecar records the profile jetpack-5.1, but the graph is opset 18"),
            ("profile-5", 5, "its sidecar's profile 5 is not a device profile"),
            ("profile-unknown", {"name": "jetpack-9"}, "'jetpack-9' is not a device profile")):
        art = _edited_good(good, folder, name, value)
        out.append(Case(f"build --onnx whose sidecar profile is {value if name != 'says-5.1' else 'jetpack-5.1'}",
                        "minor", ["build", "--onnx", str(art), "--precision", "fp32", "--target", target,
                                  "--out", str(folder / f"out-{name}"), "--no-eval"], 1, phrase,
                        extra={"no_folder": f"out-{name}", "unchanged": [art, Path(f"{art}.json")]}))
    # serious 1 through build: a malformed graph with a sidecar that matches it is refused before TensorRT's
    # parser, which would crash the process on this one (a TopK whose K holds two values)
    bad = folder / "malformed-build" / "m.onnx"
    bad.parent.mkdir()
    blob = degenerate()["a TopK whose K holds two values"][0].SerializeToString()
    bad.write_bytes(blob)
    record = json.loads(Path(f"{good}.json").read_text())
    record.update(sha256=hashlib.sha256(blob).hexdigest(), bytes=len(blob))
    Path(f"{bad}.json").write_text(json.dumps(record))
    out.append(Case("build --onnx of a malformed graph whose sidecar matches it", "serious",
                    ["build", "--onnx", str(bad), "--precision", "fp32", "--target", target, "--out",
                     str(folder / "out-malformed"), "--no-eval"], 1,
                    "--onnx m.onnx is not well-formed ONNX: TopK 'topk': K holds 2 values",
                    extra={"no_folder": "out-malformed"}))
    return out
