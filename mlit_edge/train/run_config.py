"""What `mlit-edge train | pretrain | finetune` asks for (`RunConfig`), apart from the run itself (`train.fit`),
so that the CLI takes its options' defaults from the one place without importing torch: a device runs the CLI
without it, and only what a run reads from the data or a checkpoint imports it, inside the function."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..model.config import DECODER_FIELDS, GATINGS, MAEConfig, get_config

TASKS = ("train", "pretrain", "finetune")
AMPS = ("auto", "fp16", "bf16", "off")  # auto: fp16 on CUDA, bf16 on a CPU with AMX, else off


@dataclass(frozen=True)
class RunConfig:
    """What `mlit-edge train | pretrain | finetune` was asked to do."""

    task: str = "train"
    size: str = "xxs"
    data: str = "mnist5k"
    data_root: str = "data"
    download: bool = False
    out: str = "runs/xxs-mnist5k"
    epochs: int = 30
    batch_size: int = 128  # global, across all processes
    lr: float | None = None  # None: the paper's 3e-4 * batch / 256
    min_lr: float = 0.0
    warmup_frac: float = 0.05  # [paper] warm-up over the first 5% of epochs
    weight_decay: float = 0.05  # [paper]
    clip_grad: float | None = None
    amp: str = "auto"  # auto (fp16 on CUDA, off on CPU) | fp16 | bf16 | off
    device: str = "auto"
    seed: int = 0
    deterministic: bool = False
    resident: bool = False  # keep the whole dataset on the device
    compile: bool = False
    resume: bool = False
    init_from: str | None = None  # finetune: the mmLiT checkpoint; train: a checkpoint whose body to start from
    num_classes: int | None = None  # the head's outputs, which must be the data's class count (None: the data's)
    overrides: dict = field(default_factory=dict)  # MLiTConfig fields, and the decoder's for pretrain
    mask_ratio: float | None = None  # MAE only
    labels_per_class: int | None = None  # train/finetune on this many labelled images of each class
    subset_seed: int = 0  # the draw of that subset
    eval_every: int = 1
    progress: bool = True

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}")
        if self.amp not in AMPS:
            raise ValueError(f"--amp {self.amp!r}: choose from {', '.join(AMPS)}")
        if self.num_classes is not None and (self.num_classes < 1 or self.task == "pretrain"):
            raise ValueError("--num-classes must be at least 1" if self.num_classes < 1 else
                             "--num-classes: pre-training builds no head")
        if self.init_from and self.task == "pretrain":
            raise ValueError("pretrain starts from random weights; fine-tune a checkpoint with train --checkpoint")
        for name in ("epochs", "batch_size", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if self.labels_per_class is not None and (self.labels_per_class < 1 or self.task == "pretrain"):
            raise ValueError("--labels-per-class must be at least 1" if self.labels_per_class < 1 else
                             "--labels-per-class: pre-training uses every image, without its label")
        if self.task == "finetune" and not self.init_from:
            raise ValueError("finetune needs --from PRETRAIN.pt (an mmLiT checkpoint)")
        from .data import IMG_SIZE  # torch

        fixed = {"num_classes": "the dataset's class count", "in_chans": 3, "img_size": IMG_SIZE}
        for key, value in fixed.items():  # the data decides these; a mismatch would only fail at the first step
            if key in self.overrides and (isinstance(value, str) or self.overrides[key] != value):
                raise ValueError(f"--set {key}={self.overrides[key]}: {key} is set by the data ("
                                 f"{value if isinstance(value, str) else f'every dataset is loaded as {value}'})")
        if self.decoder and self.task != "pretrain":
            raise ValueError(f"--set {next(iter(self.decoder))}: a field of the mmLiT decoder, which only pretrain "
                             "builds")
        if self.task == "pretrain":  # every value checked before any work
            self.mae_config()
        elif not self.init_from:  # a checkpoint's own config is checked when it is read (train.fit)
            get_config(self.size, **self.encoder)

    @property
    def encoder(self) -> dict:
        """The `--set` fields of the encoder (the classifier's model)."""
        return {k: v for k, v in self.overrides.items() if k not in DECODER_FIELDS}

    @property
    def decoder(self) -> dict:
        """The `--set` fields of the mmLiT decoder."""
        return {k: v for k, v in self.overrides.items() if k in DECODER_FIELDS}

    def mae_config(self) -> MAEConfig:
        """The mmLiT that pretrain builds: the size's encoder without a head, and the decoder."""
        mask = {} if self.mask_ratio is None else {"mask_ratio": self.mask_ratio}
        return MAEConfig(encoder=get_config(self.size, num_classes=0, **self.encoder), **self.decoder, **mask)

    @classmethod
    def for_task(cls, task: str, size: str | None, out: str | None = None, gating: str | None = None,
                 **fields) -> "RunConfig":
        """The run a CLI command asks for; `out` defaults to runs/TASK-SIZE-DATA; `gating` names a preset of
        `model.config.GATINGS` that `--set` fields override."""
        data_tag = fields.get("data", cls.data).rstrip("/").split("/")[-1]
        if fields.get("init_from"):  # the checkpoint's own size names the run folder
            own = encoder_size(fields["init_from"], "mmlit" if task == "finetune" else None)
            if size is not None and size.lower() != own:
                raise ValueError(f"--size {size}: the --checkpoint is of size {own}; leave --size out")
            size = own
        if gating is not None:
            fields["overrides"] = {**GATINGS[gating], **fields.get("overrides", {})}
        return cls(task=task, size=size, out=out or f"runs/{task}-{size}-{data_tag}", **fields)


def encoder_size(init_from: str, kind: str | None = "mmlit") -> str:
    """The size of the body a finetune (an mmLiT's encoder) or a train --checkpoint (`kind` None: either kind)
    starts from, as its run folder and checkpoint name it."""
    from . import checkpoint as ck  # torch
    from ..model.records import claimed_size

    pre = ck.load_checkpoint(init_from, kind=kind)
    cfg = ck.config_from_dict(pre["kind"], pre["config"])
    return claimed_size(pre.get("size"), cfg.encoder if pre["kind"] == "mmlit" else cfg)
