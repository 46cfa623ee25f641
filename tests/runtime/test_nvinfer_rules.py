"""DeepStream's parsing rules as `nvinfer_rules` replays them (DeepStream 6.2's sources): the GLib key-file
replay against GLib itself, each nvinfer and deepstream-app rule refusing what DeepStream refuses, and the
plan-consumer check export-deepstream and export-triton share."""
import json
import math
import subprocess
from pathlib import Path

import pytest

from mlit_edge.stacks.glib_keyfile import READERS, KeyFileError, parse_keyfile
from mlit_edge.stacks.deepstream_app_rules import app_group, check_app
from mlit_edge.stacks.nvinfer_rules import ModelFacts, check_nvinfer, engine_cache_name
from mlit_edge.artifacts.schema import ArtifactRecord
from mlit_edge.devices.plan_consumer import check_plan_consumer
from tests.helpers import python_with_gi

# every reader of GLib's key file DeepStream's parsers call, on every key (an error is recorded as "ERR")
GLIB_READ = r"""
import json, sys
from gi.repository import GLib
kf = GLib.KeyFile()
try:
    kf.load_from_file(sys.argv[1], GLib.KeyFileFlags.NONE)
except GLib.Error as e:
    print(json.dumps({"error": e.message})); sys.exit()
out = {}
for group in kf.get_groups()[0]:
    out[group] = {}
    for key in kf.get_keys(group)[0]:
        entry = {"value": kf.get_value(group, key)}
        for kind, get in (("int", kf.get_integer), ("double", kf.get_double), ("bool", kf.get_boolean),
                          ("string", kf.get_string), ("strings", kf.get_string_list), ("ints", kf.get_integer_list),
                          ("doubles", kf.get_double_list), ("uint64", kf.get_uint64)):
            try:
                entry[kind] = get(group, key)
            except GLib.Error:
                entry[kind] = "ERR"
        out[group][key] = entry
print(json.dumps(out))
"""
TRICKY = ["# a comment", "   [property]   ", "a=5", "b = 5 x", "c=  7  ", "d=1e999", "e=0x1p3", "f=1.5 ",
          "g=1;2;3;", "h=1;;2", "i=-2147483649", "j=2147483647", "k=inf", "l=nan", "m= 3;4 ;5", r"n=\s5",
          "dup=1", "dup=2", "o=+12", "p=1.", "q=.5", "r=1e", "s=abc", "t=", "   u   =   spaced value   ",
          r"v=1\;2;3", "w=-0x1.8p1", "x=Infinity", "y=1;2.5e3;-4", "z= ;1", "bt=true  ", "bf=0", "bx=yes",
          r"esc=a\tb\\c", r"bad=a\qb", "tail=a\\", "[second]", "x=1", "[property]", "late=9"]
REFUSED = {"no-group.txt": "a=1\r\n[g]\r\nk=v\r\n", "empty-group.txt": "[]\nk=v\n", "eq-first.txt": "[g]\n=v\n",
           "not-a-pair.txt": "[g]\nnot a pair\n"}


def _norm(value):
    """A read value comparable with ==: nan as "nan", lists element by element."""
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return "nan" if isinstance(value, float) and math.isnan(value) else value


def _mine(kind: str, raw: str):
    try:
        return _norm(READERS[kind](raw))
    except KeyFileError:
        return "ERR"


@pytest.mark.parametrize("name", ["tricky.txt", *REFUSED])
def test_the_keyfile_replay_reads_every_value_as_glib_does(name, tmp_path):
    path = tmp_path / name
    path.write_text(REFUSED.get(name) or "\n".join(TRICKY) + "\n")
    proc = subprocess.run([python_with_gi(), "-c", GLIB_READ, str(path)], capture_output=True, text=True)
    glib = json.loads(proc.stdout)
    if "error" in glib:
        with pytest.raises(KeyFileError):
            parse_keyfile(path.read_text())
        return
    ours = parse_keyfile(path.read_text())
    assert {g: list(keys) for g, keys in ours.items()} == {g: list(keys) for g, keys in glib.items()}
    for group, keys in glib.items():
        for key, entry in keys.items():
            raw = ours[group][key]
            assert raw == entry["value"], (group, key)
            for kind in ("int", "double", "bool", "string", "strings", "ints", "doubles", "uint64"):
                assert _mine(kind, raw) == _norm(entry[kind]), (key, kind, entry)


