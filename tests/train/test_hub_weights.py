"""Weights any hub tool reads (issue 50, item 4): the `config.json` of `export-weights` and of the shipped models
carries timm's keys with the values mlit-edge really uses, timm's own parse of it is replayed here (timm is not
installed), mlit-edge reads the config back (old ones without the keys too, disagreeing ones refused), and a model
card `README.md` with YAML front matter sits beside the pair under the pair's --force rules."""
import json

import numpy as np
import pytest
import torch

from mlit_edge.artifacts.preprocess import resize_images
from mlit_edge.model.mlit import MLiT
from mlit_edge.train import pretrained
from mlit_edge.train.checkpoint import config_from_dict, load_checkpoint, make_checkpoint, save_atomic
from mlit_edge.train.export_weights import export_weights
from mlit_edge.train.hub_config import TIMM_KEYS
from mlit_edge.train.weights_file import WeightsError

META = {"name": "toy", "classes": list("abcde"), "mean": [0.5, 0.4, 0.3], "std": [0.25, 0.2, 0.3], "img_size": 12}
METRICS = {"epoch": 6, "test": {"acc": 0.625, "loss": 1.25, "images": 40}}

# timm/models/_pretrained.py, the fields of `PretrainedCfg`: timm/models/_builder.py `resolve_pretrained_cfg` builds
# the dataclass as PretrainedCfg(**pretrained_cfg), so a key that is not one of these is a TypeError there
PRETRAINED_CFG_FIELDS = {
    "url", "file", "state_dict", "hf_hub_id", "hf_hub_filename", "source", "architecture", "tag", "custom_load",
    "input_size", "test_input_size", "min_input_size", "fixed_input_size", "interpolation", "crop_pct",
    "test_crop_pct", "crop_mode", "mean", "std", "num_classes", "label_offset", "label_names", "label_descriptions",
    "pool_size", "test_pool_size", "first_conv", "classifier", "license", "description", "origin_url", "paper_name",
    "paper_ids", "notes"}
# timm/data/transforms.py `_pil_interpolation_to_str`: the names `str_to_interp_mode` accepts
TIMM_INTERPOLATIONS = {"nearest", "bilinear", "bicubic", "box", "hamming", "lanczos"}
TIMM_CROP_MODES = {"center", "squash", "border"}  # timm/data/transforms_factory.py transforms_imagenet_eval


def timm_parse(folder) -> tuple[dict, str, dict]:
    """What timm does with `folder/config.json`, re-implemented (not copied) from timm at aa4b585:
    timm/models/_hub.py `load_model_config_from_path` reads the JSON and calls `_parse_model_cfg`, which takes
    a config without `pretrained_cfg` as the legacy single dict (popping `architecture`, which must be there), moves
    the top-level `num_classes`, `label_names` and `label_descriptions` into `pretrained_cfg`, adds where it came
    from, and returns (pretrained_cfg, architecture, model_args). timm/models/_factory.py `create_model` then hands
    pretrained_cfg to `resolve_pretrained_cfg` (timm/models/_builder.py): PretrainedCfg(**pretrained_cfg)."""
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if "pretrained_cfg" not in cfg:
        legacy = dict(cfg)
        cfg = {"architecture": legacy.pop("architecture"), "num_features": legacy.pop("num_features", None),
               "pretrained_cfg": legacy}
        if "labels" in legacy:
            legacy["label_names"] = legacy.pop("labels")
    pretrained_cfg = {**cfg["pretrained_cfg"], "file": str(folder), "source": "local-dir"}
    for key in ("num_classes", "label_names", "label_descriptions"):
        if key in cfg:
            pretrained_cfg[key] = cfg[key]
    unknown = set(pretrained_cfg) - PRETRAINED_CFG_FIELDS
    if unknown:
        raise TypeError(f"PretrainedCfg.__init__() got unexpected keyword arguments {sorted(unknown)}")
    return pretrained_cfg, cfg["architecture"], cfg.get("model_args", {})


