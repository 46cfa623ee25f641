#!/usr/bin/env bash
# Install the mlit-edge runtime on a Jetson: JetPack 5.1.x (L4T R35), 6.0 (R36.3), 6.1/6.2 (R36.4, R36.5) or 7 (R38).
#
# Uses the system TensorRT that JetPack ships (python3-libnvinfer), inside a venv created with
# --system-site-packages so that the venv sees it. torch is NOT installed: the runtime needs numpy,
# Pillow, click, cuda-python and TensorRT (ONNX Runtime as an optional fallback).
#
#   sudo ./deploy/install-jetson.sh [SOURCE]      SOURCE: an mlit-edge checkout or wheel (default: .)
#
# The L4T release (the first line of /etc/nv_tegra_release, e.g. "# R36 (release), REVISION: 4.3, GCID: ...")
# chooses the device profile: the TensorRT, CUDA and Python that JetPack ships, and the pins that go with
# them. They are one row of mlit_edge/devices/jetpacks.json, read from SOURCE itself (the package is not
# installed yet) with the system python3; a new L4T point release is one line there. Any release the table
# does not list is refused, and so is a python3 or a TensorRT that is not the release's.
#
# Environment: PREFIX (default /opt/mlit-edge), WITH_ORT=1 to add onnxruntime for .onnx artifacts,
# L4T_RELEASE=R36.4.0 to name the release instead of reading it (deploy/Dockerfile: an image need not carry
# /etc/nv_tegra_release).
# Test hooks (tests/test_deploy.py runs the script with them, and a fake python3 and dpkg-query first on PATH):
#   NV_TEGRA_RELEASE=FILE   read the release from FILE instead of /etc/nv_tegra_release
#   L4T_DRIVER_ROOT=DIR     look for the GPU driver library (the row's driver_lib) under DIR instead of /
#   DRY_RUN=1               stop after the checks: print the profile and the commands it would run, run none
set -euo pipefail

SOURCE="${1:-.}"
PREFIX="${PREFIX:-/opt/mlit-edge}"
WITH_ORT="${WITH_ORT:-0}"
DRY_RUN="${DRY_RUN:-0}"
RELEASE_FILE="${NV_TEGRA_RELEASE:-/etc/nv_tegra_release}"
DRIVER_ROOT="${L4T_DRIVER_ROOT:-}"

die() { echo "install-jetson: $*" >&2; exit 1; }
run() {
  if [ "$DRY_RUN" = "1" ]; then echo "install-jetson: would run: $*"; else "$@"; fi
}

# --- the release ---------------------------------------------------------------------------------------------
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

# --- the release -> the device profile: its row of mlit_edge/devices/jetpacks.json ----------------------------
command -v python3 >/dev/null || die "python3 is missing: sudo apt install python3 python3-venv"
# The reader prints name=value lines (read below, never eval'd), or one line saying why not. Its rule is
# devices/profiles.py's match_release: a key takes itself and the releases under it ("R35.2" takes R35.2.1),
# the longest key wins. It runs on whatever python3 this is, before that is checked: Python 3.6 syntax.
table="$(python3 - "$SOURCE" "$l4t" 2>&1 <<'PY'
import json, os, sys, zipfile

source, l4t = sys.argv[1], sys.argv[2]
member = "mlit_edge/devices/jetpacks.json"
try:
    if os.path.isdir(source):
        with open(os.path.join(source, member), encoding="utf-8") as f:
            table = json.load(f)["jetpacks"]
    else:
        with zipfile.ZipFile(source) as wheel:
            table = json.loads(wheel.read(member).decode("utf-8"))["jetpacks"]
except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
    sys.exit("cannot read the JetPack table %s from %s (%s): SOURCE must be an mlit-edge checkout or wheel"
             % (member, source, e))


def lines(releases):  # the L4T lines a row covers, as devices/profiles.py's l4t_lines writes them
    keys = sorted({tuple(int(x) for x in r.lstrip("R").split(".")[:2]) for r in releases})
    out, run = [], []
    for key in keys + [None]:
        if run and key and key[0] == run[-1][0] and key[1] == run[-1][1] + 1:
            run.append(key)
            continue
        names = ["R%d.%d" % k for k in run]
        out += [names[0] + "-" + names[-1]] if len(names) >= 3 else names
        run = [key] if key else []
    return ", ".join(out)


best = None
for row, facts in table.items():
    for release, name in facts["l4t"].items():
        depth = release.count(".")
        if (l4t == release or l4t.startswith(release + ".")) and (best is None or depth > best[0]):
            best = (depth, row, name)
if best is None:
    sys.exit("L4T %s is not a supported release: %s (%s)" % (
        l4t, ", ".join("JetPack %s (%s)" % (row, lines(f["l4t"])) for row, f in table.items()), member))
_, row, name = best
facts = table[row]
pins = facts["pins"]
for key, value in (("row", row), ("jetpack", name), ("trt", facts["tensorrt_major_minor"]), ("cuda", facts["cuda"]),
                   ("python", facts["python"]), ("cuda_python", pins["cuda-python"]), ("numpy", pins["numpy"]),
                   ("pillow", pins["pillow"]), ("click", pins["click"]), ("onnxruntime", facts["onnxruntime"]),
                   ("driver_lib", facts["driver_lib"])):
    print("%s=%s" % (key, value))