# the nvinfer config export-deepstream wrote before issue 46: logits, and a threshold below any of them
TODAY = """[property]
gpu-id=0
net-scale-factor=0.012728233130318015
offsets=33.3285;33.3285;33.3285
model-color-format=0
onnx-file=m.onnx
labelfile-path=labels.txt
infer-dims=3;36;36
batch-size=1
network-mode=0
network-type=1
process-mode=1
output-blob-names=logits
classifier-threshold=-1000000000.0
gie-unique-id=1
maintain-aspect-ratio=0
scaling-filter=1
"""
GOOD = {"onnx-file": "m.onnx", "model-engine-file": "m.onnx_b1_gpu0_fp32.engine", "output-blob-names": "probabilities",
        "output-io-formats": "probabilities:fp32:chw", "classifier-threshold": "0.0"}
FACTS = ModelFacts((3, 36, 36), (("probabilities", "float32"),), 10)


def folder(tmp_path: Path, text: str = TODAY, **keys: str) -> Path:
    """A config folder: `text` with `keys` set (a value None removes the key), the model file, labels file and
    the INT8 stand-in calibration file it names."""
    lines = text.splitlines()
    for key, value in keys.items():
        key = key.replace("_", "-")
        lines = [line for line in lines if not line.startswith(key + "=")]
        if value is not None:
            lines.append(f"{key}={value}")
    (tmp_path / "m.onnx").write_bytes(b"graph")
    (tmp_path / "labels.txt").write_text(";".join(str(i) for i in range(10)) + "\n")
    (tmp_path / "calib.txt").write_text("stand-in\n")
    (tmp_path / "config.txt").write_text("\n".join(lines) + "\n")
    return tmp_path / "config.txt"


def one(problems: list, *words: str) -> str:
    hits = [p for p in problems if all(w in p for w in words)]
    assert hits, problems
    return hits[0]


def test_todays_config_is_refused_for_its_negative_threshold_and_a_fixed_one_passes(tmp_path):
    problem = one(check_nvinfer(folder(tmp_path), FACTS), "classifier-threshold=-1000000000.0")
    assert "must be >= 0" in problem and "gst_nvinfer_parse_props" in problem
    assert check_nvinfer(folder(tmp_path, **GOOD), FACTS) == []


def test_a_float16_output_is_refused_without_output_io_formats_that_read_it_as_float32(tmp_path):
    half = ModelFacts((3, 36, 36), (("probabilities", "float16"),), 10)
    problem = one(check_nvinfer(folder(tmp_path, **{**GOOD, "output-io-formats": None}), half), "float16")
    assert "parseAttributesFromSoftmaxLayers" in problem and "output-io-formats=probabilities:fp32:chw" in problem
    assert check_nvinfer(folder(tmp_path, **GOOD), half) == []
    plan = ModelFacts((3, 36, 36), (("probabilities", "float16"),), 10, plan_profile=(1, 4))  # no build: no fix
    assert one(check_nvinfer(folder(tmp_path, **{**GOOD, "onnx-file": None, "model-engine-file": "m.onnx"}), plan),
               "float16")


@pytest.mark.parametrize("batch", ["0", "1025", "-3", "two"])
def test_a_batch_size_outside_nvinfers_range_is_refused(batch, tmp_path):
    problem = one(check_nvinfer(folder(tmp_path, **{**GOOD, "batch-size": batch}), FACTS), "batch-size")
    assert ("[1, 1024]" in problem or "cannot be interpreted" in problem) and "gst_nvinfer_parse_props" in problem


@pytest.mark.parametrize("key, value, words", [
    ("network-mode", "3", "one of 0, 1, 2"), ("process-mode", "0", "one of 1, 2"),
    ("network-type", "5", "NvDsInferNetworkType"), ("model-color-format", "3", "0 RGB"),
    ("scaling-filter", "7", "NvBufSurfTransform_Inter"), ("infer-dims", "3;36", "3 positive dims"),
    ("gie-unique-id", "0", ">= 1"), ("offsets", "1;2;3;4;5", "at most 4"), ("interval", "-1", ">= 0"),
    ("output-io-formats", "probabilities:bf16:chw", "name:type:format"), ("maintain-aspect-ratio", "yes", "boolean"),
    ("net-scale-factor", "0.5 ", "float number"), ("input-dims", "3;36;36;0", None), ("colour-format", "0", "ignored"),
])
def test_each_key_is_read_as_its_parser_reads_it(key, value, words, tmp_path):
    problems = check_nvinfer(folder(tmp_path, **{**GOOD, key: value}), FACTS)
    if words is None:  # a legacy key nvinfer still reads: no problem of its own
        assert not [p for p in problems if key in p], problems
    else:
        assert one(problems, key, words)


