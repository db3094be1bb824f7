"""MKL's AVX2 path on every x86-64 CPU that has AVX2, so that a build gives the same bytes on any maker's CPU.

MKL does torch's matrix products on x86. It honours the build's ``MKL_ENABLE_INSTRUCTIONS=AVX2`` on Intel CPUs only: on
any other maker's CPU it takes a path of its own, whatever is set, and SFT's 672 steps turn that path's float
differences into other weights. MKL asks ``mkl_serv_intel_cpu_true()`` which maker it runs on, through the dynamic
linker, so a one-line definition of it loaded ahead of torch answers "Intel" (the known workaround for MKL on AMD
CPUs): MKL then takes its AVX2 path there too, for which AVX2 is all it needs. So answered, an AMD EPYC rebuilt the
shipped weights byte for byte, in 17 minutes on one core. MKL's only path documented as the same on both makers,
``MKL_CBWR=COMPATIBLE``, gives other weights and made a build 32 minutes (docs/research-log.md).

This module imports nothing heavy: it must run before torch loads, as ``python -m tinymodel`` calls it.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

INTEL = "GenuineIntel"
X86_64 = ("x86_64", "amd64")  # platform.machine()'s names for it, lower-cased
# The known workaround answers the first, which decides MKL's code path; the second is what its banner asks
# (MKL_VERBOSE=1), so that the banner names the path taken.
SHIM_SOURCE = "int mkl_serv_intel_cpu_true(void) { return 1; }\nint mkl_serv_intel_cpu(void) { return 1; }\n"

# What build_info.json's "mkl_path" says, besides Intel's dispatch to MKL_ENABLE_INSTRUCTIONS (see mkl_path).
OWN = "its own (another maker's CPU)"
NOT_X86 = "none (not an x86-64 CPU)"
UNKNOWN = "unknown (no /proc/cpuinfo to name the CPU's maker)"

_answered = False


def c_compiler() -> str | None:
    """The system's C compiler, if any."""
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def cpu_fields(cpuinfo: str | None = None) -> dict[str, str]:
    """The first core's fields of Linux's /proc/cpuinfo (empty elsewhere)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            return {}
    first = cpuinfo.split("\n\n", 1)[0]
    return {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first.splitlines())}


def needs_answer(fields: dict[str, str], machine: str) -> bool:
    """Whether MKL would leave the AVX2 path on this CPU: an x86-64 Linux CPU of another maker that has AVX2 (without
    AVX2 no path of MKL's is the shipped one's, and nothing is gained)."""
    return (
        machine.lower() in X86_64
        and bool(fields.get("vendor_id"))
        and fields["vendor_id"] != INTEL
        and "avx2" in fields.get("flags", "").split()
    )


def answer_intel() -> str | None:
    """On a CPU of :func:`needs_answer`, compile the one-line answer with the system's C compiler and load it ahead of
    torch. Returns ``None`` when MKL will take the AVX2 path, else a one-line reason why it will not."""
    global _answered
    if "torch" in sys.modules:
        raise RuntimeError("tinymodel.mkl.answer_intel() must run before torch is imported: MKL asks once")
    if not needs_answer(cpu_fields(), platform.machine()):
        return None
    cc = c_compiler()
    if cc is None:
        return "no C compiler (cc, gcc or clang) to build MKL's maker answer"
    with tempfile.TemporaryDirectory(prefix="tinymodel-mkl-") as scratch:
        source, shim = Path(scratch) / "intel_cpu.c", Path(scratch) / "libintel_cpu.so"
        source.write_text(SHIM_SOURCE, encoding="utf-8")
        command = [cc, "-shared", "-fPIC", "-o", str(shim), str(source)]
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip() or "no message").splitlines()[-1]
            return f"{Path(cc).name} could not build MKL's maker answer ({last})"
        # Global, so that the linker binds torch's MKL to it when torch loads; the file may go once it is mapped.
        ctypes.CDLL(str(shim), mode=ctypes.RTLD_GLOBAL)
    _answered = True
    return None


def mkl_path() -> str:
    """The path MKL takes in this process, for build_info.json."""
    if platform.machine().lower() not in X86_64:
        return NOT_X86
    vendor = cpu_fields().get("vendor_id")
    if vendor is None:
        return UNKNOWN
    if vendor != INTEL and not _answered:
        return OWN
    pin = os.environ.get("MKL_ENABLE_INSTRUCTIONS", "not pinned")
    return f"Intel's, {pin}" + ("" if vendor == INTEL else " (another maker's CPU, MKL's maker check answered)")
