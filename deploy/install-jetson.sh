#!/usr/bin/env bash
# Install the mlit-edge runtime on a Jetson: JetPack 5.1.x (L4T R35), 6.0 (R36.3), 6.1/6.2 (R36.4) or 7 (R38).
#
# Uses the system TensorRT that JetPack ships (python3-libnvinfer), inside a venv created with
# --system-site-packages so that the venv sees it. torch is NOT installed: the runtime needs numpy,
# Pillow, click, cuda-python and TensorRT (ONNX Runtime as an optional fallback).
#
#   sudo ./deploy/install-jetson.sh [SOURCE]      SOURCE: an mlit-edge checkout or wheel (default: .)
#
# The L4T release (the first line of /etc/nv_tegra_release, e.g. "# R36 (release), REVISION: 4.3, GCID: ...")
# chooses the device profile: the TensorRT, CUDA and Python that JetPack ships, and the pins that go with
# them (deploy/README.md has the table, docs/trt-sources.md the sources). Any other release is refused, and
# so is a python3 or a TensorRT that is not the release's.
#
# Environment: PREFIX (default /opt/mlit-edge), WITH_ORT=1 to add onnxruntime for .onnx artifacts,
# L4T_RELEASE=R36.4.0 to name the release instead of reading it (deploy/Dockerfile: an image need not carry
# /etc/nv_tegra_release).
# Test hooks (tests/test_deploy.py runs the script with them and a fake python3 first on PATH):
#   NV_TEGRA_RELEASE=FILE   read the release from FILE instead of /etc/nv_tegra_release
#   DRY_RUN=1               stop after the checks: print the profile and the commands it would run, run none
set -euo pipefail

SOURCE="${1:-.}"
PREFIX="${PREFIX:-/opt/mlit-edge}"
WITH_ORT="${WITH_ORT:-0}"
DRY_RUN="${DRY_RUN:-0}"
RELEASE_FILE="${NV_TEGRA_RELEASE:-/etc/nv_tegra_release}"

die() { echo "install-jetson: $*" >&2; exit 1; }
run() {
  if [ "$DRY_RUN" = "1" ]; then echo "install-jetson: would run: $*"; else "$@"; fi
}

# --- the release -> the device profile ---------------------------------------------------------------------
if [ -n "${L4T_RELEASE:-}" ]; then
  re='^R?([0-9]+)\.([0-9]+(\.[0-9]+)*)$'
  [[ $L4T_RELEASE =~ $re ]] || die "L4T_RELEASE='$L4T_RELEASE' is not a release like R36.4.0"
else
  [ -r "$RELEASE_FILE" ] || die "this is not a Jetson (no $RELEASE_FILE)"
  first="$(head -n 1 "$RELEASE_FILE")"
  re='^# R([0-9]+) \(release\), REVISION: ([0-9]+(\.[0-9]+)*)'
  [[ $first =~ $re ]] || die "cannot read the L4T release in $RELEASE_FILE: '$first'"
fi
major="${BASH_REMATCH[1]}"
revision="${BASH_REMATCH[2]}"
case "$revision" in *.*) ;; *) revision="$revision.0" ;; esac
l4t="R$major.$revision"

# numpy stays 1.x on every release: JetPack's OpenCV (stream, seen through --system-site-packages) is built
# against the numpy 1.x of its Ubuntu, and a module built against numpy 1.x does not import under numpy 2.
numpy="numpy>=1.24,<2" pillow="pillow>=10" click="click>=8.1"
# JetPack names per L4T release as jetson-containers' l4t_version.py lists them
case "$major.$revision" in
  35.[2-6].*)
    profile=jetpack-5.1 trt=8.5 cuda=11.4 python=3.8
    case "$revision" in
      2.*) jetpack=5.1 ;; 3.*) jetpack=5.1.1 ;; 4.*) jetpack=5.1.2 ;; 5.*) jetpack=5.1.3 ;; 6.0) jetpack=5.1.4 ;;
      6.[12]) jetpack=5.1.5 ;; 6.4) jetpack=5.1.6 ;; *) jetpack=5.1.x ;;
    esac
    # No cuda-python was released for CUDA 11.4; 11.8.2 is the newest with a cp38 wheel (11.8.6 and later
    # need a cuda-bindings that has none). It is untested against JetPack 5's CUDA 11.4 driver.
    cuda_python="cuda-python==11.8.2"
    # The newest releases for Python 3.8 are numpy 1.23.5 here, Pillow 10.4.0 and click 8.1.8. numpy stays
    # below 1.24: TensorRT 8.5.2's tensorrt.nptype still names np.bool, which numpy 1.24 removed
    # (NVIDIA/TensorRT#2567, fixed in 8.5.3), and the TensorRT runner calls it.
    numpy="numpy>=1.23,<1.24" pillow="pillow>=10,<10.5" click="click>=8.1,<8.2"
    ;;
  36.3.*)
    profile=jetpack-6.0 jetpack=6.0 trt=8.6 cuda=12.2 python=3.10 cuda_python="cuda-python>=12.2,<12.3" ;;
  36.4.*)
    trt=10.3 cuda=12.6 python=3.10 cuda_python="cuda-python>=12.6,<12.7"
    case "$revision" in
      4.0 | 4.1) jetpack=6.1 profile=jetpack-6.1 ;; 4.2) jetpack=6.1.1 profile=jetpack-6.1 ;;
      4.3) jetpack=6.2 profile=jetpack-6.2 ;; 4.4 | 4.7) jetpack=6.2.1 profile=jetpack-6.2 ;;
      *) jetpack=6.2.x profile=jetpack-6.2 ;;
    esac
    ;;
  38.2.* | 38.4.*)
    trt=10.13 cuda=13.0 python=3.12 cuda_python="cuda-python>=13.0,<13.1"
    case "$revision" in 2.*) jetpack=7.0 profile=jetpack-7 ;; *) jetpack=7.1 profile=jetpack-7 ;; esac
    ;;
  *) die "L4T $l4t is not a supported release: JetPack 5.1 (R35.2-R35.6), 6.0 (R36.3), 6.1/6.2 (R36.4) or 7 (R38.2, R38.4)" ;;
