"""One fresh interpreter per artifact.

In one process the allocator hands memory freed by the reference or an earlier artifact to the next
one, so its load and run figures read near zero. A fresh interpreter per artifact gives each its own;
the reference's logits and routing are computed once by the parent and handed over in an .npz.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..runtime.messages import first_line, log_to_stderr
from .one_artifact import bench_artifact
from .options import BenchConfig, Reference

RUNTIME_MODULE = {"onnxruntime": "onnxruntime", "torch": "torch"}  # imported before the baseline is taken


def bench_isolated(paths: list[str], cfg: BenchConfig, images: np.ndarray | None, labels: np.ndarray | None,
                   ref: Reference | None) -> list[dict]:
    """`bench_artifact` for each path, each in its own child process; a child's failure is its entry's one-line
    `error` (the others are still measured and reported)."""
    entries = []
    with tempfile.TemporaryDirectory(prefix="mlit-bench-") as tmp:
        tmp = Path(tmp)
        arrays = {}
        if images is not None:
            arrays.update(images=images, labels=labels)
        if ref is not None and ref.logits is not None:
            arrays["ref_logits"] = ref.logits
            arrays.update({f"ref_route_{i}": r for i, r in enumerate(ref.routes or [])})
        np.savez(tmp / "inputs.npz", **arrays)
        (tmp / "config.json").write_text(json.dumps({"bench": {**asdict(cfg), "batches": list(cfg.batches)},
                                                     "reference": str(Path(ref.path).resolve()) if ref else None}))
        for i, path in enumerate(paths):
            out = tmp / f"entry{i}.json"
            proc = subprocess.run([sys.executable, "-m", "mlit_edge.bench.isolation", str(tmp),
                                   str(Path(path).resolve()), str(out)],
                                  stdout=subprocess.DEVNULL)  # its progress lines go to our stderr
            result = json.loads(out.read_text()) if out.is_file() else {}
            if proc.returncode != 0 or "error" in result:  # this artifact's error; the others are still measured
                entries.append({"artifact": str(path),
                                "error": result.get("error") or f"bench process exited with {proc.returncode}"})
                continue
            entry = result["entry"]
            entry["artifact"] = str(path)
            entries.append(entry)
    return entries


def worker(folder: str, path: str, out: str) -> int:
    """The child side: bench one artifact, write {"entry": ...} or {"error": ...}."""
    import importlib

    from ..runtime.artifact import artifact_format

    log_to_stderr()  # its progress lines reach the parent's stderr
    folder = Path(folder)
    try:
        sent = json.loads((folder / "config.json").read_text())
        raw = sent["bench"]
        cfg = BenchConfig(**{**raw, "batches": tuple(raw["batches"]),
                             "providers": tuple(raw["providers"]) if raw["providers"] else None, "isolate": True})
        module = RUNTIME_MODULE.get(artifact_format(path).name)
        if module:  # the runtime library itself is not the artifact's memory
            importlib.import_module(module)
        with np.load(folder / "inputs.npz") as z:
            arrays = {k: z[k] for k in z.files}
        ref = None
        if "ref_logits" in arrays:
            routes = [arrays[f"ref_route_{i}"] for i in range(sum(k.startswith("ref_route_") for k in arrays))]
            ref = Reference(sent["reference"] or "", {}, arrays["ref_logits"], routes or None)
        entry = bench_artifact(path, cfg, arrays.get("images"), arrays.get("labels"), ref)
        result = {"entry": entry}
    except Exception as e:  # reported by the parent as one line
        result = {"error": first_line(e)}
    Path(out).write_text(json.dumps(result))
    return 1 if "error" in result else 0


if __name__ == "__main__":
    raise SystemExit(worker(*sys.argv[1:4]))
