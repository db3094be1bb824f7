"""The one kind of error a user sees: one line naming the problem, never a traceback."""

from __future__ import annotations

import difflib
import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class ConfigError(ValueError):
    """A user error in the configuration: reported as one line, never a traceback."""


class Stopped(Exception):
    """A run stopped on a signal, with its checkpoint saved: one line, and the exit code a shell expects."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # an OSError's errno when no space is left, or the user's quota is spent
# What the libraries that write a run's files say instead of an OSError: torch's zip writer (a RuntimeError,
# "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598") and safetensors (a SafetensorError,
# "I/O error: No space left on device (os error 28)"), both measured on a full tmpfs.
_DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "unexpected pos", "file write failed")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says a write found no space left, whichever library raised it."""
    if isinstance(exc, OSError):
        return exc.errno in DISK_FULL
    if isinstance(exc, ConfigError):  # already the one line, naming the place
        return False
    return isinstance(exc, Exception) and any(text in str(exc) for text in _DISK_FULL_TEXTS)


def disk_full_reason(exc: BaseException) -> str:
    """What the system said of a full disk: an OSError's own words, else the usual ones (the libraries that raise
    other exceptions bury them in a longer message)."""
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else "No space left on device"


def disk_full_line(exc: BaseException, where: str | Path | None, then: str) -> str:
    """The one line for a full disk: where the write was (the file, when the library named it), why, and what to
    do once space is back."""
    named = exc.filename if isinstance(exc, OSError) and exc.filename else where
    return f"the disk filled {f'writing {named} ' if named else ''}({disk_full_reason(exc)}): free space, then {then}"


@contextmanager
def writing(where: str | Path, then: str = "rerun with --resume") -> Iterator[None]:
    """A full disk while the block writes ``where`` is one ConfigError line that names it and says what to do."""
    try:
        yield
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        raise ConfigError(disk_full_line(exc, where, then)) from None


def unknown(kind: str, name: str, valid: list[str], where: str, more: str | None = None) -> ConfigError:
    """One short line: the name, the closest matches, and the valid choices or where to see them."""
    close = difflib.get_close_matches(name, valid, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    choices = f"valid: {', '.join(valid)}" if more is None else more
    return ConfigError(f"unknown {kind} {name!r} in {where}{hint}; {choices}")
