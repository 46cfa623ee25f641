"""Hostile round 4 (issue 47), the DeepStream surface (and Triton's, where the class is the same), as CLI replays:
names and URIs that would inject lines into GLib key files, sidecars re-signed over bytes that are not their
graph, and sidecars that contradict their graph. `cases(folder, good, checkpoint)` writes each case's files into
`folder`; tests/test_hostile.py replays them. Kills at the last rename are in tests/test_hostile_r4_deepstream.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.hostile_corpus import Case

EVIL = "evil\n[property]\ncustom-lib-path=libevil.so\n#"  # a name that was a second [property] group
JETSON = {"platform": "Linux aarch64", "module": "NVIDIA Jetson Orin Nano Developer Kit", "l4t": "R36.4.3"}


def _resigned(good: Path, path: Path, content: bytes | None = None, **fields) -> Path:
    """`path`: the good artifact's bytes (or `content`) with the good sidecar plus `fields`, re-signed (valid)."""
    from mlit_edge.artifacts.sidecar import write_sidecar

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(good.read_bytes() if content is None else content)
    write_sidecar(path, {**json.loads(Path(f"{good}.json").read_text()), **fields})
    return path


def _graph(kind: str) -> bytes:
    """A valid ONNX that is no classifier: no input at all, or a one-node Identity."""
    from onnx import TensorProto, helper

    if kind == "no input":
        node = helper.make_node("Constant", [], ["logits"],
                                value=helper.make_tensor("v", TensorProto.FLOAT, [1, 10], [0.0] * 10))
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])
        graph = helper.make_graph([node], "g", [], [out])
    else:
        graph = helper.make_graph([helper.make_node("Identity", ["images"], ["logits"])], "g",
                                  [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 10])],
                                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _plan(good: Path, path: Path, io, output: str = "probabilities") -> Path:
    """A .plan of bytes that are no engine, its sidecar a Jetson build of probabilities recording `io` as engine.io
    (both exports read the sidecar, never the engine)."""
    engine = {"builder": {"module": "tensorrt", "version": "10.3.0"}, "device": JETSON,
              "flags": {"profile": {"min": 1, "opt": 8, "max": 16}}, "io": io}
    return _resigned(good, path, b"not an engine", target="tensorrt", kind="tensorrt-engine", engine=engine,
                     output={"kind": "probabilities", "name": output}, source_onnx="m-probabilities.onnx",
                     precision="fp16")


def _io(size: int, classes: int, output: str = "probabilities", in_size: int | None = None) -> dict:
    side = in_size or size
    return {"inputs": [{"name": "images", "dtype": "float", "shape": [-1, 3, side, side]}],
            "outputs": [{"name": output, "dtype": "float", "shape": [-1, classes]}]}


def _glib_reads_the_model(out: Path):
    """A check: GLib's own parser reads one [property] group, no custom-lib-path, and an onnx-file that exists."""
    def check() -> str | None:
        from tests.helpers import glib_keyfile

        try:
            config = glib_keyfile(out / "config_infer_mlit.txt")
        except AssertionError as e:
            return f"GLib refused the config: {str(e)[:200]}"
        prop = config.get("property", {})
        if set(config) != {"property"} or "custom-lib-path" in prop:
            return f"the config has groups {sorted(config)} and keys {sorted(prop)}"
        model = prop.get("onnx-file", {}).get("value", "")
        if not (out / model).is_file() or model.startswith((".", "-")):
            return f"onnx-file={model!r}, which is not a plain file in {out}"
        return None
    return check


def _name_cases(folder: Path, good: Path) -> list[Case]:
    """Serious item 2: the artifact's name is written into the config; the copy gets a safe name instead."""
    cases = []
    for what, name in (("a name with newlines and [property]", EVIL), ("a leading space", " lead"),
                       ("a backslash and a tab", "back\\slash\tt"),
                       ("an escape code and U+2028", "e\x1b]0;t\x07\u2028"),
                       ("a leading dot and dash", ".-hidden"), ("only unsafe characters", "\n\n")):
        out = folder / f"ds-name-{len(cases)}"
        art = _resigned(good, folder / f"named-{len(cases)}" / f"{name}.onnx")
        cases.append(Case(f"export-deepstream: {what} in the artifact's name", "deepstream-injection",
                          ["export-deepstream", str(art), "--out", str(out)], 0,
                          extra={"check": _glib_reads_the_model(out), "unchanged": [art]}))
    return cases


