"""Do two trees make the same artifacts? Runs `mlit-edge quickstart` in this checkout and in an earlier
revision (a temporary git worktree, `before_after.trees`), then compares every artifact the two wrote:

- each sidecar field by field (bench timings are not in sidecars; `sha256` and `bytes` follow the graph);
- each ONNX graph byte for byte once the exporter's own stack traces are set aside: torch's dynamo exporter
  writes into each node the file path and line of the code that called it, so a tree at another path, or
  with its lines moved, writes other bytes for the same graph.

    python benchmarks/same_artifacts.py --before fc1087c
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from before_after import trees

TRACE = "pkg.torch.onnx.stack_trace"  # the exporter's metadata that names the calling code's files and lines


def flat(d, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict = {}
    for k, v in d.items():
        out.update(flat(v, f"{prefix}.{k}" if prefix else k))
    return out


def graph_without_traces(path: Path) -> bytes:
    import onnx

    model = onnx.load(str(path))
    for node in model.graph.node:
        keep = [(p.key, p.value) for p in node.metadata_props if p.key != TRACE]
        del node.metadata_props[:]
        for key, value in keep:
            node.metadata_props.add(key=key, value=value)
    return model.SerializeToString()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the earlier revision")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, trees(args.before, Path(tmp)) as found:
        made = {}
        for name, root in found.items():
            work = Path(tmp) / name.replace(" ", "-")
            work.mkdir()
            env = {**os.environ, "PYTHONPATH": str(root), "XDG_CACHE_HOME": str(work / "cache")}
            subprocess.run([sys.executable, "-m", "mlit_edge.cli", "quickstart"], cwd=work, env=env, check=True,
                           capture_output=True)
            made[name] = work / "quickstart" / "artifacts"
        now, then = made["this checkout"], made[args.before]
        for sidecar in sorted(then.glob("*.json")):
            a, b = flat(json.loads(sidecar.read_text())), flat(json.loads((now / sidecar.name).read_text()))
            differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            artifact = sidecar.name.removesuffix(".json")
            same_graph = graph_without_traces(then / artifact) == graph_without_traces(now / artifact)
            print(f"{artifact}: {len(a)} sidecar fields, differing: {', '.join(differ) or 'none'}; graph identical "
                  f"without the exporter's stack traces: {same_graph}")


if __name__ == "__main__":
    main()
