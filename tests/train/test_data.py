import pickle

import numpy as np
import pytest
import torch

from mlit_edge.train.data import ImageSet, Loader, load_dataset

tvd = pytest.importorskip("torchvision.datasets")


def test_embedded_mnist5k_split():
    train, test = load_dataset("mnist5k", "train"), load_dataset("mnist5k", "test")
    assert (len(train), len(test)) == (4000, 1000)
    assert train.images.shape == (4000, 3, 36, 36) and train.images.dtype == torch.uint8
    assert torch.bincount(train.labels).tolist() == [400] * 10
    assert torch.bincount(test.labels).tolist() == [100] * 10
    assert not train.flip  # digits are not flipped
    train_keys = {bytes(img.numpy()) for img in train.images}
    assert not any(bytes(img.numpy()) in train_keys for img in test.images)


def test_the_embedded_set_is_decoded_once_and_each_load_is_a_copy_of_its_own(monkeypatch):
    """The stages of one command share the decoded split; what one of them does to its copy reaches no other."""
    from mlit_edge.train import data

    data._mnist5k_resized.cache_clear()
    decoded = []
    real = data.mnist5k_raw
    monkeypatch.setattr(data, "mnist5k_raw", lambda split: decoded.append(split) or real(split))
    a, b = load_dataset("mnist5k", "test"), load_dataset("mnist5k", "test")
    assert decoded == ["test"] and torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
    a.images[0] += 1
    a.labels[0] += 1
    c = load_dataset("mnist5k", "test")
    assert torch.equal(c.images, b.images) and not torch.equal(c.images, a.images)
    assert torch.equal(c.labels, b.labels) and c.labels[0] != a.labels[0] and decoded == ["test"]


def _cifar_files(root, n_classes):
    rng = np.random.default_rng(0)

    def batch(n):
        labels = rng.integers(0, n_classes, n).tolist()
        key = "labels" if n_classes == 10 else "fine_labels"
        return {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), key: labels}

    if n_classes == 10:
        folder = root / "cifar-10-batches-py"
        folder.mkdir()
        names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
        meta = ("batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    else:
        folder = root / "cifar-100-python"
        folder.mkdir()
        names = ["train", "test"]
        meta = ("meta", {"fine_label_names": [f"c{i}" for i in range(100)]})
    for name in names:
        with open(folder / name, "wb") as f:
            pickle.dump(batch(4), f)
    with open(folder / meta[0], "wb") as f:
        pickle.dump(meta[1], f)


@pytest.mark.parametrize("name,cls,n_classes", [("cifar10", "CIFAR10", 10), ("cifar100", "CIFAR100", 100)])
def test_cifar_from_torchvision_on_disk_format(tmp_path, monkeypatch, name, cls, n_classes):
    _cifar_files(tmp_path, n_classes)
    # torchvision checks the md5 of the real files; everything else is its own parsing
    monkeypatch.setattr(getattr(tvd, cls), "_check_integrity", lambda self: True)
    monkeypatch.setattr(tvd.cifar, "check_integrity", lambda *a, **k: True)
    train = load_dataset(name, "train", tmp_path)
    test = load_dataset(name, "test", tmp_path)
    assert train.images.shape == (4 * (5 if n_classes == 10 else 1), 3, 36, 36)
    assert len(test) == 4 and len(train.classes) == n_classes and train.flip


def test_svhn_from_mat(tmp_path, monkeypatch):
    from scipy.io import savemat

    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("test", 3)):
        savemat(tmp_path / f"{split}_32x32.mat", {"X": rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8),
                                                   "y": np.array([[10], [1], [2], [3], [4], [5]][:n])})
    monkeypatch.setattr(tvd.SVHN, "_check_integrity", lambda self: True)
    train = load_dataset("svhn", "train", tmp_path)
    assert train.labels.tolist() == [0, 1, 2, 3, 4, 5]  # label 10 means digit 0
    assert train.images.shape == (6, 3, 36, 36) and not train.flip


def test_flowers102_from_jpg_and_mat(tmp_path, monkeypatch):
    from PIL import Image
    from scipy.io import savemat

    base = tmp_path / "flowers-102"
    (base / "jpg").mkdir(parents=True)
    for i in range(1, 7):
        Image.fromarray(np.full((50 + i, 70, 3), i * 30, np.uint8)).save(base / "jpg" / f"image_{i:05d}.jpg")
    savemat(base / "imagelabels.mat", {"labels": np.array([[1, 2, 3, 1, 2, 3]])})
    savemat(base / "setid.mat", {"trnid": np.array([[1, 2, 3]]), "valid": np.array([[4]]),
                                 "tstid": np.array([[5, 6]])})
    monkeypatch.setattr(tvd.Flowers102, "_check_integrity", lambda self: True)
    train, test = load_dataset("flowers102", "train", tmp_path), load_dataset("flowers102", "test", tmp_path)
    assert train.labels.tolist() == [0, 1, 2] and test.labels.tolist() == [1, 2]
    assert train.images.shape == (3, 3, 36, 36)
    assert abs(int(train.images[1].float().mean()) - 60) <= 2  # the resized pixels keep their value


def _image_folder(root, per_class=10):
    from PIL import Image

    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(np.full((20, 24, 3), i, np.uint8)).save(root / c / f"{i}.png")


def test_image_folder_split(tmp_path):
    _image_folder(tmp_path)
    train, test = load_dataset(str(tmp_path), "train"), load_dataset(str(tmp_path), "test")
    assert (len(train), len(test)) == (18, 2) and train.classes == ["cat", "dog"]


def test_image_folder_with_train_and_val(tmp_path):
    _image_folder(tmp_path / "train", 3)
    _image_folder(tmp_path / "val", 2)
    assert (len(load_dataset(str(tmp_path), "train")), len(load_dataset(str(tmp_path), "test"))) == (6, 4)