def test_the_model_and_the_config_must_agree(tmp_path):
    def problems(facts=FACTS, **keys):
        return check_nvinfer(folder(tmp_path, **{**GOOD, **keys}), facts)

    one(problems(**{"network-mode": "1"}), "int8-calib-file", "configCommonOptions")
    assert problems(**{"network-mode": "1", "int8-calib-file": "calib.txt",
                       "model-engine-file": engine_cache_name("m.onnx", 1, 0, 1)}) == []
    one(problems(ModelFacts((3, 36, 36), FACTS.outputs, 10, quantized=True)), "Q/DQ", "network-mode=0")
    one(problems(**{"model-engine-file": "m.engine"}), "m.onnx_b1_gpu0_fp32.engine", "buildModel")
    one(problems(**{"infer-dims": "3;32;32"}), "infer-dims", "(3, 36, 36)")
    one(problems(ModelFacts((3, 36, 36), FACTS.outputs, 10, batch=4)), "fixed at 4")
    one(problems(ModelFacts((3, 36, 36), FACTS.outputs, 10, batch=4), **{"batch-size": "4",
        "model-engine-file": engine_cache_name("m.onnx", 4, 0, 0)}), "createDynamicParams")
    plan = ModelFacts((3, 36, 36), FACTS.outputs, 10, plan_profile=(1, 8))
    one(problems(plan, **{"onnx-file": None, "model-engine-file": "m.onnx", "batch-size": "16"}), "profile is 1 to 8")
    one(problems(ModelFacts((3, 36, 36), FACTS.outputs + (("experts_0", "int64"),), 10)), "2 outputs")
    one(problems(**{"output-blob-names": "logits"}), "output-blob-names=logits")
    one(problems(ModelFacts((3, 36, 36), FACTS.outputs, 11)), "10 labels for 11 classes")
    one(problems(**{"classifier-threshold": "1.5"}), "[ours] a probability")
    one(problems(**{"labelfile-path": "missing.txt"}), "Could not open labels file")
    one(problems(**{"network-type": "0"}), "[ours] network-type=1")


APP = """[application]
enable-perf-measurement=1
[source0]
enable=1
type=3
uri=file:///x.mp4
num-sources=1
[streammux]
batch-size=1
width=1280
height=720
[primary-gie]
enable=1
config-file=config.txt
gie-unique-id=1
batch-size=1
[sink0]
enable=1
type=1
sync=0
"""


def app(tmp_path: Path, text: str = APP, **replace: str) -> list:
    config = folder(tmp_path, **GOOD)
    for old, new in replace.items():
        text = text.replace(old.replace("_", "-"), new)
    (tmp_path / "app.txt").write_text(text)
    return check_app(tmp_path / "app.txt", config)


def test_the_deepstream_app_config_is_held_to_deepstream_apps_parsers(tmp_path):
    assert app(tmp_path) == []
    one(app(tmp_path, **{"type=3": "type=9"}), "type=9", "NvDsSourceType")
    one(app(tmp_path, **{"uri=file:///x.mp4": "uri=file:///my%20video.mp4"}), "printf format", "'%%'")
    assert app(tmp_path, **{"uri=file:///x.mp4": "uri=file:///my%%20video.mp4"}) == []
    one(app(tmp_path, **{"config-file=config.txt": "interval=0"}), "Config file not provided")
    one(app(tmp_path, **{"batch-size=1\n[sink0]": "batch-size=2\n[sink0]"}), "batch-size: streammux 1, primary-gie 2")
    two = {"num-sources=1": "num-sources=2", "batch-size=1": "batch-size=2"}
    one(app(tmp_path, **two), "without [tiled-display]", "is_sink_available_for_source_id")
    one(app(tmp_path, **{"enable-perf-measurement": "enable-perf"}), "enable-perf", "ignored")
    one(app(tmp_path, **{"[sink0]\nenable=1": "[sink0]\nenable=0"}), "no enabled")


