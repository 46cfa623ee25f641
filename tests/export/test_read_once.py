"""Each file is read once per command: over a real `export --precision fp32,fp16,int8` and a real
`build --precision int8 --target onnxruntime`, the fp32 ONNX is hashed once (when it is published), its
sidecar is read no more than once, it is parsed once, and the test split is decoded once.

Before the plan (`export.resolve`) the same runs hashed it 7 and 3 times, read its sidecar 3 and 1
times, parsed it 3 and 2 times and decoded the test split 5 and 2 times (docs/measurements.md).
"""
import pytest

pytest.importorskip("onnx")

from tests.counting import count_work  # noqa: E402


def _counts(work, name: str) -> dict:
    return {**work.of(name), "test split decoded": sum(n for (_, split), n in work.decoded.items() if split == "test"),
            "train split decoded": sum(n for (_, split), n in work.decoded.items() if split == "train")}


@pytest.mark.slow
def test_export_and_build_read_each_file_once(trained_checkpoint, tmp_path):
    from mlit_edge.engine.build import BuildRequest, run_build
    from mlit_edge.export.pipeline import ExportRequest, run_export

    _, ckpt = trained_checkpoint
    with count_work() as export:
        made = run_export(ExportRequest(checkpoint=str(ckpt), out=str(tmp_path / "m.onnx"),
                                        precisions=("fp32", "fp16", "int8"), calib_n=128))
    assert [p.name for p in made] == ["m.onnx", "m-fp16.onnx", "m-int8.onnx"]
    assert _counts(export, "m.onnx") == {"hashed": 1, "sidecar read": 0, "parsed": 1, "test split decoded": 1,
                                         "train split decoded": 1}, export
    for variant in ("m-fp16.onnx", "m-int8.onnx"):  # hashed when published, parsed at most once (its routing)
        assert export.hashed[variant] == 1 and export.parsed[variant] <= 1, export

    with count_work() as build:
        result = run_build(BuildRequest(checkpoint=str(ckpt), precision="int8", target="onnxruntime",
                                        out=str(tmp_path / "b"), calib_n=128))
    fp32 = result.record.source_onnx
    assert fp32.endswith("-fp32-ort.onnx")
    assert _counts(build, fp32) == {"hashed": 1, "sidecar read": 0, "parsed": 1, "test split decoded": 1,
                                    "train split decoded": 1}, build
    assert build.hashed[result.artifact.name] == 1 and build.parsed[result.artifact.name] <= 1, build


def test_the_counter_sees_repeated_work(tiny_cfg, tmp_path):
    """The counter itself bites: two reads of a sidecar and two parses count two."""
    import onnx

    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.export.source import load_for_export
    from mlit_edge.model.mlit import MLiT
    import mlit_edge.runtime.runners as runners
    import mlit_edge.artifacts.sidecar as sidecar

    model = MLiT(tiny_cfg).eval()
    info = load_for_export(None, "xxs", tiny_cfg.num_classes, random_weights=True)[1]
    info["preprocess"]["size"] = tiny_cfg.img_size
    export_onnx(model, tmp_path / "t.onnx", info)
    with count_work() as work:  # the package's functions as its stages call them: through their modules
        sidecar.read_sidecar(tmp_path / "t.onnx")
        sidecar.read_sidecar(tmp_path / "t.onnx", verify_hash=False)
        runners.load_onnx(tmp_path / "t.onnx")
        onnx.load_from_string((tmp_path / "t.onnx").read_bytes())
    assert work.of("t.onnx") == {"hashed": 1, "sidecar read": 2, "parsed": 1 + 1}