def _value_cases(folder: Path, good: Path) -> list[Case]:
    """Serious item 2 and the minor `--uri ''`: values from arguments that GLib would read as something else."""
    refused = [(["--uri", "file:///v.mp4\n[sink1]\nenable=1\ntype=4"], "holds the unprintable character U+000A"),
               (["--uri", "file:///v.mp4\r"], "holds the unprintable character U+000D"),
               (["--uri", " file:///v.mp4"], "starts or ends with a space"),
               (["--uri", "file:///v.mp4 "], "starts or ends with a space"),
               (["--uri", "file:///a\\nb.mp4"], "holds a backslash"),
               (["--uri", ""], "--uri '': give the file source's URI"),
               (["--secondary", "--primary-config", "p.txt\n[tracker]\nenable=0"], "--primary-config"),
               (["--secondary", "--primary-config", ""], "--primary-config '' is empty")]
    return [Case(f"export-deepstream {' '.join(args)!r}", "deepstream-injection",
                 ["export-deepstream", str(good), "--out", str(folder / "ds-no"), *args], 1, words,
                 extra={"no_folder": "ds-no"}) for args, words in refused]


def _graph_cases(folder: Path, good: Path) -> list[Case]:
    """Serious item 3 and the minor item on contradicting sidecars: both exports refuse in predict's words."""
    import onnx

    model = onnx.load(str(good), load_external_data=False)
    size = model.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    classes = model.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    g = folder / "graphs"
    arts = [("bytes of junk", _resigned(good, g / "junk.onnx", b"garbage, not protobuf"),
             "is not a readable ONNX model"),
            ("an empty file", _resigned(good, g / "empty.onnx", b""), "the graph has no input"),
            ("a graph without inputs", _resigned(good, g / "noinput.onnx", _graph("no input")), "has no input"),
            ("a one-node Identity graph", _resigned(good, g / "identity.onnx", _graph("identity")),
             "the model's input has 2 dimensions, expected 4"),
            ("3 classes", _resigned(good, g / "three.onnx", classes=["a", "b", "c"]),
             f"classes lists 3 names, but the model outputs {classes}"),
            ("10,000 classes", _resigned(good, g / "many.onnx", classes=[str(i) for i in range(10000)]),
             f"classes lists 10000 names, but the model outputs {classes}"),
            ("preprocess.size twice the input", _resigned(good, g / "size.onnx", preprocess={
                **json.loads(Path(f"{good}.json").read_text())["preprocess"], "size": 2 * size}),
             f"preprocess.size is {2 * size}, but the model's input is 3x{size}x{size}"),
            ("precision int8 on an fp32 graph", _resigned(good, g / "int8.onnx", precision="int8"),
             "precision is int8, but the graph holds no QuantizeLinear"),
            ("a plan whose engine.io inputs is a string", _plan(good, g / "io.plan", {"inputs": "a", "outputs": 3}),
             "engine.io.inputs is 'a'"),
            ("a plan whose engine.io is a list", _plan(good, g / "list.plan", [1]), "engine.io is [1]"),
            ("a plan of 3 classes", _plan(good, g / "three.plan", _io(size, 3)),
             f"classes lists {classes} names, but the model outputs 3"),
            ("a plan whose input is twice the size", _plan(good, g / "big.plan", _io(size, classes, in_size=2 * size)),
             f"preprocess.size is {size}, but the model's input is 3x{2 * size}x{2 * size}")]
    cases = []
    for what, art, words in arts:
        cases.append(Case(f"export-deepstream: {what}", "deepstream-graph",
                          ["export-deepstream", str(art), "--out", str(folder / "ds-no")], 1, words,
                          extra={"no_folder": "ds-no", "unchanged": [art]}))
        if what not in ("a graph without inputs", "an empty file"):  # Triton's own words for those, below
            cases.append(Case(f"export-triton: {what}", "deepstream-graph",
                              ["export-triton", str(art), "--repo", str(folder / "repo-no")], 1, words,
                              extra={"no_folder": "repo-no", "unchanged": [art]}))
    for name in ("noinput", "empty"):
        cases.append(Case(f"export-triton: {name}.onnx", "deepstream-graph",
                          ["export-triton", str(g / f"{name}.onnx"), "--repo", str(folder / "repo-no")], 1,
                          "has no inputs: Triton serves no such model", extra={"no_folder": "repo-no"}))
    odd = _plan(good, g / "odd.plan", _io(size, classes, "a;b"), output="a;b")  # GLib's list separator
    cases.append(Case("export-deepstream: a plan whose output name holds ';'", "deepstream-injection",
                      ["export-deepstream", str(odd), "--out", str(folder / "ds-no")], 1,
                      "output-blob-names='a;b' is 2 items for GLib", extra={"no_folder": "ds-no"}))
    return cases


def cases(folder: Path, good: Path, checkpoint: Path) -> list[Case]:
    """Every DeepStream-surface case of round 4, its files written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(folder / "ds-no", ignore_errors=True)
    return _name_cases(folder, good) + _value_cases(folder, good) + _graph_cases(folder, good)
