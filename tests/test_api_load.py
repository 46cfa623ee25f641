"""`mlit_edge.load(anything)` (mlit_edge/api.py): a checkpoint, a weights folder and `pretrained:NAME` give a
`Model`, an artifact the runtime's `Classifier`, anything else one line; `Model.predict` is the artifact's
`predict` with PyTorch behind it. On the tiny random model (tests/conftest.py `tiny_onnx`), in-process."""
import numpy as np
import pytest

import mlit_edge
from mlit_edge.runtime import Classifier

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """tests.helpers.tiny_model(0), the model `tiny_onnx` exports, saved as `mlit-edge train` saves one, with the
    preprocessing `tiny_onnx`'s sidecar records."""
    from mlit_edge.train.checkpoint import make_checkpoint, save_atomic
    from tests.helpers import tiny_model

    model = tiny_model(0)
    meta = {"name": "mnist5k", "classes": [str(i) for i in range(10)], "mean": [0.1307] * 3, "std": [0.3081] * 3,
            "img_size": 36}
    path = tmp_path_factory.mktemp("tiny-ckpt") / "c.pt"
    save_atomic(make_checkpoint("mlit", model, model.cfg, None, meta), path)
    return path


def test_load_opens_what_it_is_given(tiny_onnx, tiny_checkpoint, tmp_path):
    clf = mlit_edge.load(tiny_onnx, threads=1)  # Classifier.load's keywords pass through
    try:
        assert type(clf) is Classifier and clf.runner.is_active
    finally:
        clf.close()
    m = mlit_edge.load(tiny_checkpoint)
    assert type(m) is mlit_edge.Model and m.spec == str(tiny_checkpoint)
    with pytest.raises(TypeError, match="Classifier.load's options, for an artifact"):
        mlit_edge.load(tiny_checkpoint, threads=1)


@pytest.mark.parametrize("name, words", [("notes.txt", "not a model mlit_edge.load opens; give pretrained:NAME"),
                                         ("model", "not a model mlit_edge.load opens"),
                                         ("folder", "holds no model.safetensors: not a weights folder")])
def test_what_load_does_not_open_is_one_line(tmp_path, name, words):
    target = tmp_path / name
    target.mkdir() if name == "folder" else target.write_text("x")
    with pytest.raises(ValueError) as got:
        mlit_edge.load(target)
    assert words in str(got.value) and "\n" not in str(got.value) and "weights_only" not in str(got.value)
    assert ".onnx" in str(got.value) or name == "folder"


def test_model_predict_is_the_artifacts_predict_in_pytorch(tiny_onnx, tiny_checkpoint):
    images = np.random.default_rng(1).integers(0, 256, (6, 30, 50, 3), dtype=np.uint8)
    m = mlit_edge.load(tiny_checkpoint)
    with Classifier.load(tiny_onnx) as clf:
        want = clf.predict(source=images, top_k=3)
    got = m.predict(source=list(images), top_k=3, batch=4)
    assert [p.class_id for p in got] == [p.class_id for p in want]
    assert np.abs(np.array([p.probs for p in got]) - np.array([p.probs for p in want])).max() < 1e-5
    assert [p.batch for p in got] == [4, 4, 4, 4, 2, 2] and got[0].top[0] == (got[0].class_id, got[0].name, got[0].prob)
    gen = m.predict(images, stream=True)
    assert next(gen).to_dict()["index"] == 0
    with pytest.raises(TypeError, match=r"source=3\.5 \(float\) is not a source"):
        m.predict(source=3.5)


def test_a_weights_folder_loads_as_its_checkpoint(tiny_checkpoint, tmp_path):
    from mlit_edge.train.export_weights import export_weights

    export_weights(str(tiny_checkpoint), tmp_path / "w")
    images = np.random.default_rng(2).integers(0, 256, (3, 36, 36, 3), dtype=np.uint8)
    folder, ckpt = mlit_edge.load(tmp_path / "w"), mlit_edge.load(tiny_checkpoint)
    assert folder.spec == str(tmp_path / "w" / "model.safetensors")  # what export and bench are then given
    assert [p.probs.tolist() for p in folder.predict(images)] == [p.probs.tolist() for p in ckpt.predict(images)]
