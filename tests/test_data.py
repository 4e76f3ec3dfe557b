"""FashionMNIST loading: the split, the normalisation, the resumable order and the missing-data message."""

import gzip
import shutil

import pytest
import torch

from labutils import data, data_files


def test_split_is_80_20_and_independent_of_the_run_seed():
    splits = data.load_splits()
    n_train, n_val = len(splits.train[1]), len(splits.val[1])
    assert (n_train, n_val) == (48_000, 12_000)
    assert len(splits.test[1]) == 10_000
    again = data.load_splits()
    assert torch.equal(splits.val[0], again.val[0])  # fixed split seed: every run validates on the same images


@pytest.mark.parametrize("train", [True, False], ids=["train", "test"])
def test_the_files_read_as_torchvision_reads_them(train):
    """torchvision is the oracle: load_raw reads the IDX files itself (importing torchvision.datasets costs every
    process that loads the data 1.7 s of CPU) and gets the same tensors as torchvision's FashionMNIST"""
    from torchvision.datasets import FashionMNIST

    images, labels = data.load_raw(train)
    reference = FashionMNIST(data.cache_dir(), train=train)
    assert images.dtype == reference.data.dtype and labels.dtype == reference.targets.dtype
    assert torch.equal(images, reference.data) and torch.equal(labels, reference.targets)


def test_a_file_that_is_not_idx_is_refused(tmp_path):
    (tmp_path / "x").write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(ValueError, match="not an IDX file"):
        data.read_idx(tmp_path / "x")


def test_subset_keeps_the_80_20_proportion():
    splits = data.load_splits(subset=800)
    assert (len(splits.train[1]), len(splits.val[1])) == (800, 200)


def test_normalisation_gives_zero_mean_unit_std_on_the_training_split():
    images = data.load_splits().train[0]
    x = data.normalize(images)
    assert x.shape == (48_000, 1, 28, 28) and x.dtype == torch.float32
    assert abs(x.mean().item()) < 0.01 and abs(x.std().item() - 1) < 0.01


def test_batch_order_is_a_pure_function_of_seed_and_epoch():
    sampler = data.EpochBatchSampler(100, 16, seed=3)
    sampler.set_epoch(2)
    first = list(sampler)
    sampler.set_epoch(2)
    assert list(sampler) == first
    sampler.set_epoch(3)
    assert list(sampler) != first
    sampler.set_epoch(2, start_batch=4)
    assert list(sampler) == first[4:]  # resuming skips exactly the batches already seen
    assert sorted(i for b in first for i in b) == list(range(100))
    assert [len(b) for b in first] == [16] * 6 + [4]  # the smaller last batch is kept


def test_iterating_a_loader_leaves_the_global_rng_alone():
    loader = data.make_loader(torch.zeros(10, 28, 28, dtype=torch.uint8), torch.arange(10), batch_size=4)
    before = torch.get_rng_state()
    x, y = next(iter(loader))
    assert torch.equal(torch.get_rng_state(), before)
    assert x.shape == (4, 1, 28, 28) and y.shape == (4,)


def test_set_position_rejects_a_batch_outside_the_epoch():
    loader = data.make_loader(torch.zeros(10, 28, 28, dtype=torch.uint8), torch.arange(10), batch_size=4)
    with pytest.raises(ValueError, match="outside this epoch's 3 batches"):
        data.set_position(loader, 0, start_batch=4)


def test_lab_data_dir_points_at_any_copy(tmp_path, monkeypatch):
    source = data.find_raw_dir()
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in data_files.RAW_FILES:  # uncompressed copies are accepted as well as the .gz originals
        src = source / name
        if src.exists():
            with gzip.open(src) as fin, open(copy / name[:-3], "wb") as fout:
                shutil.copyfileobj(fin, fout)
        else:
            shutil.copyfile(source / name[:-3], copy / name[:-3])
    monkeypatch.setenv("LAB_DATA_DIR", str(copy))
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    assert data.find_raw_dir() == copy
    data._decoded.cache_clear()
    try:
        images, labels = data.load_raw(train=False)
        assert images.shape == (10_000, 28, 28) and labels.max() == 9
    finally:
        data._decoded.cache_clear()


def test_missing_data_names_the_three_fixes(tmp_path, monkeypatch):
    from torchvision.datasets import FashionMNIST

    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(data_files, "DEBIAN_DIR", tmp_path / "no-debian-package")

    def offline(self):
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz")  # what torchvision says offline

    monkeypatch.setattr(FashionMNIST, "download", offline)
    with pytest.raises(data.DataMissingError) as err:
        data.ensure_data()
    message = str(err.value)
    assert "LAB_DATA_DIR" in message and "apt-get install -y dataset-fashion-mnist" in message
    assert "download" in message and "Traceback" not in message


def test_the_data_is_decoded_once_however_it_is_asked_for_and_staged_readable_by_every_user(tmp_path, monkeypatch):
    """A grading zygote decodes the data once for all its kernels: ``load_raw(True)`` and ``load_raw(train=True)``
    are one cache entry (lru_cache kept them apart, so the data tour's kernel read the files again). The files it
    decompresses are readable by the kernels, which run as another user (atomic_file's temp files are 0600; a
    kernel of the data tour failed with PermissionError on them)."""
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    data._decoded.cache_clear()
    try:
        first = data.load_raw(True)
        assert data.load_raw(train=True) is first and data.load_raw(train=1) is first
        assert data.load_raw(train=False) is not first
    finally:
        data._decoded.cache_clear()
    for name in data_files.RAW_FILES:
        assert (tmp_path / "cache" / "FashionMNIST" / "raw" / name[:-3]).stat().st_mode & 0o777 == 0o644, name


def test_the_data_says_where_it_came_from_and_where_it_is_kept(tmp_path, monkeypatch):
    """Check that the one line notebook 00's first data cell prints names the source find_raw_dir chose (LAB_DATA_DIR,
    Debian's package, or torchvision's download), says when LAB_DATA_DIR was set but not used, and names the folder
    the lab reads the decompressed files from"""
    debian, mine, empty = tmp_path / "debian", tmp_path / "mine", tmp_path / "empty"
    for folder in (debian, mine):
        folder.mkdir()
        for name in data_files.RAW_FILES:
            (folder / name).touch()
    empty.mkdir()
    monkeypatch.setattr(data_files, "DEBIAN_DIR", debian)
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    kept = f"decompressed once into {tmp_path / 'cache' / 'FashionMNIST' / 'raw'} (LAB_CACHE_DIR moves it)"
    monkeypatch.setenv("LAB_DATA_DIR", str(mine))
    assert data.origin() == f"FashionMNIST from LAB_DATA_DIR ({mine}), {kept}"
    monkeypatch.setenv("LAB_DATA_DIR", str(empty))
    assert data.origin() == (f"FashionMNIST from Debian's package dataset-fashion-mnist ({debian}; LAB_DATA_DIR="
                             f"{empty} does not hold the four IDX files), {kept}")
    monkeypatch.delenv("LAB_DATA_DIR")
    assert data.origin() == f"FashionMNIST from Debian's package dataset-fashion-mnist ({debian}), {kept}"
    monkeypatch.setattr(data_files, "DEBIAN_DIR", empty)
    assert data.origin() == (f"FashionMNIST downloaded by torchvision (no LAB_DATA_DIR, no Debian package in {empty}), "
                             f"{kept}")
