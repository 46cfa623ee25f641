"""A variant's sidecar figures (export/variants.py `measure`): its top-1 comes from the parity run's logits when
that run covered the whole held-out split, so a build passes over the split once through ONNX Runtime, not twice;
otherwise a pass of its own measures it."""
from dataclasses import replace

import pytest

pytest.importorskip("onnxruntime")

from mlit_edge.artifacts.schema import read_record  # noqa: E402
from mlit_edge.export import variants  # noqa: E402
from mlit_edge.export.handoff import HeldOut  # noqa: E402
from tests.helpers import tiny_model  # noqa: E402


@pytest.fixture
def case(tiny_onnx, monkeypatch):
    """The tiny fp32 graph measured as a trained variant would be (parity, then top-1), and every separate
    top-1 pass counted."""
    passes = []
    real = variants.evaluate_onnx
    monkeypatch.setattr(variants, "evaluate_onnx", lambda *a, **k: passes.append(a) or real(*a, **k))
    record = replace(read_record(tiny_onnx), precision="fp16", random_weights=False)
    return tiny_onnx, record, passes, real


def test_the_top1_is_the_parity_runs_and_what_a_pass_of_its_own_gives(case):
    path, record, passes, real = case
    held_out = HeldOut("mnist5k")
    out = variants.measure(path, record, tiny_model(), held_out=held_out, step=None)
    assert out["parity"]["images"] == 1000 and not passes  # one pass over the split
    assert out["accuracy"] == real(path, held_out)  # the same figure a separate pass gives


def test_a_sample_smaller_than_the_split_or_fed_otherwise_gets_a_pass_of_its_own(case, monkeypatch):
    path, record, passes, _ = case
    held_out = HeldOut("mnist5k")
    monkeypatch.setattr(HeldOut, "sample_is_split", lambda self, n=1000: False)  # a split of more than 1000 images
    out = variants.measure(path, record, tiny_model(), held_out=held_out, step=None)
    assert len(passes) == 1 and out["accuracy"]["images"] == 1000
    monkeypatch.undo()
    assert variants.reusable_for_top1(held_out, ([0.1307] * 3, [0.3081] * 3))
    assert not variants.reusable_for_top1(held_out, ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))
    assert not variants.reusable_for_top1(None, None)