# secondary mode as deepstream-test2's dstest2_sgie1_config.txt has it, on GOOD's model
SECONDARY = {**GOOD, "process-mode": "2", "gie-unique-id": "2", "operate-on-gie-id": "1",
             "operate-on-class-ids": "0;2", "classifier-async-mode": "1", "input-object-min-width": "32",
             "input-object-min-height": "32", "maintain-aspect-ratio": "1", "symmetric-padding": "1"}


@pytest.mark.parametrize("keys, words", [
    ({}, None),
    ({"operate-on-gie-id": "2"}, ["own gie-unique-id", "should_infer_object"]),
    ({"operate-on-class-ids": "0;-1"}, ["operate-on-class-ids=0;-1", "each >= 0", "at(id)"]),
    ({"operate-on-class-ids": "0;car"}, ["operate-on-class-ids", "cannot be interpreted"]),
    ({"input-object-min-width": "8"}, ["raises it to 16", "MIN_INPUT_OBJECT_WIDTH"]),
    ({"input-object-max-height": "20"}, ["input-object-max-height=20", "no object"]),
    ({"input-object-min-height": "-1"}, ["input-object-min-height=-1", ">= 0"]),
    ({"classifier-async-mode": "2"}, ["classifier-async-mode=2", "boolean"]),
    ({"process-mode": "1"}, ["read only in process-mode=2", "gst_nvinfer_process_objects"]),
    ({"process-mode": "1", "operate-on-gie-id": None, "operate-on-class-ids": None, "input-object-min-width": None,
      "input-object-min-height": None}, ["classifier-async-mode=1 with process-mode=1", "turns it off"]),
    ({"maintain-aspect-ratio": "0"}, ["symmetric-padding=1 without maintain-aspect-ratio=1"]),
])
def test_secondary_keys_are_read_and_applied_as_nvinfer_does(keys, words, tmp_path):
    problems = check_nvinfer(folder(tmp_path, **{**SECONDARY, **keys}), FACTS)
    if words is None:
        assert problems == []
    else:
        one(problems, *words)


APP_SECONDARY = APP.replace("config-file=config.txt", "config-file=/opt/nvidia/deepstream/deepstream/samples/configs/"
                            "deepstream-app/config_infer_primary.txt") + """[tracker]
enable=1
ll-lib-file=/opt/nvidia/deepstream/deepstream/lib/libnvds_nvmultiobjecttracker.so
[secondary-gie0]
enable=1
config-file=config.txt
gie-unique-id=2
operate-on-gie-id=1
operate-on-class-ids=0;2
batch-size=1
"""


def sapp(tmp_path: Path, text: str = APP_SECONDARY, config: dict = SECONDARY, **replace: str) -> list:
    """check_app on an app config running the SECONDARY nvinfer config as [secondary-gie0] behind a detector."""
    path = folder(tmp_path, **config)
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    (tmp_path / "app.txt").write_text(text)
    return check_app(tmp_path / "app.txt", path)


SGIE = "[secondary-gie0]\nenable=1\nconfig-file=config.txt\ngie-unique-id=2\noperate-on-gie-id=1\n"


