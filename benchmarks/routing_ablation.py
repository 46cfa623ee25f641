"""The routing ablation: the same model, data, seed and epochs trained with each named gating, then
built and benched, so routing health and what it costs in reduced precision sit in one table.

For each gating of `mlit_edge.model.config.GATINGS` (or those given):
1. `mlit-edge train --gating NAME` (resumed when its run folder already holds a checkpoint);
2. `mlit-edge export --precision fp32,fp16,int8` (INT8 in TensorRT's QDQ recipe, the one a Jetson runs);
3. `mlit-edge bench` of the three ONNX files against the checkpoint (accuracy and routing only);
4. the last epoch's routing health from metrics.jsonl.

    python benchmarks/routing_ablation.py --epochs 15 --batch-size 32 --lr 1e-3 --out runs/ablation
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CLI = [sys.executable, "-m", "mlit_edge.cli"]


def run(args: list[str], log: Path) -> None:
    with open(log, "a") as f:
        proc = subprocess.run([*CLI, *map(str, args)], stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): mlit-edge {' '.join(map(str, args))}; see {log}")


def one(name: str, args, folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "ablation.log"
    ckpt = folder / "checkpoint.pt"
    start = time.perf_counter()
    train = ["train", "--size", args.size, "--data", "mnist5k", "--epochs", args.epochs, "--batch-size",
             args.batch_size, "--lr", args.lr, "--seed", args.seed, "--gating", name, "--out", folder,
             "--no-progress", "--eval-every", args.eval_every] + (["--compile"] if args.compile else [])
    run(train + (["--resume"] if ckpt.is_file() else []), log)
    train_s = time.perf_counter() - start
    art = folder / "onnx"
    art.mkdir(exist_ok=True)
    run(["export", "--checkpoint", ckpt, "--precision", "fp32,fp16,int8", "--out", art / "m-fp32.onnx", "--force"],
        log)
    run(["bench", art / "m-fp32.onnx", art / "m-fp16.onnx", art / "m-int8.onnx", ckpt, "--batch", "1",
         "--iterations", "3", "--warmup-iters", "1", "--warmup-ms", "0", "--in-process", "--json",
         folder / "bench.json"], log)
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    bench = {a["precision"] + "/" + a["format"]: a["accuracy"] for a in json.loads((folder / "bench.json").read_text())
             ["artifacts"]}
    test = last["routing"]["test"] or last["routing"]["train"]
    reached = next((r["epoch"] + 1 for r in rows if r.get("test") and r["test"]["acc"] >= 0.95), None)
    return {"gating": name, "top1": last["test"]["acc"], "epochs_to_95": reached, "train_s": train_s,
            "clean_share_min": [min(s) for s in test["clean"]], "clean_share_max": [max(s) for s in test["clean"]],
            "entropy": test["entropy"], "agreement_end": last["routing"]["train"]["agreement"],
            "gap_noise_end": last["routing"]["train"]["gap_noise"],
            "int8_delta": bench["int8/onnxruntime"]["top1_delta"], "int8_route": bench["int8/onnxruntime"]
            ["routing_agreement"], "fp16_route": bench["fp16/onnxruntime"]["routing_agreement"]}


def main() -> None:
    from mlit_edge.model.config import GATINGS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gatings", default=",".join(GATINGS))
    ap.add_argument("--size", default="xxs")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=1)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--out", default="runs/ablation")
    args = ap.parse_args()
    out = Path(args.out)
    results = [one(name, args, out / name) for name in args.gatings.split(",")]
    (out / "ablation.json").write_text(json.dumps(results, indent=1))
    print(f"routing ablation: mLiT-{args.size.upper()} on mnist5k, {args.epochs} epochs, batch {args.batch_size}, "
          f"lr {args.lr}, seed {args.seed}; routing health on the test split, agreement and gap/noise on the last "
          "epoch's training batches; INT8 is TensorRT's QDQ recipe run by ONNX Runtime")
    print(f"{'gating':<10} {'top-1':>6} {'95% at':>6} {'clean share min-max':>20} {'agree':>6} {'gap/noise':>10} "
          f"{'INT8 Δ':>7} {'INT8 route':>10} {'fp16 route':>10}")
    for r in results:
        gn = [g for g in r["gap_noise_end"] if g is not None]
        print(f"{r['gating']:<10} {r['top1']:>6.4f} {str(r['epochs_to_95'] or '-'):>6} "
              f"{min(r['clean_share_min']):>9.2f}-{max(r['clean_share_max']):<10.2f} "
              f"{min(r['agreement_end']):>6.3f} {(f'{min(gn):.2f}' if gn else '-'):>10} "
              f"{100 * r['int8_delta']:>+6.1f}pt {min(r['int8_route']):>10.3f} {min(r['fp16_route']):>10.3f}")


if __name__ == "__main__":
    main()
