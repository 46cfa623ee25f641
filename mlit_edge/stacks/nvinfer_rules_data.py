"""The keys DeepStream 6.2's config parsers read, as data for `nvinfer_rules`: each key's GLib type (how the
parser fetches it) and the values the parser then accepts, with the function that says so.

Sources (github.com/hiennguyen9874/deepstream-sources, commit f994831, NVDS_VERSION 6.2.0):
PP  sources/gst-plugins/gst-nvinfer/gstnvinfer_property_parser.cpp; CFP sources/apps/apps-common/src/
deepstream_config_file_parser.c; APP sources/apps/sample_apps/deepstream-app/deepstream_app_config_parser.c.
The key lists of CFP's parse_* functions were read off its `g_strcmp0(*key, ...)` / `g_key_file_get_*` pairs.
An entry is KEY: (kind, allowed, source). kind: int, uint64, double, bool, string, strings, ints, doubles.
allowed: None (any value of the kind), ("min", n), ("range", lo, hi), ("in", values, meaning), ("dims", n)
(exactly n positive integers), ("max_len", n), ("io_formats",) (name:type:format items), ("each_min", n)
(every item of a list >= n), ("class_ids", n) (ids >= 0 that deepstream-app writes as "%d:" into n characters).
Also here: GST gstnvinfer.cpp, SGIE deepstream_secondary_gie_bin.c (sources/apps/apps-common/src/).
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

Entry = Tuple[str, Any, str]
MAX_BATCH = 1024  # NVDSINFER_MAX_BATCH_SIZE, sources/includes/nvdsinfer_context.h
MAX_SECONDARY_GIES = 16  # MAX_SECONDARY_GIE_BINS, apps-common/includes/deepstream_config.h
MIN_OBJECT = 16  # GST MIN_INPUT_OBJECT_WIDTH/HEIGHT: gst_nvinfer_start raises input-object-min-* to it
CLASS_IDS_CHARS = 126  # SGIE create_secondary_gie: "%d:" per id into operate_on_class_str[128], size - len - 1
NETWORK_MODES = {0: "fp32", 1: "int8", 2: "fp16"}  # NvDsInferNetworkMode, nvdsinfer_context.h; networkMode2Str
IO_TYPES = ("fp32", "fp16", "int32", "int8")  # nvdsinfer_func_utils.cpp isValidOutputDataType
IO_FORMATS = ("chw", "chw2", "chw4", "hwc8", "chw16", "chw32")  # nvdsinfer_func_utils.cpp isValidOutputFormat

_P = "PP gst_nvinfer_parse_props"
_O = "PP gst_nvinfer_parse_other_attribute"  # the keys only the GStreamer element reads


def _same(kind: str, names: str, source: str, allowed: Any = None) -> Dict[str, Entry]:
    return {name: (kind, allowed, source) for name in names.split()}


# [property] of an nvinfer config, every key gst_nvinfer_parse_props (and, in the element,
# gst_nvinfer_parse_other_attribute) reads; any other key is printed as unknown and ignored
PROPERTY: Dict[str, Entry] = {
    **_same("string", "labelfile-path model-engine-file int8-calib-file onnx-file mean-file custom-lib-path "
                      "model-file proto-file uff-file tlt-encoded-model tlt-model-key uff-input-blob-name "
                      "parse-bbox-func-name parse-bbox-instance-mask-func-name engine-create-func-name "
                      "parse-classifier-func-name custom-network-config", _P),
    **_same("bool", "enable-dla force-implicit-batch-dim enable-dbscan input-tensor-from-meta is-classifier", _P),
    **_same("int", "use-dla-core tensor-meta-pool-size workspace-size", _P),
    **_same("strings", "output-blob-names layer-device-precision", _P),
    "gie-unique-id": ("int", ("min", 1), _P),
    "gpu-id": ("int", ("min", 0), _P + " (into a guint; its device-count check is disabled: cudaSetDevice fails)"),
    "batch-size": ("int", ("range", 1, MAX_BATCH), _P + " (NVDSINFER_MAX_BATCH_SIZE)"),
    "infer-dims": ("ints", ("dims", 3), _P + " ('Should be 3 as [c;h;w] order')"),
    "network-mode": ("int", ("in", tuple(NETWORK_MODES), "0 FP32, 1 INT8, 2 FP16"), _P),
    "output-io-formats": ("strings", ("io_formats",), _P + "; MB TrtModelBuilder::buildNetwork"),
    "network-type": ("int", ("in", (0, 1, 2, 3, 100), "NvDsInferNetworkType"), _P),
    "model-color-format": ("int", ("in", (0, 1, 2), "0 RGB, 1 BGR, 2 GRAY"), _P),
    "net-scale-factor": ("double", None, _P),
    "offsets": ("doubles", ("max_len", 4), _P + " (_MAX_CHANNELS)"),
    "network-input-order": ("int", ("in", (0, 1), "0 NCHW, 1 NHWC"), _P),
    "uff-input-order": ("int", ("in", (0, 1, 2), "NCHW, NHWC, NC"), _P),
    "input-dims": ("ints", None, _P + " (deprecated)"), "uff-input-dims": ("ints", None, _P + " (deprecated)"),
    "num-detected-classes": ("int", ("min", 0), _P),
    "cluster-mode": ("int", ("in", (0, 1, 2, 3, 4), "NvDsInferClusterMode"), _P),
    "classifier-threshold": ("double", ("min", 0), _P + " ('Negative value specified')"),
    "segmentation-threshold": ("double", ("min", 0), _P),
    "segmentation-output-order": ("int", ("in", (0, 1), "NCHW, NHWC"), _P),
    **_same("bool", "classifier-async-mode output-tensor-meta output-instance-mask maintain-aspect-ratio "
                    "symmetric-padding crop-objects-to-roi-boundary", _O),
    **_same("int", "secondary-reinfer-interval operate-on-gie-id", _O),
    **_same("int", "interval input-object-min-width input-object-min-height input-object-max-width "
                   "input-object-max-height", _O, ("min", 0)),
    "filter-out-class-ids": ("ints", None, _O),
    # operate_on_class_ids->at(id) for each id: a negative one throws std::out_of_range (nvinfer aborts)
    "operate-on-class-ids": ("ints", ("each_min", 0), _O + " (operate_on_class_ids->at(id))"),
    "classifier-type": ("string", None, _O),
    "process-mode": ("int", ("in", (1, 2), "1 primary, 2 secondary"), _O),
    # NvBufSurfTransform_Compute (nvbufsurftransform.h): Default 0, GPU 1, VIC 2 (VIC only under __aarch64__)
    "scaling-compute-hw": ("int", ("in", (0, 1, 2), "NvBufSurfTransform_Compute"), _O),
    # NvBufSurfTransform_Inter (nvbufsurftransform.h): Nearest 0, Bilinear 1, Algo1-4 2-5, Default 6
    "scaling-filter": ("int", ("in", (0, 1, 2, 3, 4, 5, 6), "NvBufSurfTransform_Inter"), _O),
}

# the deepstream-app groups export-deepstream writes, every key their parser reads (CFP parse_source,
# parse_streammux, parse_gie, parse_tracker, parse_osd, parse_sink, parse_tiled_display; APP parse_app)
_SRC, _MUX, _GIE = "CFP parse_source", "CFP parse_streammux", "CFP parse_gie"
_OSD, _SINK, _TILE = "CFP parse_osd", "CFP parse_sink", "CFP parse_tiled_display"
_GIE_KEYS: Dict[str, Entry] = {
    **_same("int", "enable plugin-type audio-framesize audio-hopsize audio-input-rate interval gie-unique-id "
                   "operate-on-gie-id gpu-id nvbuf-memory-type", _GIE),
    **_same("string", "model-engine-file audio-transform labelfile-path config-file infer-raw-output-dir", _GIE),
    "input-tensor-meta": ("bool", None, _GIE), "operate-on-class-ids": ("ints", None, _GIE),
    "batch-size": ("int", ("range", 1, MAX_BATCH), _GIE + "; nvinfer's batch-size property")}
APP_GROUPS: Dict[str, Dict[str, Entry]] = {
    "application": {**_same("int", "enable-perf-measurement perf-measurement-interval-sec", "APP parse_app"),
                    **_same("string", "gie-kitti-output-dir kitti-track-output-dir", "APP parse_app")},
    # NvDsSourceType (deepstream_sources.h): 1 V4L2 camera, 2 URI, 3 MultiURI, 4 RTSP, 5 CSI camera, 6-8 audio
    "source": {**_same("int", "enable camera-width camera-height camera-fps-n camera-fps-d camera-csi-sensor-id "
                              "camera-v4l2-dev-node udp-buffer-size latency num-sources gpu-id num-decode-surfaces "
                              "num-extra-surfaces drop-frame-interval camera-id rtsp-reconnect-interval-sec "
                              "rtsp-reconnect-attempts intra-decode-enable low-latency-decode cudadec-memtype "
                              "nvbuf-memory-type select-rtp-protocol source-id smart-record smart-rec-video-cache "
                              "smart-rec-cache smart-rec-container smart-rec-start-time smart-rec-default-duration "
                              "smart-rec-duration smart-rec-interval", _SRC),
               **_same("string", "alsa-device video-format uri smart-rec-dir-path smart-rec-file-prefix", _SRC),
               "type": ("int", ("in", (1, 2, 3, 4, 5, 6, 7, 8), "NvDsSourceType"), _SRC)},
    "streammux": {**_same("int", "width height gpu-id enable-padding buffer-pool-size live-source "
                                 "attach-sys-ts-as-ntp batched-push-timeout nvbuf-memory-type sync-inputs", _MUX),
                  **_same("uint64", "frame-duration max-latency", _MUX),
                  **_same("bool", "frame-num-reset-on-stream-reset frame-num-reset-on-eos async-process "
                                  "drop-pipeline-eos", _MUX),
                  "config-file": ("string", None, _MUX),
                  "batch-size": ("int", ("range", 1, MAX_BATCH), _MUX + " [ours: nvinfer's range]")},
    "primary-gie": _GIE_KEYS,
    # APP parse_config_file hands every group whose name starts with "secondary-gie" to CFP parse_gie; SGIE
    # create_secondary_gie writes the class ids as "%d:" into 128 bytes, GST gst_nvinfer_set_property at(id)s them
    "secondary-gie": {**_GIE_KEYS, "operate-on-class-ids": ("ints", ("class_ids", CLASS_IDS_CHARS), _GIE + "; SGIE "
                                                            "create_secondary_gie; GST gst_nvinfer_set_property")},
    "tracker": {**_same("int", "enable tracker-width tracker-height gpu-id tracker-surface-type enable-batch-process "
                               "enable-past-frame tracking-surface-type display-tracking-id tracking-id-reset-mode "
                               "tensor-meta-gie-id compute-hw", "CFP parse_tracker"),
                **_same("string", "ll-config-file ll-lib-file", "CFP parse_tracker"),
                "input-tensor-meta": ("bool", None, "CFP parse_tracker")},
    "osd": {**_same("int", "enable process-mode border-width text-size show-clock clock-x-offset clock-y-offset "
                           "clock-text-size nvbuf-memory-type gpu-id", _OSD),
            **_same("doubles", "text-color text-bg-color clock-color", _OSD),
            **_same("string", "font hw-blend-color-attr", _OSD),
            **_same("bool", "display-text display-bbox display-mask", _OSD)},
    # NvDsSinkType (deepstream_sinks.h): 1 fake, 2 render, 3 encode to file, 4 UDP, 5 DRM, 6 message broker
    "sink": {**_same("int", "enable link-to-demux width height sync nvbuf-memory-type container codec enc-type "
                            "copy-meta output-io-mode bitrate profile iframeinterval source-id rtsp-port udp-port "
                            "color-range conn-id plane-id set-mode gpu-id msg-broker-comp-id disable-msgconv", _SINK),
             **_same("bool", "qos new-api", _SINK), "udp-buffer-size": ("uint64", None, _SINK),
             **_same("string", "output-file msg-broker-proto-lib msg-broker-conn-str topic msg-broker-config", _SINK),
             "type": ("int", ("in", (1, 2, 3, 4, 5, 6), "NvDsSinkType"), _SINK)},
    # NvDsTiledDisplayEnable (deepstream_tiled_display.h): 0 disabled, 1 enabled, 2 with parallel demux
    "tiled-display": {**_same("int", "rows columns width height gpu-id nvbuf-memory-type compute-hw "
                                     "buffer-pool-size", _TILE),
                      "enable": ("int", ("in", (0, 1, 2), "NvDsTiledDisplayEnable"), _TILE)},
}