def test_a_secondary_gie_is_held_to_deepstream_apps_gie_rules(tmp_path):
    assert sapp(tmp_path) == []
    one(sapp(tmp_path, **{"gie-unique-id=2\noperate-on-gie-id=1": "gie-unique-id=2\noperate-on-gie-id=2"}),
        "operates on itself", "should_create_secondary_gie")
    one(sapp(tmp_path, **{"gie-unique-id=2\noperate-on-gie-id=1": "gie-unique-id=1\noperate-on-gie-id=1"}),
        "gie-unique-id=1 is the primary's", "Non unique gie ids found")
    one(sapp(tmp_path, **{"operate-on-gie-id=1\noperate-on-class": "operate-on-gie-id=7\noperate-on-class"}),
        "operate-on-gie-id=7", "silently leaves this secondary out")
    twin = APP_SECONDARY + SGIE.replace("gie0]", "gie1]").replace("config.txt", "other.txt")
    one(sapp(tmp_path, twin), "[secondary-gie1] gie-unique-id=2", "Non unique gie id found")
    loop = APP_SECONDARY + SGIE.replace("gie0]", "gie1]").replace("config.txt", "b.txt").replace(
        "gie-unique-id=2\noperate-on-gie-id=1", "gie-unique-id=3\noperate-on-gie-id=4") + SGIE.replace(
        "gie0]", "gie2]").replace("config.txt", "c.txt").replace("gie-unique-id=2\noperate-on-gie-id=1",
                                                                  "gie-unique-id=4\noperate-on-gie-id=3")
    one(sapp(tmp_path, loop), "[secondary-gie1]", "loop of secondaries ([secondary-gie1] -> [secondary-gie2] -> "
        "[secondary-gie1])", "recurses without end")
    many = APP_SECONDARY + "".join(SGIE.replace("gie0]", f"gie{i}]").replace("id=2", f"id={i + 2}")
                                   for i in range(1, 17))
    one(sapp(tmp_path, many), "17 enabled [secondary-gie]", "MAX_SECONDARY_GIE_BINS")
    one(sapp(tmp_path, **{"[primary-gie]\nenable=1": "[primary-gie]\nenable=0"}), "create_common_elements")
    one(sapp(tmp_path, **{"[tracker]\nenable=1": "[tracker]\nenable=0"}), "Cannot infer on untracked objects")
    assert sapp(tmp_path, config={**SECONDARY, "classifier-async-mode": "0"},
                **{"[tracker]\nenable=1": "[tracker]\nenable=0"}) == []  # synchronous: untracked objects too
    one(sapp(tmp_path, config={**SECONDARY, "process-mode": "1", "classifier-async-mode": "0"}),
        "[secondary-gie0] runs config.txt with process-mode=2")
    one(sapp(tmp_path, **{"operate-on-class-ids=0;2": "operate-on-class-ids=0;3"}), "operate-on-class-ids=[0, 3]",
        "overrides")
    one(sapp(tmp_path, **{"operate-on-class-ids=0;2": "operate-on-class-ids=-1"}), "ids >= 0", "create_secondary_gie")
    one(sapp(tmp_path, **{"ll-lib-file=/opt": "ll-config-file=/opt"}), "[tracker] without ll-lib-file")
    one(sapp(tmp_path, **{"config-file=config.txt\ngie": "gie"}), "config.txt runs in 0 enabled GIE groups")
    assert app_group("secondary-gie") == app_group("secondary-gie-x") == "secondary-gie"  # APP: strncmp prefix
    assert app_group("secondary-preprocess0") is None and app_group("source1") == "source"


def _plan_record(**engine) -> ArtifactRecord:
    return ArtifactRecord.from_json({"precision": "fp16", "source_onnx": "m-fp16.onnx",
                                     "target": engine.pop("target", "tensorrt"),
                                     "engine": {"builder": {"module": engine.pop("builder", "tensorrt"),
                                                            "version": "10.3.0"}, "device": engine}})


def test_plans_the_consumer_cannot_load_are_refused_with_the_build_to_run_on_the_device():
    jetson = _plan_record(platform="Linux aarch64", module="NVIDIA Jetson AGX Orin Developer Kit")
    check_plan_consumer(jetson, "m.plan", "deepstream")
    check_plan_consumer(jetson, "m.plan", "triton")
    build = "mlit-edge build --onnx m-fp16{}.onnx --target tensorrt --precision fp16"
    for consumer, copy in (("deepstream", "-probabilities"), ("triton", "")):  # nvinfer's plan: of the Softmax copy
        for rtx in (_plan_record(target="tensorrt-rtx", builder="tensorrt_rtx"), _plan_record(builder="tensorrt_rtx")):
            with pytest.raises(ValueError, match="TensorRT-RTX plan") as e:
                check_plan_consumer(rtx, "m.plan", consumer)
            assert build.format(copy) in str(e.value)
    x86 = _plan_record(platform="Linux x86_64")
    check_plan_consumer(x86, "m.plan", "triton")  # Triton runs on x86 too
    for record, words in ((x86, "built on Linux x86_64, not on a Jetson"), (_plan_record(), "does not record"),
                          (_plan_record(platform="Linux aarch64"), "Linux aarch64, not on a Jetson")):
        with pytest.raises(ValueError, match=words) as e:
            check_plan_consumer(record, "m.plan", "deepstream")
        assert build.format("-probabilities") in str(e.value) and "pass the ONNX (m-fp16.onnx)" in str(e.value)
        assert "\n" not in str(e.value)
