"""The ONNX Runtime kernels behind int8-ort's rewrites (export/integer_gemm.py), each alone at the XXS's shapes at
batch 64 (9280 rows of 108 channels), side by side in one process, in alternating rounds:

1. a biased INT8 matmul: QuantizeLinear + QGemm with an int32 bias (what ONNX Runtime's own Q/DQ fusion made of the
   quantizer's Gemm), QuantizeLinear + MatMulIntegerToFloat with a float bias (what `integer_gemms` writes), and
   the dynamic graph's DynamicQuantizeMatMul, at the attention's 108 and the MoE input projection's 324 columns;
2. the MoE's input projection split into the experts' part and V: one MatMulIntegerToFloat, Reshape and Split,
   against one MatMulIntegerToFloat per part (what `split_outputs` writes), which give the same values.

    python benchmarks/int8_kernels.py --threads 2 --rounds 15
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

ROWS, CHANNELS = 9280, 108  # the XXS at batch 64: 64 images x 145 tokens, 108 channels


def graph(nodes: list, inits: dict, outputs: list[str]) -> bytes:
    """A model of `nodes` reading x (ROWS, CHANNELS) float, with `inits` as initializers."""
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, CHANNELS])
    ys = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    g = helper.make_graph(nodes, "g", [x], ys, [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
                             ).SerializeToString()


def weights(columns: int, rng) -> dict:
    """Per-channel INT8 weights with their scales, zero zero points, a float bias and the same bias in int32."""
    scale = ((rng.random(columns) + 0.5) * 1e-2).astype(np.float32)
    bias = rng.standard_normal(columns).astype(np.float32)
    return {"w": rng.integers(-127, 128, (CHANNELS, columns)).astype(np.int8), "ws": scale,
            "wz": np.zeros(columns, np.int8), "s": np.float32(0.02), "z": np.uint8(128), "b": bias,
            "b32": np.round(bias / (np.float32(0.02) * scale)).astype(np.int32)}


def biased_forms(columns: int, rng) -> dict[str, bytes]:
    from onnx import helper

    w = weights(columns, rng)
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"])

    def ms(op: str, inputs: list[str], out: str = "y"):
        return helper.make_node(op, inputs, [out], domain="com.microsoft")

    return {"QGemm (int32 bias)": graph([q, ms("QGemm", ["xq", "s", "z", "w", "ws", "wz", "b32"])], w, ["y"]),
            "MatMulIntegerToFloat (float bias)": graph([q, ms("MatMulIntegerToFloat", ["xq", "w", "s", "ws", "z", "wz",
                                                                                      "b"])], w, ["y"]),
            "DynamicQuantizeMatMul": graph([ms("DynamicQuantizeMatMul", ["x", "w", "ws", "wz", "b"])], w, ["y"])}


def split_forms(experts: int, hidden: int, rng) -> dict[str, bytes]:
    from onnx import helper

    w = weights((experts + 1) * hidden, rng)
    cut = experts * hidden
    parts = {f"{k}{i}": v for i, (a, b) in enumerate(((0, cut), (cut, None)))
             for k, v in (("w", w["w"][:, a:b]), ("ws", w["ws"][a:b]), ("wz", w["wz"][a:b]), ("b", w["b"][a:b]))}
    shapes = {"shape": np.array([-1, experts + 1, hidden], np.int64), "sizes": np.array([experts, 1], np.int64),
              "shape0": np.array([-1, experts, hidden], np.int64), "shape1": np.array([-1, 1, hidden], np.int64)}
    inits = {**w, **parts, **shapes}
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"])

    def mm(i: str, out: str):
        return helper.make_node("MatMulIntegerToFloat", ["xq", f"w{i}", "s", f"ws{i}", "z", f"wz{i}", f"b{i}"], [out],
                                domain="com.microsoft")

    one = [q, mm("", "p"), helper.make_node("Reshape", ["p", "shape"], ["r"]),
           helper.make_node("Split", ["r", "sizes"], ["e", "v"], axis=1), helper.make_node("Relu", ["e"], ["y0"]),
           helper.make_node("Relu", ["v"], ["y1"])]
    apart = [q, mm("0", "p0"), mm("1", "p1"), helper.make_node("Reshape", ["p0", "shape0"], ["e"]),
             helper.make_node("Reshape", ["p1", "shape1"], ["v"]), helper.make_node("Relu", ["e"], ["y0"]),
             helper.make_node("Relu", ["v"], ["y1"])]
    # a reader after each part, as the graph has (SiLU, the gate product): a Reshape that is a graph output copies
    return {"one matmul + Split": graph(one, inits, ["y0", "y1"]),
            "one matmul per part": graph(apart, inits, ["y0", "y1"])}


def race(forms: dict[str, bytes], threads: int, rounds: int, min_time: float, same: bool = False) -> dict[str, float]:
    """Median ms per call of each form, rounds alternating; `same`: the forms' outputs must be equal, bit for bit."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.log_severity_level = 3
    sessions = {k: ort.InferenceSession(m, opts, providers=["CPUExecutionProvider"]) for k, m in forms.items()}
    x = np.random.default_rng(0).standard_normal((ROWS, CHANNELS)).astype(np.float32)
    if same:
        first, *rest = ([*s.run(None, {"x": x})] for s in sessions.values())
        if not all(np.array_equal(a, b) for other in rest for a, b in zip(first, other)):
            raise SystemExit("the forms that must give the same values do not")
    times: dict[str, list[float]] = {k: [] for k in forms}
    for r in range(rounds):
        names = list(sessions)
        for name in names[r % len(names):] + names[:r % len(names)]:
            run = sessions[name].run
            run(None, {"x": x})
            start, calls = time.perf_counter(), 0
            while time.perf_counter() - start < min_time:
                run(None, {"x": x})
                calls += 1
            times[name].append(1e3 * (time.perf_counter() - start) / calls)
    return {k: statistics.median(v) for k, v in times.items()}


def report(title: str, medians: dict[str, float]) -> None:
    base = next(iter(medians.values()))
    print(title)
    for name, ms in medians.items():
        print(f"  {name:36s} {ms:7.3f} ms  ({base / ms:.2f}x the first's speed)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds of calls per form and round")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    for columns in (108, 324):
        report(f"biased INT8 matmul, {ROWS} x {CHANNELS} x {columns}, {args.threads} threads, median of "
               f"{args.rounds} rounds:", race(biased_forms(columns, rng), args.threads, args.rounds, args.min_time))
    report(f"the MoE's input projection, {ROWS} x {CHANNELS} x (3 x 81 + 81), split into the experts' part and V:",
           race(split_forms(3, 81, rng), args.threads, args.rounds, args.min_time, same=True))


if __name__ == "__main__":
    main()
