"""Run any `mlit-edge` command as a JetPack's device would run it, through that JetPack's stand-ins.

    python tools/standin_run.py jetpack-5.1 build --onnx m.onnx --batch 1 --dla-core 0 --precision int8
    python tools/standin_run.py jetpack-5.1 predict d0.png --model artifacts/m-int8.plan
    STANDIN_FAIL_CAPTURE=1 python tools/standin_run.py jetpack-5.1 predict d0.png --model m-fp16.plan

`tensorrt` is the release branch's bindings and `cuda` the cuda-python that JetPack pins (tests/standins), so
this shows what the real code does with NVIDIA's real signatures and preconditions, on a machine with no GPU.
It prints, after the command, what the stand-ins observed: each build's profile and flags, every calibration
batch's bytes against its binding's, and any capture that failed or deserialization that was refused.
STANDIN_FAIL_CAPTURE=1 makes the first CUDA-graph capture fail, as a DLA engine's does on Orin.
For maintainers and the issue tracker's "must show" lines; the tests use the stand-ins directly.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    import pytest

    from tests.standins import JETPACKS, install

    if not argv or argv[0] not in JETPACKS:
        print(f"usage: python tools/standin_run.py {{{','.join(JETPACKS)}}} MLIT-EDGE-ARGS...", file=sys.stderr)
        return 2
    patch = pytest.MonkeyPatch()
    jp = install(patch, argv[0])
    jp.device.fail_next_capture = os.environ.get("STANDIN_FAIL_CAPTURE") == "1"
    print(f"[stand-ins] {jp.trt.module.__stand_in__} (tensorrt {jp.trt.version}), cuda-python {jp.cuda_python}",
          file=sys.stderr)
    from mlit_edge.cli import main as cli

    try:
        cli.main(argv[1:], prog_name="mlit-edge", standalone_mode=True)
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        for event in jp.device.events:
            print(f"[stand-ins] {event}", file=sys.stderr)
        if jp.device.calibration:
            c = jp.device.calibration
            print(f"[stand-ins] calibration: {len(c)} batches of shape {c[0]['shape']} {c[0]['dtype']}; bytes per "
                  f"batch {sorted({x['buffer_bytes'] for x in c})} against the binding's {c[0]['binding_bytes']}",
                  file=sys.stderr)
        patch.undo()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
