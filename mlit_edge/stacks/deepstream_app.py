"""The deepstream-app config `export-deepstream` writes, and its secondary mode (`--secondary`): the classifier
on the objects a detector found (process-mode=2), the textbook place of a 36x36 classifier.

Secondary mode follows DeepStream 6.2's deepstream-test2 (sources/apps/sample_apps/deepstream-test2/
dstest2_sgie1_config.txt: process-mode=2, gie-unique-id=2, operate-on-gie-id=1, batch-size=16,
classifier-async-mode=1, with dstest2_tracker_config.txt's tracker). The detector is the user's nvinfer config
in [primary-gie]; by default DeepStream's sample ResNet-10 one, samples/configs/deepstream-app/
config_infer_primary.txt in the 6.2 tree, which a Jetson install holds under /opt/nvidia/deepstream/deepstream
(its classes, samples/models/Primary_Detector/labels.txt: 0 Car, 1 Bicycle, 2 Person, 3 Roadsign).
Rules are checked by `nvinfer_rules` and `deepstream_app_rules` on the written files, not here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

from .glib_keyfile import keyfile_text, value_problem
from .nvinfer_rules_data import CLASS_IDS_CHARS, MAX_BATCH, MIN_OBJECT

CONFIG, LABELS, APP = "config_infer_mlit.txt", "labels.txt", "deepstream_app_config.txt"
DS_ROOT = "/opt/nvidia/deepstream/deepstream"  # where JetPack's DeepStream installs (a link to deepstream-6.2)
SAMPLE_STREAM = f"file://{DS_ROOT}/samples/streams/sample_720p.mp4"  # in every install
SAMPLE_PRIMARY = f"{DS_ROOT}/samples/configs/deepstream-app/config_infer_primary.txt"
# dstest2_tracker_config.txt's tracker: its library and NvDCF's perf config (by the install's absolute paths)
TRACKER_LIB = f"{DS_ROOT}/lib/libnvds_nvmultiobjecttracker.so"
TRACKER_CONFIG = f"{DS_ROOT}/samples/configs/deepstream-app/config_tracker_NvDCF_perf.yml"
MAX_GIE_ID = 2 ** 31 - 2  # g_key_file_get_integer reads a gint, and ours is the detector's + 1


@dataclass(frozen=True)
class Secondary:
    """What `--secondary` writes: the detector's config and gie id, which of its classes and sizes to classify,
    asynchronous mode and the objects per batch. Defaults: deepstream-test2's dstest2_sgie1_config.txt."""

    operate_on_gie_id: int = 1
    class_ids: Tuple[int, ...] = ()  # () : every class (GST should_infer_object: an empty list passes all)
    min_size: Optional[Tuple[int, int]] = None  # input-object-min-width/height; None: nvinfer's own 16x16
    async_mode: bool = True
    primary_config: str = SAMPLE_PRIMARY
    batch: int = 16

    @property
    def unique_id(self) -> int:
        """Ours: one above the detector's, so never the same (APP parse_config_file: 'Non unique gie ids')."""
        return self.operate_on_gie_id + 1


def parse_class_ids(text: str) -> Tuple[int, ...]:
    """'0;2' (or '0,2') -> (0, 2); ValueError (one line) otherwise."""
    pieces = [p.strip() for p in text.replace(",", ";").split(";") if p.strip()]
    if not pieces or not all(p.isdigit() for p in pieces):
        raise ValueError(f"--operate-on-class-ids {text!r}: the detector's class ids, integers >= 0 separated by "
                         "';' (e.g. '0;2')")
    return tuple(sorted({int(p) for p in pieces}))


