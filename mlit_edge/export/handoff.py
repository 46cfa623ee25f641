"""What one step of the export stage hands the next, so that nothing is read twice: the artifact it
made (`Variant`: its path, its typed record, its graph parsed once) and the held-out images decoded once
(`HeldOut`). Stages pass these forward instead of paths to read again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts.schema import ArtifactRecord, read_record
from ..runtime.runners import load_onnx
from ..artifacts.sidecar import sha256_file

HELD_OUT = 1000  # images of the test split a variant is compared with PyTorch on


class HeldOut:
    """A dataset's test split, decoded once per command: every artifact's accuracy and every variant's
    parity are measured on it."""

    def __init__(self, dataset: str, data_root: str | Path = "data") -> None:
        self.dataset, self.data_root = dataset, data_root
        self._ds: Any = None

    @property
    def split(self):
        if self._ds is None:
            from ..train.data import load_dataset

            self._ds = load_dataset(self.dataset, "test", self.data_root)
        return self._ds

    def labelled(self) -> tuple[np.ndarray, np.ndarray, str]:
        """All images (preprocessed), their labels and the dataset's name."""
        return self.split.inputs(), self.split.labels.numpy(), self.split.name

    def sample(self, n: int = HELD_OUT, seed: int = 0) -> np.ndarray:
        """The seeded subset `train.data.sample_images` draws, from the split already decoded."""
        from ..train.data import sample_indices

        return self.split.inputs(sample_indices(len(self.split), n, seed))

    def sample_is_split(self, n: int = HELD_OUT) -> bool:
        """Whether `sample(n)` is the whole split in its order (the subset is sorted), so that outputs computed
        on the sample give the split's top-1 without a second pass."""
        return len(self.split) <= n


@dataclass
class Variant:
    """An artifact the run made or was given: its path and typed record, with its graph parsed once
    when a later step needs it."""

    path: Path
    record: ArtifactRecord
    coverage: dict | None = None  # INT8: tokens per expert per layer on the calibration set
    calibration_reused: bool | None = None
    proto: Any = field(default=None, repr=False)  # the parsed ONNX (`graph`)

    @classmethod
    def read(cls, path: str | Path) -> "Variant":
        """An fp32 export already on disk, with its sidecar read and checked once."""
        return cls(Path(path), read_record(path))

    def graph(self):
        """A copy of the parsed ONNX, parsed on the first call only (each caller may edit its copy)."""
        import onnx

        if self.proto is None:
            self.proto = load_onnx(self.path)
        copy = onnx.ModelProto()
        copy.CopyFrom(self.proto)
        return copy

    @property
    def sha256(self) -> str:
        """The artifact's sha256 as its sidecar records it (checked when the sidecar was read or written)."""
        if self.record.sha256 is None:
            self.record = self.record.derive(sha256=sha256_file(self.path))
        return self.record.sha256