def test_corrupt_image_is_named(tmp_path):
    _image_folder(tmp_path / "train", 2)
    _image_folder(tmp_path / "val", 1)
    (tmp_path / "train" / "cat" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="broken.png"):
        load_dataset(str(tmp_path), "train")


def test_missing_dataset_says_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="--download"):
        load_dataset("cifar10", "train", tmp_path)
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("imagenet", "train", tmp_path)


def _synthetic(n=20, flip=True):
    images = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 3, 36, 36).contiguous()
    return ImageSet("syn", images, torch.arange(n) % 3, ["a", "b", "c"], (0.0,) * 3, (1.0,) * 3, flip)


def test_loader_ranks_partition_an_epoch():
    ds = _synthetic()
    seen = []
    for rank in range(2):
        loader = Loader(ds, 5, train=True, rank=rank, world=2, augment=False)
        loader.set_epoch(3)
        seen += [int(round(v * 255)) for x, _ in loader for v in x[:, 0, 0, 0].tolist()]
    assert sorted(seen) == list(range(20))


def test_loader_augmentation_is_replayable_and_crops_with_zero_padding():
    ds = _synthetic(flip=False)
    loader = Loader(ds, 4, train=True, seed=1)
    loader.set_epoch(2)
    a = [x for x, _ in loader]
    loader.set_epoch(2)
    assert all(torch.equal(u, v) for u, v in zip(a, [x for x, _ in loader]))
    x = a[0]
    assert x.shape == (4, 3, 36, 36)
    assert (x == 0).any()  # some crops show the zero padding
    loader.set_epoch(3)
    assert not all(torch.equal(u, v) for u, v in zip(a, [x for x, _ in loader]))


def test_eval_loader_keeps_order_and_last_partial_batch():
    loader = Loader(_synthetic(10), 4, train=False)
    ys = torch.cat([y for _, y in loader])
    assert len(loader) == 3 and ys.tolist() == [i % 3 for i in range(10)]


def test_label_subset_is_balanced_repeatable_and_recorded():
    from mlit_edge.train.data import label_subset

    train = load_dataset("mnist5k", "train")
    picked, record = label_subset(train, 10, seed=0)
    assert np.bincount(picked.labels.numpy(), minlength=10).tolist() == [10] * 10
    assert record == {"labels_per_class": 10, "seed": 0, "images": 100, "indices_sha256": record["indices_sha256"]}
    again, same = label_subset(train, 10, seed=0)
    other, different = label_subset(train, 10, seed=1)
    assert same == record and torch.equal(again.images, picked.images)  # the seed decides the draw
    assert different["indices_sha256"] != record["indices_sha256"]
    # every picked image is one of the training images, with its own label
    flat = {bytes(img.numpy()): int(y) for img, y in zip(train.images, train.labels)}
    assert all(flat[bytes(img.numpy())] == int(y) for img, y in zip(picked.images, picked.labels))
    with pytest.raises(ValueError, match="class '0' has only 400 training images"):
        label_subset(train, 401)


def test_label_subset_of_an_image_folder(tmp_path):
    from mlit_edge.train.data import label_subset

    _image_folder(tmp_path, per_class=6)
    train = load_dataset(str(tmp_path), "train")  # 11 of 12 images: one class has 5
    picked, record = label_subset(train, 5, seed=2)
    assert np.bincount(picked.labels.numpy()).tolist() == [5, 5] and record["images"] == 10
    with pytest.raises(ValueError, match="has only 5 training images"):
        label_subset(train, 6)


def test_image_folder_reads_pixels_as_the_runtime_and_walks_links_safely(tmp_path):
    """One decoder for training and the runtime: a 16-bit PNG gives the pixels `predict` sees (not
    saturated 255s). Links: a dangling one is skipped, a folder linked twice is read once, a loop refused."""
    import os

    from PIL import Image

    from mlit_edge.runtime.images import load_image
    from mlit_edge.artifacts.preprocess import resize_images
    from mlit_edge.train.image_folder import read_images, scan

    root = tmp_path / "set"
    for c in ("a", "b"):
        (root / c / "sub").mkdir(parents=True)
    values = np.arange(28 * 28, dtype=np.uint16).reshape(28, 28) * 80
    Image.fromarray(values).save(root / "a" / "deep16.png")
    Image.fromarray(np.full((28, 28), 9, np.uint8)).save(root / "b" / "sub" / "x.png")
    (root / "a" / "gone.png").symlink_to(tmp_path / "nowhere.png")
    (root / "b" / "again").symlink_to(root / "b" / "sub", target_is_directory=True)
    classes, samples = scan(root)
    assert classes == ["a", "b"] and [(p.name, c) for p, c in samples] == [("deep16.png", 0), ("x.png", 1)]
    pixels = read_images([samples[0][0]], 36)
    assert np.array_equal(pixels[0], resize_images([load_image(samples[0][0])], 36)[0])
    assert 0 < pixels.mean() < 250  # scaled by 255/65535, as the runtime does
    os.symlink(root, root / "b" / "sub" / "up", target_is_directory=True)
    with pytest.raises(ValueError, match="symbolic link loop"):
        scan(root)


def test_image_folder_reads_a_million_pixel_wide_image_in_bounded_memory(tmp_path):
    import tracemalloc

    from PIL import Image

    from mlit_edge.train.image_folder import read_images

    Image.fromarray(np.full((1, 1_000_000), 200, np.uint8)).save(tmp_path / "wide.png")
    tracemalloc.start()
    out = read_images([tmp_path / "wide.png"], 36)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (out == 200).all() and peak < 60 << 20, peak
