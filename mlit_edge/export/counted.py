"""`runtime.runners.predict_all` with its progress shown (`base.progress`): the export's verification,
evaluation and routing coverage run the same batches, one call each, so the bar counts the images done
and the numbers are those of one `predict_all` over all of them."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..base.progress import progress
from ..runtime.runners import Runner, predict_all


def predict_counted(desc: str, runner: Runner, images: np.ndarray, batch: int = 64, routes: bool = False,
                    normalised: "tuple[Sequence[float], Sequence[float]] | None" = None
                    ) -> "tuple[np.ndarray, list[np.ndarray] | None]":
    """`predict_all(runner, images, batch, routes, normalised)`, reported as step `desc` batch by batch."""
    step = runner.static_batch or batch  # predict_all's own chunks: each call below is one of them
    logits, per_layer = [], []
    with progress(desc, len(images)) as shown:
        for i in range(0, len(images), step):
            got, layers = predict_all(runner, images[i:i + step], step, routes, normalised)
            logits.append(got)
            per_layer.append(layers)
            shown.advance(len(got))
    if not logits:
        return predict_all(runner, images, batch, routes, normalised)  # no image: predict_all's own answer
    return np.concatenate(logits), ([np.concatenate(r) for r in zip(*per_layer)] if routes else None)