PY
)" || die "$(printf '%s\n' "$table" | tail -n 1)"
row="" jetpack="" trt="" cuda="" python="" cuda_python="" numpy="" pillow="" click="" onnxruntime="" driver_lib=""
while IFS='=' read -r key value; do
  case "$key" in
    row) row="$value" ;; jetpack) jetpack="$value" ;; trt) trt="$value" ;; cuda) cuda="$value" ;;
    python) python="$value" ;; cuda_python) cuda_python="$value" ;; numpy) numpy="$value" ;;
    pillow) pillow="$value" ;; click) click="$value" ;; onnxruntime) onnxruntime="$value" ;;
    driver_lib) driver_lib="$value" ;;
  esac
done <<<"$table"
for field in row jetpack trt cuda python cuda_python numpy pillow click onnxruntime driver_lib; do
  [ -n "${!field}" ] || die "mlit_edge/devices/jetpacks.json in $SOURCE gives no $field for L4T $l4t"
done
profile="jetpack-$row"

# Why `import tensorrt` failed, in one line. From Python two causes look alike: the bindings are not installed,
# or they are (python3-libnvinfer) but the GPU driver library TensorRT loads is not there. On a Jetson that is
# a container the NVIDIA container runtime did not set up: it mounts the driver from the host (its l4t.csv;
# the row's driver_lib), and `docker build` runs without it unless daemon.json makes it the default runtime
# and the build uses the classic builder, since BuildKit does not honour the default runtime
# (dusty-nv/jetson-containers docs/setup.md "Docker Default Runtime", docs/build.md; issue #352).
why_no_tensorrt() {
  local status
  status="$(dpkg-query -W -f="\${Status}" python3-libnvinfer 2>/dev/null || true)"
  case "$status" in
    *" installed") ;;
    *) echo "TensorRT's Python bindings are missing: the package python3-libnvinfer is not installed (sudo apt install python3-libnvinfer, part of JetPack $jetpack)"; return ;;
  esac
  if [ ! -e "$DRIVER_ROOT$driver_lib" ]; then
    echo "TensorRT's Python bindings (python3-libnvinfer) are installed but cannot load: the GPU driver library $driver_lib is missing. In a container only the NVIDIA container runtime provides it, and docker build runs without it unless /etc/docker/daemon.json has \"default-runtime\": \"nvidia\", docker is restarted (sudo systemctl restart docker) and the build uses the classic builder (DOCKER_BUILDKIT=0 docker build ...; deploy/README.md). On the Jetson itself, reinstall JetPack's nvidia-l4t-cuda"
    return
  fi
  echo "TensorRT's Python bindings (python3-libnvinfer) and the GPU driver are installed, but import tensorrt fails: $(python3 -c 'import tensorrt' 2>&1 | tail -n 1)"
}

# --- what this device has against what the release ships ----------------------------------------------------
have_python="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" || die "python3 does not run"
[ "$have_python" = "$python" ] \
  || die "JetPack $jetpack (L4T $l4t) ships Python $python and its TensorRT bindings are built for it, but python3 is $have_python"
trt_version="$(python3 -c 'import tensorrt; print(tensorrt.__version__)' 2>/dev/null)" || die "$(why_no_tensorrt)"
case "$trt_version" in
  "$trt" | "$trt".*) ;;
  *) die "JetPack $jetpack (L4T $l4t) ships TensorRT $trt, but python3 imports TensorRT $trt_version: reinstall JetPack's (sudo apt install --reinstall python3-libnvinfer)" ;;
esac

echo "install-jetson: JetPack $jetpack (L4T $l4t): TensorRT $trt, CUDA $cuda, profile $profile"
echo "install-jetson: Python $python, TensorRT $trt_version; installing $cuda_python $numpy $pillow $click into $PREFIX"

# --no-deps: on JetPack 6 and 7 (Python 3.10+) the package's dependencies include the workstation's (torch,
# matplotlib, onnx tooling), which stay off the device. On JetPack 5.1's Python 3.8 pip takes the package as it
# is: requires-python is >=3.8 and the workstation's dependencies are marked for 3.10+ (pyproject.toml;
# tests/test_py38_install.py installs it on a real 3.8).
source_args=(--no-deps)
run mkdir -p "$PREFIX"
run python3 -m venv --system-site-packages "$PREFIX/venv"
run "$PREFIX/venv/bin/pip" install --upgrade pip
run "$PREFIX/venv/bin/pip" install "${source_args[@]}" "$SOURCE"
run "$PREFIX/venv/bin/pip" install "$numpy" "$pillow" "$click" "$cuda_python"
if [ "$WITH_ORT" = "1" ]; then
  # the newest ONNX Runtime with a wheel for the release's Python on aarch64 (jetpacks.json "onnxruntime")
  run "$PREFIX/venv/bin/pip" install "onnxruntime==$onnxruntime"
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
