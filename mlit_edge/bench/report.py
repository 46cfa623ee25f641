"""The bench report as people read it: one table row per artifact and batch, and PNG plots."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from ..base.messages import printable
from . import power
from ..artifacts.sidecar import atomic_path

logger = logging.getLogger(__name__)


def row(entry: dict, batch: int, stats: dict) -> dict:
    """One table row of an artifact's entry at one batch size."""
    acc = entry["accuracy"] or {}
    ra = acc.get("routing_agreement")
    return {"artifact": entry["label"], "format": entry["format"], "precision": entry["precision"], "batch": batch,
            "size_mb": entry["size_mb"], "top1": acc.get("top1"), "top1_delta": acc.get("top1_delta"),
            "agreement": acc.get("agreement"), "routing_agreement": (min(ra) if ra else None),
            "p50_ms": stats["median"], "p99_ms": stats["p99"], "fps": stats["throughput"],
            "gpu_p50_ms": (stats.get("gpu_compute") or {}).get("median"),
            "run_rss_mb": stats["run_rss_mb"], "load_rss_mb": entry["load_rss_mb"], "device_mb": entry["device_mb"],
            **power.row_fields(stats)}  # on a Jetson only: absent, not zero, elsewhere


def format_bench(report: dict) -> str:
    """The table, then what it was measured on and every artifact's notes."""
    head = ["artifact", "format", "prec", "batch", "MB", "top-1", "Δ torch", "agree", "route", "p50 ms", "p99 ms",
            "FPS", "RSS MB load/run"]

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    rows = [[r["artifact"], r["format"], r["precision"], str(r["batch"]), f(r["size_mb"], ".2f"),
             f(r["top1"], ".4f"), "-" if r["top1_delta"] is None else f"{100 * r['top1_delta']:+.2f}pt",
             f(r["agreement"], ".4f"), f(r["routing_agreement"], ".4f"), f(r["p50_ms"], ".3f"),
             f(r["p99_ms"], ".3f"), f(r["fps"], ".0f"), f"+{r['load_rss_mb']:.0f} / +{r['run_rss_mb']:.0f}"]
            for r in report["rows"]]
    if any("board_w" in r for r in report["rows"]):  # measured on a Jetson (bench.power)
        head += power.HEAD
        rows = [row + power.cells(r) for row, r in zip(rows, report["rows"])]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) if i < 3 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    lines += ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
              for row in rows]
    cfg, env = report["config"], report["environment"]
    ho = report["harness_overhead"]
    lines.append(f"data: {cfg.get('data')} {cfg.get('split')} ({cfg.get('images', 0)} images); reference: "
                 f"{cfg.get('reference') or 'none'}; route = worst layer's top-k agreement with the reference")
    lines.append(f"host: {env['cpu']}, {env['threads'] or 'default'} threads; harness overhead "
                 f"{ho['median_us']:.1f} µs/call (median)")
    isolated = all(a.get("isolated") for a in report["artifacts"])
    lines.append("RSS MB load/run: resident memory the artifact added when loaded / holds after its timed runs "
                 + ("(each artifact in its own process; process peak in the JSON)" if isolated else
                    "(in one process: later artifacts reuse freed memory, so theirs read low)")
                 + ("; ONNX Runtime's CPU arena off" if cfg.get("ort_arena") is False else ""))
    if power.footnote(report):
        lines.append(power.footnote(report))
    for a in report["artifacts"]:
        if a.get("device_mb") is not None:
            lines.append(f"device memory: {a['label']}: {a['device_mb']:.1f} MB")
        lines += [f"note: {a['label']}: {printable(n)}" for n in a["notes"]]  # a note may quote a file's name
    lines += [f"error: {f['label']}: not benched: {printable(f['error'])}" for f in report.get("failed", [])]
    return "\n".join(lines)


def plot(report: dict, folder: str | Path) -> list[Path]:
    """latency.png (per-call latency distribution per artifact and batch) and accuracy_latency.png."""
    from ..train.plots import pyplot, save_figure

    plt = pyplot()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    series = [(f"{a['label']} b{b}", s["samples_ms"]) for a in report["artifacts"] for b, s in a["latency"].items()]
    paths = []
    if series:
        fig, ax = plt.subplots(figsize=(8, 0.45 * len(series) + 1.5))
        ax.boxplot([s for _, s in series], vert=False, whis=(1, 99), showfliers=False)
        ax.set_yticks(range(1, len(series) + 1), [n for n, _ in series])
        ax.set_xscale("log")
        ax.set_xlabel("latency per call (ms), whiskers p1-p99")
        paths.append(save_figure(fig, folder / "latency.png"))
    smallest = min((r["batch"] for r in report["rows"]), default=None)
    points = [(r["p50_ms"], r["top1"], f"{r['artifact']} b{r['batch']}") for r in report["rows"]
              if r["top1"] is not None and r["batch"] == smallest]
    if points:
        fig, ax = plt.subplots(figsize=(6, 4))
        for x, y, name in points:
            ax.scatter(x, y)
            ax.annotate(name, (x, y), fontsize=7)
        ax.set_xlabel("p50 latency (ms)")
        ax.set_ylabel("top-1")
        paths.append(save_figure(fig, folder / "accuracy_latency.png"))
    return paths


def save_report(report: dict, json_path: str | Path | None, plot_dir: str | Path | None) -> None:
    """The full report as JSON (with per-call samples) and the plots, where asked for."""
    if json_path:
        with atomic_path(json_path) as tmp:
            tmp.write_text(json.dumps(report, indent=1) + "\n")
        logger.info(f"report: {json_path}")
    if plot_dir:
        for p in plot(report, plot_dir):
            logger.info(f"plot: {p}")
