"""Process memory for training on a CPU: keep freed buffers instead of faulting them back in every step.

Why a module of its own: the reference loop (:func:`labutils.reference.loop.fit`) and the notebooks
(:func:`labutils.lesson.start`) both set it, and the notebooks must not import the reference implementation.
"""

from __future__ import annotations

import ctypes
import platform


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for reuse instead of returning it to the OS (and faulting it back in) every step.

    By default glibc hands each large buffer back on free (``munmap``, or trimming the heap top), so every training
    step page-faults its activations in again: measured ~450-1,500 minor faults per step (up to 20% of training time)
    and ~430,000 per pass over the validation split (evaluation 1.8x slower) on 2 cores; ``benchmarks/bench_loop.py``
    prints the faults per step of every arm. Two fixed thresholds keep up to 1 GiB of freed memory in the process.
    No number a loop computes changes, so resume stays bit-exact. Set once per process (a forked child inherits it);
    a no-op (returns False) off glibc.
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    mmap_ok = libc.mallopt(m_mmap_threshold, 256 << 20)  # buffers below 256 MiB come from the reusable heap
    trim_ok = libc.mallopt(m_trim_threshold, 1 << 30)  # and freed heap memory is kept up to 1 GiB
    return bool(mmap_ok and trim_ok)
