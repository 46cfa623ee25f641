"""`runtime.runners.predict_all` with its progress shown (`base.progress`): the export's verification,
evaluation and routing coverage, counted by the images of each chunk `predict_all` runs."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..base.progress import progress
from ..runtime.runners import Runner, predict_all


def predict_counted(desc: str, runner: Runner, images: np.ndarray, batch: int = 64, routes: bool = False,
                    normalised: "tuple[Sequence[float], Sequence[float]] | None" = None
                    ) -> "tuple[np.ndarray, list[np.ndarray] | None]":
    """`predict_all(runner, images, batch, routes, normalised)`, reported as step `desc` chunk by chunk."""
    with progress(desc, len(images)) as shown:
        return predict_all(runner, images, batch, routes, normalised, done=shown.advance)
