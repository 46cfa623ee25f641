import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlit_edge.train.data import ImageSet, Loader
from mlit_edge.artifacts.preprocess import normalize, preprocess, resize_images, resize_weights


@pytest.mark.parametrize("n_in", [28, 32, 36, 57, 100, 500])
def test_resize_matches_torch_antialiased_bilinear(n_in):
    img = np.random.default_rng(0).uniform(0, 255, (n_in, n_in + 3, 3))
    ours = np.einsum("oh,hwc->owc", resize_weights(n_in, 36), img)
    ours = np.einsum("pw,owc->opc", resize_weights(n_in + 3, 36), ours)
    ref = F.interpolate(torch.from_numpy(img).permute(2, 0, 1)[None], size=(36, 36), mode="bilinear",
                        align_corners=False, antialias=True)[0].permute(1, 2, 0).numpy()
    np.testing.assert_allclose(ours, ref, atol=1e-6 * 255)


def test_resize_rows_sum_to_one_and_identity_at_same_size():
    np.testing.assert_allclose(resize_weights(80, 36).sum(1), 1.0)
    img = np.random.default_rng(1).integers(0, 256, (36, 36, 3), dtype=np.uint8)
    assert np.array_equal(resize_images([img])[0], img)


def test_gray_and_rgba_become_rgb():
    gray = np.full((28, 28), 200, np.uint8)
    rgba = np.zeros((40, 30, 4), np.uint8)
    out = resize_images([gray, rgba])
    assert out.shape == (2, 36, 36, 3) and (out[0] == 200).all() and (out[1] == 0).all()


@pytest.mark.parametrize("bad,err", [(np.zeros((8, 8), np.float32), TypeError),
                                     (np.zeros((8, 8, 2), np.uint8), ValueError),
                                     (np.zeros((0, 8, 3), np.uint8), ValueError)])
def test_bad_images_are_refused(bad, err):
    with pytest.raises(err):
        preprocess([bad], (0.5,) * 3, (0.5,) * 3)


def test_device_normalisation_equals_numpy_eval_preprocessing():
    """Training normalises on the device; the runtime uses preprocess(); they must agree to 1e-6."""
    rng = np.random.default_rng(2)
    raw = [rng.integers(0, 256, (28, 28), dtype=np.uint8) for _ in range(6)]
    mean, std = (0.1307,) * 3, (0.3081,) * 3
    stored = resize_images(raw)  # what the dataset keeps
    ds = ImageSet("t", torch.from_numpy(stored.transpose(0, 3, 1, 2).copy()), torch.zeros(6, dtype=torch.int64),
                  ["0"], mean, std, flip=False)
    x, _ = next(iter(Loader(ds, 6, train=False)))
    np.testing.assert_allclose(x.numpy(), preprocess(raw, mean, std), atol=1e-6, rtol=0)
    np.testing.assert_allclose(normalize(stored, mean, std), preprocess(raw, mean, std), atol=0)


def test_first_line_of_any_exception():
    """One line of any error, never an IndexError on an empty message: the CLI, serve and bench print it."""
    from mlit_edge.base.messages import first_line, typed_line

    assert first_line(ValueError("bad input\nTraceback details")) == "bad input"
    assert first_line(ValueError("\n  \nsecond")) == "second"
    assert first_line(MemoryError()) == "MemoryError" and first_line(RuntimeError("")) == "RuntimeError"
    assert first_line(KeyError("missing key")) == "missing key"  # not "'missing key'"
    assert first_line(ValueError("x" * 500), 20) == "x" * 20
    assert typed_line(MemoryError()) == "MemoryError" and typed_line(OSError("disk full")) == "OSError: disk full"


def test_the_banded_filter_is_the_dense_one_and_memory_follows_the_pixels():
    """Long sides are resized by bands built one output at a time: the same weights as the dense matrix,
    and a 1 x 1,000,000 image costs a few MB, not a 36 x 10^6 float64 matrix (288 MB)."""
    import tracemalloc

    from mlit_edge.artifacts import preprocess as P

    for n_in in (1, 7, 37, 5000, 12345):
        dense = np.zeros((36, n_in))
        for i in range(36):
            start, w = P.resize_band(n_in, 36, i)
            dense[i, start:start + len(w)] = w
        np.testing.assert_allclose(dense, P.resize_weights(n_in, 36), atol=1e-15)
    wide = np.random.default_rng(0).integers(0, 256, (3, 9000), dtype=np.uint8)
    banded = resize_images([wide])
    P.resize_weights.cache_clear()
    try:
        P.DENSE_MAX, saved = 10**9, P.DENSE_MAX
        assert np.abs(resize_images([wide]).astype(int) - banded).max() <= 1
    finally:
        P.DENSE_MAX = saved
    for shape in ((1, 1_000_000), (1_000_000, 1)):
        image = np.full(shape, 7, np.uint8)
        tracemalloc.start()
        out = resize_images([image])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert (out == 7).all() and peak < 40 << 20, peak


@pytest.mark.parametrize("mode", ["L", "1", "LA", "I;16"])
def test_grey_files_kept_as_one_channel_resize_exactly_as_rgb(tmp_path, mode):
    """load_image(keep_grey=True), which the Classifier and the ImageFolder reader use, holds a grey file
    in a third of the memory and resizes to the very pixels the RGB conversion gives."""
    from PIL import Image

    from mlit_edge.runtime.images import load_image

    rng = np.random.default_rng(0)
    if mode == "I;16":
        img = Image.fromarray(rng.integers(0, 65536, (50, 70), dtype=np.uint16))
    else:
        img = Image.fromarray(rng.integers(0, 256, (50, 70), dtype=np.uint8)).convert(mode)
    path = tmp_path / "g.png"
    img.save(path)
    grey, rgb = load_image(path, keep_grey=True), load_image(path)
    assert grey.shape == (50, 70, 1) and rgb.shape == (50, 70, 3)
    assert np.array_equal(np.repeat(grey, 3, axis=2), rgb)
    assert np.array_equal(resize_images([grey], 36), resize_images([rgb], 36))