def timm_data_config(pretrained_cfg: dict) -> dict:
    """timm/data/config.py `resolve_data_config` with no args: each key from pretrained_cfg, else timm's default."""
    pick = {"input_size": (3, 224, 224), "interpolation": "bicubic", "mean": (0.485, 0.456, 0.406),
            "std": (0.229, 0.224, 0.225), "crop_pct": 0.875, "crop_mode": "center"}
    return {k: pretrained_cfg.get(k) or default for k, default in pick.items()}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple:
    """One tiny classifier checkpoint (12x12, 5 classes, with recorded metrics) and its export-weights folder."""
    from mlit_edge.model.config import MLiTConfig

    cfg = MLiTConfig(img_size=12, patch_size=3, num_classes=5, dim=24, depth=3, heads=4, groups=2, hidden_first=16,
                     hidden_last=8, expert_stages=(3, 4, 5))
    root = tmp_path_factory.mktemp("hub")
    torch.manual_seed(0)
    save_atomic(make_checkpoint("mlit", MLiT(cfg), cfg, "xxs-custom", META, epoch=7, metrics=METRICS),
                root / "checkpoint.pt")
    export_weights(str(root / "checkpoint.pt"), root / "w")
    return root / "checkpoint.pt", root / "w", cfg


def test_timm_parses_a_fresh_config_into_the_true_values(exported):
    _, folder, cfg = exported
    pretrained_cfg, arch, model_args = timm_parse(folder)
    data = timm_data_config(pretrained_cfg)
    print(f"timm parse: architecture={arch!r} model_args={model_args} pretrained_cfg={pretrained_cfg}\n"
          f"timm data config: {data}")  # for the record: pytest -s shows it
    assert arch == "mlit_xxs-custom" and model_args == {}
    assert pretrained_cfg["num_classes"] == 5 and pretrained_cfg["label_names"] == META["classes"]
    assert data["input_size"] == [cfg.in_chans, cfg.img_size, cfg.img_size] == [3, 12, 12]
    assert data["mean"] == META["mean"] and data["std"] == META["std"]
    assert data["interpolation"] in TIMM_INTERPOLATIONS and data["crop_mode"] in TIMM_CROP_MODES
    assert (data["interpolation"], data["crop_pct"], data["crop_mode"]) == ("bilinear", 1.0, "squash")
    assert json.loads((folder / "config.json").read_text())["num_features"] == cfg.dim


def test_the_declared_interpolation_and_crop_are_what_preprocess_does():
    """timm's eval transform for crop_mode 'squash' at crop_pct 1.0 is Resize((S, S), bilinear) of the whole image
    (PIL's BILINEAR, antialiased when it shrinks); mlit-edge's numpy resize must match it to the rounding."""
    from PIL import Image

    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (50, 100, 3), dtype=np.uint8)  # 2:1, so a crop or a kept aspect would show
    ours = resize_images([image], 36)[0].astype(int)
    pil = np.asarray(Image.fromarray(image).resize((36, 36), Image.BILINEAR)).astype(int)
    assert np.abs(ours - pil).max() <= 1