def parse_size(text: str) -> Tuple[int, int]:
    """'64x48' -> (64, 48); ValueError (one line) otherwise."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--min-object-size {text!r}: WIDTHxHEIGHT in pixels, e.g. 64x64")
    return int(parts[0]), int(parts[1])


def check_secondary(sec: Secondary) -> None:
    """ValueError (one line) for secondary options DeepStream would refuse, or ignore without a word."""
    if not 1 <= sec.operate_on_gie_id <= MAX_GIE_ID:  # PP gst_nvinfer_parse_props: gie-unique-id 'should be > 0'
        raise ValueError(f"--operate-on-gie-id {sec.operate_on_gie_id}: a gie-unique-id, 1 to {MAX_GIE_ID}")
    if len("".join(f"{i}:" for i in sec.class_ids)) > CLASS_IDS_CHARS or any(i < 0 for i in sec.class_ids):
        raise ValueError(f"--operate-on-class-ids: ids >= 0, at most {CLASS_IDS_CHARS} characters as deepstream-app "
                         "writes them ('%d:' each, SGIE create_secondary_gie)")
    if sec.min_size and not all(MIN_OBJECT <= s < 2 ** 31 for s in sec.min_size):
        raise ValueError(f"--min-object-size {sec.min_size[0]}x{sec.min_size[1]}: nvinfer never classifies objects "
                         f"under {MIN_OBJECT}x{MIN_OBJECT} (GST gst_nvinfer_start: MIN_INPUT_OBJECT_WIDTH/HEIGHT), so "
                         f"each side is {MIN_OBJECT} or more")
    if not 1 <= sec.batch <= MAX_BATCH:
        raise ValueError(f"--secondary-batch {sec.batch}: nvinfer's batch-size is 1 to {MAX_BATCH}")
    path = sec.primary_config
    problem = "is empty" if not path else value_problem(path)  # GLib would read another string, or more lines
    if problem:
        raise ValueError(f"--primary-config {path[:80]!r} {problem}; give the detector's config file")


def check_uri(uri: str) -> None:
    """ValueError (one line) for a `--uri` the deepstream-app config cannot carry as itself: empty (the sample
    stream is what no --uri means), or one GLib would read as another string or as more lines and groups."""
    if not uri:
        raise ValueError("--uri '': give the file source's URI (e.g. file:///home/me/video.mp4), or leave --uri out "
                         "for DeepStream's sample stream")
    problem = value_problem(uri)
    if problem:
        raise ValueError(f"--uri {uri[:80]!r} {problem}; percent-encode it (e.g. %20 for a space, %0A for a line "
                         "break)")


def secondary_keys(sec: Secondary) -> List[str]:
    """The nvinfer [property] lines of secondary mode (PP gst_nvinfer_parse_other_attribute reads them)."""
    lines = [f"operate-on-gie-id={sec.operate_on_gie_id}"]
    if sec.class_ids:
        lines.append("operate-on-class-ids=" + ";".join(map(str, sec.class_ids)))
    if sec.min_size:
        lines += [f"input-object-min-width={sec.min_size[0]}", f"input-object-min-height={sec.min_size[1]}"]
    lines += ["# 1: the frame moves on and results attach to the tracked object later (tracked objects only)"
              if sec.async_mode else "# 0: each frame waits for its objects' classes (untracked objects too)",
              f"classifier-async-mode={int(sec.async_mode)}"]
    return lines


def _gies(batch: int, sec: Optional[Secondary]) -> List[str]:
    if sec is None:
        return ["", "[primary-gie]", "enable=1", f"config-file={CONFIG}", "gie-unique-id=1", f"batch-size={batch}"]
    lines = ["", "# the detector: its own nvinfer config; deepstream-app sets this gie-unique-id on it",
             "[primary-gie]", "enable=1", f"config-file={sec.primary_config}",
             f"gie-unique-id={sec.operate_on_gie_id}", f"batch-size={batch}"]
    if sec.async_mode:  # GST gst_nvinfer_process_objects skips untracked objects in asynchronous mode
        lines += ["", "[tracker]", "enable=1", "tracker-width=640", "tracker-height=384", f"ll-lib-file={TRACKER_LIB}",
                  f"ll-config-file={TRACKER_CONFIG}", "enable-batch-process=1"]
    lines += ["", "# the classifier on the detector's objects; these values override the nvinfer config's (equal)",
              "[secondary-gie0]", "enable=1", f"config-file={CONFIG}", f"gie-unique-id={sec.unique_id}",
              f"operate-on-gie-id={sec.operate_on_gie_id}"]
    if sec.class_ids:
        lines.append("operate-on-class-ids=" + ";".join(map(str, sec.class_ids)))
    return lines + [f"batch-size={sec.batch}"]


def app_config(uri: str, batch: int, secondary: Optional[Secondary] = None) -> str:
    """A minimal deepstream-app config: `batch` copies of one file source (a MultiURI source, whose uri is a
    printf format: '%' written '%%'), the classifier on full frames batching one frame of each (or, with
    `secondary`, the detector on them and the classifier on its objects), a fake sink."""
    columns = math.ceil(math.sqrt(batch))  # more than one source: tiled, or only source 0 would reach the sink
    tiles = [] if batch == 1 else ["", "[tiled-display]", "enable=1", f"rows={math.ceil(batch / columns)}",
                                   f"columns={columns}", "width=1280", "height=720"]
    return keyfile_text([  # every line as GLib will read it (the uri is the user's)
        "# deepstream-app -c " + APP, "[application]", "enable-perf-measurement=1", "perf-measurement-interval-sec=5",
        "", "[source0]", "enable=1", "type=3", f"uri={uri.replace('%', '%%')}", f"num-sources={batch}",
        "", "[streammux]", "live-source=0", f"batch-size={batch}", "width=1280", "height=720",
        "batched-push-timeout=40000", *_gies(batch, secondary), *tiles, "", "[osd]", "enable=1", "display-text=1",
        "", "[sink0]", "enable=1", "type=1", "sync=0"], APP)


__all__ = ["CONFIG", "LABELS", "APP", "SAMPLE_STREAM", "SAMPLE_PRIMARY", "Secondary", "parse_class_ids",
           "parse_size", "check_secondary", "check_uri", "secondary_keys", "app_config"]