esac

# --- what this device has against what the release ships ----------------------------------------------------
command -v python3 >/dev/null || die "python3 is missing: sudo apt install python3 python3-venv"
have_python="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" || die "python3 does not run"
[ "$have_python" = "$python" ] \
  || die "JetPack $jetpack (L4T $l4t) ships Python $python and its TensorRT bindings are built for it, but python3 is $have_python"
trt_version="$(python3 -c 'import tensorrt; print(tensorrt.__version__)' 2>/dev/null)" \
  || die "TensorRT's Python bindings are missing: sudo apt install python3-libnvinfer (part of JetPack)"
case "$trt_version" in
  "$trt" | "$trt".*) ;;
  *) die "JetPack $jetpack (L4T $l4t) ships TensorRT $trt, but python3 imports TensorRT $trt_version: reinstall JetPack's (sudo apt install --reinstall python3-libnvinfer)" ;;
esac

echo "install-jetson: JetPack $jetpack (L4T $l4t): TensorRT $trt, CUDA $cuda, profile $profile"
echo "install-jetson: Python $python, TensorRT $trt_version; installing $cuda_python $numpy $pillow $click into $PREFIX"

# --no-deps: the package's training dependencies (torch, matplotlib, onnx tooling) stay off the device.
source_args=(--no-deps)
if [ "$python" = "3.8" ]; then
  # The package's requires-python (>=3.10) is the workstation's (torch, training, export), and pip would
  # refuse the package on JetPack 5's Python 3.8. The device side (runtime, CLI, build --onnx) stays
  # 3.8-compatible: tests/test_py38.py checks every module a device imports.
  source_args+=(--ignore-requires-python)
fi
run mkdir -p "$PREFIX"
run python3 -m venv --system-site-packages "$PREFIX/venv"
run "$PREFIX/venv/bin/pip" install --upgrade pip
run "$PREFIX/venv/bin/pip" install "${source_args[@]}" "$SOURCE"
run "$PREFIX/venv/bin/pip" install "$numpy" "$pillow" "$click" "$cuda_python"
if [ "$WITH_ORT" = "1" ]; then
  run "$PREFIX/venv/bin/pip" install onnxruntime
fi
if [ "$DRY_RUN" = "1" ]; then
  exit 0
fi

# Video sources (mlit-edge stream: CSI and V4L2 cameras, RTSP, files) go through OpenCV. JetPack's OpenCV
# (the nvidia-opencv / python3-opencv packages) is built with GStreamer, which csi:// needs for
# nvarguscamerasrc; the venv sees it through --system-site-packages. The PyPI wheels have no GStreamer,
# so they are not installed here. Checked with the venv's numpy, which is what the runtime will import.
if "$PREFIX/venv/bin/python" -c "import cv2, sys; sys.exit('GStreamer:                   YES' not in cv2.getBuildInformation())" 2>/dev/null; then
  echo "install-jetson: OpenCV $("$PREFIX/venv/bin/python" -c 'import cv2; print(cv2.__version__)') with GStreamer: stream takes csi://, /dev/video*, rtsp:// and files"
else
  echo "install-jetson: warning: no OpenCV with GStreamer; mlit-edge stream needs it: sudo apt install nvidia-opencv" >&2
fi

"$PREFIX/venv/bin/python" - <<'PY'
import sys
import mlit_edge.runtime  # noqa: F401  (the import itself is the check)
assert "torch" not in sys.modules, "the runtime imported torch"
print("install-jetson: mlit_edge.runtime imports without torch")
PY
echo "install-jetson: done ($profile). Build an engine on this device:"
echo "  $PREFIX/venv/bin/mlit-edge build --onnx model-int8.onnx --target tensorrt --out $PREFIX/models"