def test_the_config_reads_back_and_old_or_disagreeing_ones_are_handled(exported, tmp_path):
    checkpoint, folder, _ = exported
    ckpt = load_checkpoint(folder / "model.safetensors")
    source = torch.load(checkpoint, weights_only=True)
    assert ckpt["data"] == META and ckpt["metrics"] == METRICS and ckpt["size"] == "xxs-custom"
    assert config_from_dict("mlit", ckpt["config"]) == config_from_dict("mlit", source["config"])
    assert all(torch.equal(v, ckpt["model"][k]) for k, v in source["model"].items())
    config = json.loads((folder / "config.json").read_text())
    for name, edit in {"old": lambda c: [c.pop(k) for k in TIMM_KEYS],
                       "renamed": lambda c: c.update(label_names=list("vwxyz")),
                       "bicubic": lambda c: c["pretrained_cfg"].update(interpolation="bicubic")}.items():
        copy = tmp_path / name
        copy.mkdir()
        (copy / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
        changed = json.loads(json.dumps(config))
        edit(changed)
        (copy / "config.json").write_text(json.dumps(changed))
        if name == "old":  # written before the keys existed
            assert load_checkpoint(copy / "model.safetensors")["data"] == META
            continue
        with pytest.raises(WeightsError, match="where its own fields") as err:
            load_checkpoint(copy / "model.safetensors")
        assert "\n" not in str(err.value) and ("label_names" in str(err.value) or "bicubic" in str(err.value))


def _front_matter(text: str) -> dict:
    """The card's front matter as a YAML reader takes it: PyYAML where installed (the dev extra), and always as
    the JSON-valued `key: value` lines it must be (JSON's scalars and flow collections are YAML)."""
    assert text.startswith("---\n")
    block = text[4:text.index("\n---\n", 3)]
    meta = {}
    for line in block.splitlines():
        key, value = line.split(": ", 1)
        meta[key] = json.loads(value)
    try:
        import yaml
    except ImportError:
        return meta
    assert yaml.safe_load(block) == meta
    return meta


def test_the_model_card_carries_the_recorded_metrics_or_says_there_are_none(exported, tmp_path, tiny_cfg):
    _, folder, _ = exported
    meta = _front_matter((folder / "README.md").read_text(encoding="utf-8"))
    assert meta["license"] == "apache-2.0" and meta["datasets"] == ["toy"] and "image-classification" in meta["tags"]
    results = meta["model-index"][0]["results"][0]
    assert {m["type"]: m["value"] for m in results["metrics"]} == {"accuracy": 0.625, "loss": 1.25}
    assert "top-1 on 40 held-out images" in results["metrics"][0]["name"]
    save_atomic(make_checkpoint("mlit", MLiT(tiny_cfg), tiny_cfg, None, {**META, "name": "imagefolder:/home/x"}),
                tmp_path / "bare.pt")
    export_weights(str(tmp_path / "bare.pt"), tmp_path / "bare")
    text = (tmp_path / "bare" / "README.md").read_text(encoding="utf-8")
    meta = _front_matter(text)
    assert "model-index" not in meta and "metrics" not in meta and meta["datasets"] == ["imagefolder"]
    assert "records no evaluation" in text and "/home/x" not in meta["datasets"][0]


def test_the_card_is_refused_and_replaced_under_the_pairs_force_rules(exported, tmp_path):
    checkpoint, _, _ = exported
    out = tmp_path / "w"
    out.mkdir()
    (out / "README.md").write_text("someone's own notes\n")
    (out / ".README.md.k1ll3d.tmp").write_text("left by a kill")
    with pytest.raises(FileExistsError, match="already holds README.md; pass --force"):
        export_weights(str(checkpoint), out)
    assert (out / "README.md").read_text() == "someone's own notes\n"
    export_weights(str(checkpoint), out, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert _front_matter((out / "README.md").read_text())["library_name"] == "mlit-edge"


@pytest.mark.parametrize("name", ["xxs-mnist5k", "xxs-mnist5k-mae"])
def test_the_shipped_configs_carry_the_keys_and_their_cards(name):
    folder = pretrained.WEIGHTS / name
    pretrained_cfg, arch, _ = timm_parse(folder)
    ckpt = load_checkpoint(pretrained.PREFIX + name)  # the index's sha256s hold for the refreshed config
    mae = ckpt["kind"] == "mmlit"
    assert arch == ("mmlit_xxs" if mae else "mlit_xxs") and pretrained_cfg["input_size"] == [3, 36, 36]
    assert pretrained_cfg["num_classes"] == (0 if mae else 10)
    assert pretrained_cfg.get("label_names") == (None if mae else ckpt["data"]["classes"])
    meta = _front_matter((folder / "README.md").read_text(encoding="utf-8"))
    value = meta["model-index"][0]["results"][0]["metrics"][0]["value"]
    assert value == (ckpt["metrics"]["train"]["loss"] if mae else pretrained.entry_of(name)["top1"])
