"""Silence the chatter of exporters and quantizers (warnings and log lines meant for their developers),
so that mlit-edge's own one-line reports stay readable. Errors still propagate."""
from __future__ import annotations

import contextlib
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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
