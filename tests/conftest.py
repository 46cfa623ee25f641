"""Fixtures and settings the whole suite shares.

The suite runs on two pytest-xdist workers (`-n auto` in pyproject.toml). Each worker, and every
CLI it starts, uses one thread, so two workers fill a 2-core machine without fighting over it; the
modules of the end-to-end tests marked `slow` are handed out first, so that neither worker is left with a
long one at the end; and the trained checkpoint that many tests share is trained once for all workers.

`python -m pytest -m "not slow"` is the fast subset (under 2 minutes on 2 cores; the README's test
command runs everything). `slow` marks the end-to-end runs, the TensorRT-RTX builds, training, the
real-size exports, and every test of the trained checkpoint: training it is a minute or more, so a
test that uses it and is not marked `slow` is a collection error (pytest_collection_modifyitems).

Shared fixtures live here and shared helpers in tests/helpers.py: no test module imports another.
"""
import os

if os.environ.get("PYTEST_XDIST_WORKER"):  # before torch is imported: its thread pool reads this once
    os.environ["OMP_NUM_THREADS"] = "1"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from mlit_edge.model.config import MLiTConfig  # noqa: E402

from tests.helpers import EPOCHS, SMALL  # noqa: E402
# The modules of the longest tests, longest first (15-90 s each on the 2-core machine, --durations): they start
# the run, so that no worker begins one while the other is running out of tests. Worksteal hands each worker a
# contiguous half of the order and steals from the end of a queue, so whatever runs last is short.
LONGEST = ("tests/test_api.py", "tests/test_quickstart.py", "tests/engine/test_build.py", "tests/engine/test_profiles.py",
           "tests/export/test_raw_input.py", "tests/standins/test_jetpack_paths.py")


def _module_ranks(items) -> dict[str, int]:
    """Each module's place in the run: the LONGEST in their order, then the other modules with a slow test,
    then the rest. Whole modules move, never single tests: a module-scoped fixture (an export, a stand-in's
    graphs) is then made once per worker, not again for each run of its module's tests."""
    ranks: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        rank = LONGEST.index(module) if module in LONGEST else len(LONGEST) + (item.get_closest_marker("slow") is None)
        ranks[module] = min(rank, ranks.get(module, rank))
    return ranks


def pytest_collection_modifyitems(config, items):
    """The modules of slow end-to-end tests first, the longest leading (`_module_ranks`). Training the shared
    checkpoint takes a minute or more on one core, so every test that needs it must be marked `slow`:
    the fast subset never trains it."""
    unmarked = [item.nodeid for item in items if "trained_checkpoint" in getattr(item, "fixturenames", ())
                and item.get_closest_marker("slow") is None]
    if unmarked:
        raise pytest.UsageError("these tests use the trained checkpoint but are not marked slow (the fast subset, "
                                "-m 'not slow', must not train it): " + ", ".join(unmarked))
    ranks = _module_ranks(items)
    items.sort(key=lambda item: ranks[item.nodeid.split("::")[0]])  # stable: each module keeps its own order


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def tiny_cfg() -> MLiTConfig:
    """A 3-layer mLiT on 12x12 images: every code path of the real sizes, at a fraction of the cost."""
    return MLiTConfig(img_size=12, patch_size=3, num_classes=5, dim=24, depth=3, heads=4, groups=2,
                      hidden_first=16, hidden_last=8, expert_stages=(3, 4, 5))


def _train_small(path: Path) -> None:
    """`EPOCHS` epochs of a small mLiT on the embedded digits, saved as `mlit-edge train` saves a checkpoint."""
    from mlit_edge.model.mlit import MLiT
    from mlit_edge.train.checkpoint import make_checkpoint, save_atomic
    from mlit_edge.train.data import Loader, load_dataset

    torch.manual_seed(0)
    train = load_dataset("mnist5k", "train")
    model = MLiT(MLiTConfig(**SMALL))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for epoch in range(EPOCHS):
        loader = Loader(train, 64, train=True, seed=0, augment=False)
        loader.set_epoch(epoch)
        for x, y in loader:
            logits, aux = model(x, return_aux=True)
            loss = torch.nn.functional.cross_entropy(logits, y) + aux.loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    save_atomic(make_checkpoint("mlit", model, model.cfg, "xxs-custom", train.meta(), epoch=EPOCHS), path)


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    """A small mLiT (36x36 input, 3 layers) trained for `EPOCHS` epochs on the embedded digits, so its
    predictions and routing mean something, and its checkpoint as `mlit-edge train` writes one.

    Trained once per run: under xdist the first worker to get here trains it into the run's shared
    temporary folder while the other waits on the lock, then loads the same file."""
    from filelock import FileLock

    from mlit_edge.train.checkpoint import load_checkpoint, model_from_checkpoint

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the folder all workers of this run share
    path = shared / "trained" / "checkpoint.pt"
    path.parent.mkdir(exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not path.is_file():
            _train_small(path)
    return model_from_checkpoint(load_checkpoint(path)).eval(), path


def _export_trained(trained_checkpoint, folder: Path, probe: bool) -> Path:
    """The trained checkpoint exported as `mlit-edge export --checkpoint` names and records it (fp32,
    dynamic batch, the checkpoint's provenance in the sidecar); with `probe`, the routing outputs too."""
    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.export.source import load_for_export

    model, ckpt = trained_checkpoint
    path = folder / "mlit-xxs-custom-fp32.onnx"
    export_onnx(model, path, load_for_export(str(ckpt), None)[1], probe=probe)
    return path


@pytest.fixture(scope="session")
def trained_onnx(trained_checkpoint, tmp_path_factory) -> Path:
    """`trained_checkpoint` exported with its sidecar (so predictions vary), once per worker. Shared by
    every module that uses it: a test that changes an artifact copies it first, and writes nothing
    beside it."""
    return _export_trained(trained_checkpoint, tmp_path_factory.mktemp("trained-onnx"), probe=False)


@pytest.fixture(scope="session")
def trained_probe_onnx(trained_checkpoint, tmp_path_factory) -> Path:
    """The same export with each layer's chosen experts as outputs (`experts_0`...), once per worker;
    the same sharing rules as `trained_onnx`."""
    return _export_trained(trained_checkpoint, tmp_path_factory.mktemp("trained-probe-onnx"), probe=True)


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory) -> Path:
    """A random 3-layer mLiT (tests.helpers.tiny_model) exported as mlit-tiny-fp32.onnx, once per worker;
    the same sharing rules as `trained_onnx`."""
    from tests.helpers import export_tiny

    return export_tiny(tmp_path_factory.mktemp("tiny") / "mlit-tiny-fp32.onnx")
