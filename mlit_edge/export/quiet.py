"""Silence the chatter of exporters and quantizers (warnings and log lines meant for their developers),
so that mlit-edge's own one-line reports stay readable. Errors still propagate."""
from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Iterator

LOGGERS = ("", "torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "root")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    levels = {name: logging.getLogger(name).level for name in LOGGERS}
    try:
        for name in LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
        # ONNX Runtime's Percentile/Entropy calibrators print() their progress: on stdout it would land among the
        # lines a script reads from `mlit-edge build` (the artifact's path)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
