"""Everything that differs by device lives here: detection, precision support, cache clearing, memory.

The rest of the trainer is device-agnostic; a profile names its device and this module says
whether the machine has it.
"""

from __future__ import annotations

import logging
import os
import resource
import sys

import torch
from transformers import TrainerCallback

logger = logging.getLogger(__name__)

DEVICES = ("cuda", "rocm", "mps", "cpu")


def has_device(device: str) -> bool:
    """Whether this machine can run ``device``. ROCm builds of torch expose AMD GPUs as ``cuda``."""
    if device in ("cuda", "rocm"):
        return torch.cuda.is_available() and (torch.version.hip is not None) == (device == "rocm")
    if device == "mps":
        return torch.backends.mps.is_available()
    return device == "cpu"


def detect() -> tuple[str, str]:
    """The best device here, CUDA then ROCm then MPS then CPU, and why it was chosen."""
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        if torch.version.hip is not None:
            return "rocm", f"torch is a ROCm build and sees {name}"
        return "cuda", f"CUDA is available ({name})"
    if torch.backends.mps.is_available():
        return "mps", "no CUDA GPU; Apple MPS is available"
    return "cpu", "no CUDA, ROCm or MPS device is available"


def cuda_supports_bf16() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def memory_source(device: str) -> str:
    """What ``peak_memory_mb`` measures for a run on ``device`` (``cuda``, ``rocm``, ``mps`` or ``cpu``, as a
    profile names it or as torch does): that accelerator's memory, or the process's RSS on the CPU, even where
    a GPU sits idle beside it."""
    if device in ("cuda", "rocm") and torch.cuda.is_available():
        return "cuda"
    return "mps" if device == "mps" and torch.backends.mps.is_available() else "rss"


def peak_memory_mb(device: str) -> float:
    """Peak memory so far, in MiB, of ``memory_source(device)``."""
    source = memory_source(device)
    if source == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    if source == "mps":
        # MPS has no peak counter; the driver's current allocation is the closest figure.
        return torch.mps.driver_allocated_memory() / 2**20
    return peak_rss_bytes() / 2**20


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # bytes on macOS, KiB on Linux


def memory_in_use(device: str) -> int:
    """Bytes held now, of ``memory_source(device)``: what nears a device's limit (the allocator's reserve on
    CUDA, the driver's allocation on MPS, resident memory on Linux, the peak elsewhere)."""
    source = memory_source(device)
    if source == "cuda":
        return torch.cuda.memory_reserved()
    if source == "mps":
        return torch.mps.driver_allocated_memory()
    return rss_bytes()


def rss_bytes() -> int:
    """This process's resident memory now (Linux), else its peak so far. Not the peak on Linux: a process
    started by a larger one inherits that one's peak across exec."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss_bytes()


def memory_limit(device: str) -> tuple[int, str] | None:
    """How much memory ``device`` has here, and what that figure is; None when it is absent."""
    if device in ("cuda", "rocm") and torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory, f"{torch.cuda.get_device_name(0)} total memory"
    if device == "mps" and torch.backends.mps.is_available():
        try:
            return torch.mps.recommended_max_memory(), "MPS recommended maximum working set"
        except RuntimeError:  # torch built without MPS support (a mocked MPS in tests)
            return None
    if device == "cpu":
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "system RAM"
    return None


class MpsCacheCallback(TrainerCallback):
    """Every ``every`` optimizer steps, wait for MPS work to finish and release its cached memory.

    Apple's unified memory turns allocator growth into swapping; seed 002 measured this as the
    difference between 226 s and tens of seconds per step for a 3B model.
    """

    def __init__(self, every: int) -> None:
        if every < 1:
            raise ValueError(f"mps_empty_cache_steps must be at least 1, got {every}")
        self.every = every

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            torch.mps.synchronize()
            torch.mps.empty_cache()


def absent_message(device: str, asked_by: str, instead: str) -> str:
    """The one-line error for a device this machine lacks. ``asked_by``: what named it (``--device cuda``,
    ``profile cuda``); ``instead``: what works here."""
    kind = {"mps": "Apple MPS", "rocm": "an AMD GPU under ROCm", "cuda": "an NVIDIA GPU"}.get(
        device, f"device {device}"
    )
    return f"{asked_by} needs {kind}, and torch sees none here; {instead}"
