"""Where FashionMNIST's files are on disk: the official gzipped IDX files (``LAB_DATA_DIR``, Debian's package) and
their decompressed copy in the data cache.

Why apart from :mod:`labutils.data`: that module imports torch. The grader asks where the data cache is before it
starts a zygote (``autograder.sandbox.client.data_cache``), and a grading process never imports torch.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

from .atomic import atomic_file

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
RAW_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


def cache_dir() -> Path:
    """Where the decompressed copy lives (``LAB_CACHE_DIR``, default ``~/.cache/loop_lab``)."""
    return Path(os.environ.get("LAB_CACHE_DIR", Path.home() / ".cache" / "loop_lab"))


def find_raw_dir() -> Path | None:
    """The first folder holding the four ``.gz`` IDX files: ``LAB_DATA_DIR``, then Debian's package."""
    candidates = [Path(os.environ["LAB_DATA_DIR"])] if os.environ.get("LAB_DATA_DIR") else []
    candidates.append(DEBIAN_DIR)
    for folder in candidates:
        if all((folder / name).exists() or (folder / name[:-3]).exists() for name in RAW_FILES):
            return folder
    return None


def origin() -> str:
    """One line: where FashionMNIST came from (``LAB_DATA_DIR``, Debian's package or torchvision's download, in the
    order :func:`find_raw_dir` and :mod:`labutils.data` try them) and the folder the lab reads it from (the data
    cache). Notebook 00's first data cell and ``python -m labutils data`` print it."""
    raw_dir, asked = find_raw_dir(), os.environ.get("LAB_DATA_DIR")
    unused = f"LAB_DATA_DIR={asked} does not hold the four IDX files" if asked else "no LAB_DATA_DIR"
    if raw_dir is None:
        came = f"downloaded by torchvision ({unused}, no Debian package in {DEBIAN_DIR})"
    elif asked and raw_dir == Path(asked):
        came = f"from LAB_DATA_DIR ({raw_dir})"
    else:
        came = f"from Debian's package dataset-fashion-mnist ({raw_dir}{'; ' + unused if asked else ''})"
    return f"FashionMNIST {came}, decompressed once into {decompressed_folder(cache_dir())} (LAB_CACHE_DIR moves it)"


def decompressed_folder(root: Path) -> Path:
    """Where the IDX files are, uncompressed, in the data cache ``root``: where torchvision's FashionMNIST looks."""
    return root / "FashionMNIST" / "raw"


def stage(raw_dir: Path, root: Path) -> None:
    """Put the IDX files, uncompressed, in the data cache ``root`` (:func:`decompressed_folder`)."""
    target = decompressed_folder(root)
    target.mkdir(parents=True, exist_ok=True)
    for name in RAW_FILES:
        out = target / name[:-3]
        if out.exists():
            continue
        src = raw_dir / name
        with atomic_file(out) as fout:  # a half-written file never looks like a finished one
            os.fchmod(fout.fileno(), 0o644)  # a public dataset: graded kernels run as another user and read it
            with gzip.open(src, "rb") if src.exists() else open(raw_dir / name[:-3], "rb") as fin:
                shutil.copyfileobj(fin, fout)


def staged(root: Path) -> bool:
    """Are the four files decompressed under ``root`` (a data cache) already?"""
    return all((decompressed_folder(root) / name[:-3]).exists() for name in RAW_FILES)
