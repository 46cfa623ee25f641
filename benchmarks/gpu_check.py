"""One-shot check of the GPU code paths on a machine with a CUDA GPU and PyTorch (no TensorRT needed).

    python benchmarks/gpu_check.py [--size xxs] [--iters 50]

In one run, each step on the real device, one table at the end:
  1. an fp16 AMP training step with GradScaler (loss finite, the scale it settles on, ms a step);
  2. a bf16 autocast training step, and how far bf16 logits are from fp32;
  3. one-process NCCL DDP: a process group of one, a DDP step and an all-reduce;
  4. the eval model (the deploy form) replayed as a CUDA graph at batch 1 and 64: latency against eager,
     and the largest logit difference between the two;
  5. the TensorRT runner's CUDA pieces through cuda-python, with the runner's own helpers: pinned host
     buffers, a stream, events and a captured graph of a host-to-device-to-host copy, checked byte for byte;
  6. where TensorRT imports, the device profile it implies (devices.profiles.installed_profile: JetPack 5.1's
     TensorRT 8.5 builds weakly typed from an opset-17 graph, 10.x strongly typed) and, for each precision,
     a real `mlit-edge build --target tensorrt` of the shipped model, its p50 latency at batch 1 and 64
     through the runtime's runner and its top-1 on the embedded test digits: one markdown row per precision,
     printed after the table, to paste into docs/measurements.md. Without TensorRT the step is skipped;
  7. where TensorRT imports, engine pairs built from one model in fp16 and timed with one harness: padded
     against unpadded heads (skipped in one line where export_onnx has no pad_heads), the last layer for the
     dummy token against every token, DLA core 0 against the GPU (where a DLA exists), each with its
     IEngineInspector layer count and fused-attention layers (mlit_edge.bench.engine_compare): one table.
Without a CUDA GPU it says so in one line and exits 1; a step that fails is a FAIL row, and the exit
status is 1 when any row failed.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import socket
import statistics
import sys
import time
import traceback
from typing import Callable

from mlit_edge.bench.engine_compare import check_engine_pairs


def _timed(fn: Callable[[], object], iters: int, torch) -> float:
    """Median milliseconds of `fn` over `iters` runs, each timed with CUDA events."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def _model(size: str, torch):
    from mlit_edge.model.config import get_config
    from mlit_edge.model.mlit import MLiT

    torch.manual_seed(0)
    return MLiT(get_config(size, num_classes=10)).cuda()


def _batch(n: int, torch):
    from mlit_edge.train.data import load_dataset

    data = load_dataset("mnist5k", "test")
    x = torch.from_numpy(data.inputs(slice(0, n))).cuda()
    return x, data.labels[:n].cuda()


def _step(model, opt, x, y, torch, dtype=None, scaler=None) -> float:
    import torch.nn.functional as F

    with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
        logits, aux = model(x, return_aux=True)
        loss = F.cross_entropy(logits.float(), y) + aux.loss
    opt.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()
    return float(loss.detach())


