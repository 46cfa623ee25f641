#!/usr/bin/env bash
# Install the mlit-edge runtime on a Jetson with JetPack 6 (L4T R36).
#
# Uses the system TensorRT that JetPack ships (python3-libnvinfer), inside a venv created with
# --system-site-packages so that the venv sees it. torch is NOT installed: the runtime needs numpy,
# Pillow, click, cuda-python and TensorRT (ONNX Runtime as an optional fallback).
#
#   sudo ./deploy/install-jetson.sh [SOURCE]      SOURCE: an mlit-edge checkout or wheel (default: .)
#
# Environment: PREFIX (default /opt/mlit-edge), WITH_ORT=1 to add onnxruntime for .onnx artifacts.
set -euo pipefail

SOURCE="${1:-.}"
PREFIX="${PREFIX:-/opt/mlit-edge}"
WITH_ORT="${WITH_ORT:-0}"

die() { echo "install-jetson: $*" >&2; exit 1; }

[ -r /etc/nv_tegra_release ] || die "this is not a Jetson (no /etc/nv_tegra_release)"
release="$(head -n 1 /etc/nv_tegra_release)"
case "$release" in
  *R36*) ;;
  *) echo "install-jetson: warning: expected L4T R36 (JetPack 6), found: $release" >&2 ;;
esac

python3 -c "import tensorrt" 2>/dev/null \
  || die "TensorRT's Python bindings are missing: sudo apt install python3-libnvinfer (part of JetPack)"
trt_version="$(python3 -c 'import tensorrt; print(tensorrt.__version__)')"

# JetPack 6.0 ships CUDA 12.2; 6.1 and 6.2 ship CUDA 12.6. cuda-python must match the major version.
cuda_version="$(sed -n 's/^CUDA Version \([0-9.]*\).*/\1/p' /usr/local/cuda/version.txt 2>/dev/null || true)"
if [ -z "$cuda_version" ] && command -v nvcc >/dev/null; then
  cuda_version="$(nvcc --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')"
fi
case "$cuda_version" in
  12.2*) cuda_python="cuda-python>=12.2,<12.3" ;;
  12.*) cuda_python="cuda-python>=12.6,<13" ;;
  *) echo "install-jetson: warning: CUDA version '${cuda_version:-unknown}', assuming 12.6" >&2
     cuda_python="cuda-python>=12.6,<13" ;;
esac

echo "install-jetson: TensorRT $trt_version, CUDA ${cuda_version:-?}, into $PREFIX"
mkdir -p "$PREFIX"
python3 -m venv --system-site-packages "$PREFIX/venv"
"$PREFIX/venv/bin/pip" install --upgrade pip
# --no-deps: the package's training dependencies (torch, matplotlib, onnx tooling) stay off the device.
"$PREFIX/venv/bin/pip" install --no-deps "$SOURCE"
"$PREFIX/venv/bin/pip" install numpy pillow click "$cuda_python"
if [ "$WITH_ORT" = "1" ]; then
  "$PREFIX/venv/bin/pip" install onnxruntime
fi

# Video sources (mlit-edge stream: CSI and V4L2 cameras, RTSP, files) go through OpenCV. JetPack's OpenCV
# (the nvidia-opencv / python3-opencv packages) is built with GStreamer, which csi:// needs for
# nvarguscamerasrc; the venv sees it through --system-site-packages. The PyPI wheels have no GStreamer,
# so they are not installed here.
if python3 -c "import cv2, sys; sys.exit('GStreamer:                   YES' not in cv2.getBuildInformation())" 2>/dev/null; then
  echo "install-jetson: OpenCV $(python3 -c 'import cv2; print(cv2.__version__)') with GStreamer: stream takes csi://, /dev/video*, rtsp:// and files"
else
  echo "install-jetson: warning: no OpenCV with GStreamer; mlit-edge stream needs it: sudo apt install nvidia-opencv" >&2
fi

"$PREFIX/venv/bin/python" - <<'PY'
import sys
import mlit_edge.runtime  # noqa: F401  (the import itself is the check)
assert "torch" not in sys.modules, "the runtime imported torch"
print("install-jetson: mlit_edge.runtime imports without torch")
PY
echo "install-jetson: done. Build an engine on this device:"
echo "  $PREFIX/venv/bin/mlit-edge build --onnx model-int8.onnx --target tensorrt --out $PREFIX/models"
