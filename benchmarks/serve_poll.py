"""What one poll of `serve`'s inbox costs with a backlog, the poll before issue 24 against today's, side by
side in one run on the same folders.

    python benchmarks/serve_poll.py [--files 2000,10000] [--rounds 5]

A poll lists the inbox and updates the "unchanged since" table of every waiting file. The previous poll
(reproduced below from commit 94acc1b, for this comparison only) listed with `iterdir`, stat'ed each file
twice and rebuilt the set of names once per entry of the table (quadratic); today's is `serve._candidates`
(one scan, one stat a file) and one set. The files are empty: no image is read, only the bookkeeping.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlit_edge.runtime.serve import TEMPORARY_SUFFIXES, _candidates  # noqa: E402


def poll_before(inbox: Path, seen: dict) -> dict:
    entries = sorted(inbox.iterdir())
    files = [p for p in entries if not p.name.startswith(".") and not p.name.endswith(TEMPORARY_SUFFIXES)
             and p.is_file()]
    now = time.monotonic()
    for f in files:
        st = f.stat()
        key = (st.st_size, st.st_mtime_ns)
        if f.name not in seen or seen[f.name][0] != key:
            seen[f.name] = (key, now)
    return {name: v for name, v in seen.items() if name in {f.name for f in files}}


def poll_after(inbox: Path, seen: dict) -> dict:
    files = _candidates(inbox)
    now = time.monotonic()
    for f, key in files:
        if f.name not in seen or seen[f.name][0] != key:
            seen[f.name] = (key, now)
    names = {f.name for f, _ in files}
    return {name: v for name, v in seen.items() if name in names}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default="2000,10000", help="backlog sizes, comma-separated")
    ap.add_argument("--rounds", type=int, default=5, help="polls timed per size and method (median)")
    args = ap.parse_args()
    print(f"{'files':>6}  {'before s/poll':>13}  {'after s/poll':>12}  {'speed-up':>8}")
    for n in map(int, args.files.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            inbox = Path(tmp)
            for i in range(n):
                (inbox / f"{i:06d}.png").write_bytes(b"")
            times: dict = {"before": [], "after": []}
            seen_before: dict = {}
            seen_after: dict = {}
            for _ in range(args.rounds):  # alternated, so drift in the machine's load hits both
                for name, poll, seen in (("before", poll_before, seen_before), ("after", poll_after, seen_after)):
                    start = time.perf_counter()
                    seen.update(poll(inbox, seen))
                    times[name].append(time.perf_counter() - start)
            b, a = statistics.median(times["before"]), statistics.median(times["after"])
            print(f"{n:>6}  {b:>13.3f}  {a:>12.4f}  {b / a:>7.0f}x")


if __name__ == "__main__":
    main()