def check_fp16_amp(size: str, iters: int, torch) -> tuple[bool, str]:
    model = _model(size, torch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    x, y = _batch(128, torch)
    losses = [_step(model, opt, x, y, torch, torch.float16, scaler) for _ in range(5)]
    ms = _timed(lambda: _step(model, opt, x, y, torch, torch.float16, scaler), iters, torch)
    ok = all(map(lambda v: v == v and abs(v) != float("inf"), losses)) and losses[-1] < losses[0]
    return ok, f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, scale {scaler.get_scale():.0f}, {ms:.2f} ms/step (batch 128)"


def check_bf16(size: str, iters: int, torch) -> tuple[bool, str]:
    model = _model(size, torch).eval()
    x, y = _batch(64, torch)
    with torch.no_grad():
        ref = model(x)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            low = model(x).float()
    diff = float((ref - low).abs().max())
    agree = float((ref.argmax(1) == low.argmax(1)).float().mean())
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ms = _timed(lambda: _step(model, opt, x, y, torch, torch.bfloat16), iters, torch)
    return agree >= 0.95, f"max |logit bf16 - fp32| {diff:.3g}, top-1 agreement {agree:.3f}, {ms:.2f} ms/step"


def check_ddp(size: str, iters: int, torch) -> tuple[bool, str]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if not dist.is_nccl_available():
        return False, "this PyTorch has no NCCL"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    try:
        net = DDP(_model(size, torch), device_ids=[0])
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        x, y = _batch(64, torch)
        loss = _step(net, opt, x, y, torch)
        t = torch.ones(4, device="cuda")
        dist.all_reduce(t)
        ms = _timed(lambda: _step(net, opt, x, y, torch), iters, torch)
        ok = float(t.sum()) == 4.0 and loss == loss
        return ok, f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, all-reduce ok, loss {loss:.3f}, " \
                   f"{ms:.2f} ms/step"
    finally:
        dist.destroy_process_group()


def check_cuda_graph(size: str, iters: int, torch) -> tuple[bool, str]:
    from mlit_edge.export.static import to_deploy

    model = to_deploy(_model(size, torch).eval())
    parts, ok = [], True
    for batch in (1, 64):
        static = _batch(batch, torch)[0].clone()
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture wants
                for _ in range(3):
                    model(static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = model(static)
            eager_ms = _timed(lambda: model(static), iters, torch)
            graph_ms = _timed(graph.replay, iters, torch)
            graph.replay()
            torch.cuda.synchronize()
            diff = float((out - model(static)).abs().max())
        ok = ok and diff <= 1e-4
        parts.append(f"batch {batch}: {graph_ms:.3f} ms graph vs {eager_ms:.3f} eager ({eager_ms / graph_ms:.1f}x), "
                     f"diff {diff:.1g}")
    return ok, "; ".join(parts)


def check_runner_cuda(iters: int) -> tuple[bool, str]:
    import numpy as np

    from mlit_edge.runtime.trt_runner import cuda_check, get_cudart

    cudart = get_cudart()
    n = 64 * 3 * 36 * 36  # one batch of 64 model inputs, float32
    nbytes = n * 4
    stream = cuda_check(cudart.cudaStreamCreate())
    start, stop = cuda_check(cudart.cudaEventCreate()), cuda_check(cudart.cudaEventCreate())
    src_h, dst_h = cuda_check(cudart.cudaMallocHost(nbytes)), cuda_check(cudart.cudaMallocHost(nbytes))
    dev = cuda_check(cudart.cudaMalloc(nbytes))
    graph_exec = None
    try:
        src = np.frombuffer(memoryview((ctypes.c_byte * nbytes).from_address(src_h)), np.float32)
        dst = np.frombuffer(memoryview((ctypes.c_byte * nbytes).from_address(dst_h)), np.float32)
        src[:] = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        dst[:] = 0
        h2d, d2h = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        cuda_check(cudart.cudaStreamBeginCapture(stream, cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
        cuda_check(cudart.cudaMemcpyAsync(dev, src_h, nbytes, h2d, stream))
        cuda_check(cudart.cudaMemcpyAsync(dst_h, dev, nbytes, d2h, stream))
        graph = cuda_check(cudart.cudaStreamEndCapture(stream))
        # the one instantiation signature every pinned cuda-python shares (runtime/trt_runner.py says why)
        graph_exec = cuda_check(cudart.cudaGraphInstantiateWithFlags(graph, 0))
        cuda_check(cudart.cudaGraphDestroy(graph))
        times = []
        for _ in range(iters):
            cuda_check(cudart.cudaEventRecord(start, stream))
            cuda_check(cudart.cudaGraphLaunch(graph_exec, stream))
            cuda_check(cudart.cudaEventRecord(stop, stream))
            cuda_check(cudart.cudaStreamSynchronize(stream))
            times.append(float(cuda_check(cudart.cudaEventElapsedTime(start, stop))))
        same = bool(np.array_equal(src, dst))
        ms = statistics.median(times)
        return same, f"pinned {nbytes / 2**20:.1f} MiB H2D+D2H as a graph: {ms:.3f} ms " \
                     f"({2 * nbytes / ms / 1e6:.1f} GB/s), round trip {'identical' if same else 'DIFFERS'}"
    finally:
        if graph_exec is not None:
            cudart.cudaGraphExecDestroy(graph_exec)
        cudart.cudaFree(dev)
        cudart.cudaFreeHost(src_h)
        cudart.cudaFreeHost(dst_h)
        cudart.cudaEventDestroy(start)
        cudart.cudaEventDestroy(stop)
        cudart.cudaStreamDestroy(stream)


def check_profile_engines(iters: int) -> tuple[bool, str, list[str]]:
    """Step 6: build and run every precision for the profile this TensorRT implies; markdown rows."""
    import tempfile

    import numpy as np

    from mlit_edge.bench.stats import time_runner
    from mlit_edge.engine.build import BuildRequest, run_build
    from mlit_edge.runtime import Classifier
    from mlit_edge.devices.profiles import installed_profile
    from mlit_edge.runtime.runners import predict_all
    from mlit_edge.devices.trt_env import import_trt, local_env
    from mlit_edge.train.data import load_dataset

    try:
        trt = import_trt("tensorrt")
    except RuntimeError as e:
        return True, f"skipped: {e}", []
    profile, env = installed_profile(trt.__version__), local_env("tensorrt")
    test = load_dataset("mnist5k", "test")
    images, labels = test.inputs(), test.labels.numpy()
    rows = ["| device | profile | precision | typing | build s | p50 ms b1 | p50 ms b64 | top-1 |", "|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as out:
        for precision in ("fp32", "fp16", "int8"):
            result = run_build(BuildRequest(size="xxs", precision=precision, target="tensorrt", out=out,
                                            calib_cache=None))
            record = result.record.to_json()  # the plan's sidecar as written
            flags = record["engine"]["flags"]
            with Classifier.load(result.artifact) as clf:
                p50 = {}
                for b in (1, 64):
                    x = images[:b]
                    p50[b] = time_runner(lambda: clf.runner.infer({clf.runner.input_name: x}), b,
                                         iterations=iters)["median"]
                logits, _ = predict_all(clf.runner, images, 64)
            top1 = float((logits.argmax(-1) == labels).mean())
            rows.append(f"| {env.module or env.gpu_name} | {profile.name} | {precision} | "
                        f"{'strong' if flags['strongly_typed'] else 'weak'} | {record['engine']['build_s']} | "
                        f"{p50[1]:.3f} | {p50[64]:.3f} | {top1:.4f} |")
    return True, f"{profile.describe()}: 3 engines built and run", rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size", default="xxs", help="model size for the training and graph checks [%(default)s]")
    ap.add_argument("--iters", type=int, default=50, help="timed repetitions of each step [%(default)s]")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here (torch.cuda.is_available() is False); run it on a machine with one",
              file=sys.stderr)
        return 1
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}, size {args.size}")
    checks = [("fp16 AMP + GradScaler", lambda: check_fp16_amp(args.size, args.iters, torch)),
              ("bf16 autocast", lambda: check_bf16(args.size, args.iters, torch)),
              ("NCCL DDP, one process", lambda: check_ddp(args.size, args.iters, torch)),
              ("CUDA graph, eval model", lambda: check_cuda_graph(args.size, args.iters, torch)),
              ("runner's cuda-python pieces", lambda: check_runner_cuda(args.iters)),
              ("TensorRT engines, this profile", lambda: check_profile_engines(args.iters)),
              ("TensorRT engine pairs", lambda: check_engine_pairs(args.iters))]  # bench.engine_compare
    rows, markdown = [], []
    for name, check in checks:
        start = time.perf_counter()
        try:
            ok, figure, *more = check()
            markdown += more[0] if more else []
        except Exception as e:  # one failing path must not hide the others: it is a FAIL row
            ok, figure = False, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            traceback.print_exc(file=sys.stderr)
        rows.append((name, "ok" if ok else "FAIL", f"{time.perf_counter() - start:.1f}", figure))
    widths = [max(len(r[i]) for r in rows + [("check", "result", "s", "")]) for i in range(3)]
    print(f"{'check':<{widths[0]}}  {'result':<{widths[1]}}  {'s':>{widths[2]}}  measured")
    for name, result, seconds, figure in rows:
        print(f"{name:<{widths[0]}}  {result:<{widths[1]}}  {seconds:>{widths[2]}}  {figure}")
    if markdown:
        print("\nfor docs/measurements.md:\n" + "\n".join(markdown))
    return 0 if all(r[1] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
