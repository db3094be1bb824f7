"""The one kind of error a user sees: one line naming the problem, never a traceback."""

from __future__ import annotations

import difflib
import errno


class ConfigError(ValueError):
    """A user error in the configuration: reported as one line, never a traceback."""


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # an OSError's errno when no space is left, or the user's quota is spent


def unknown(kind: str, name: str, valid: list[str], where: str, more: str | None = None) -> ConfigError:
    """One short line: the name, the closest matches, and the valid choices or where to see them."""
    close = difflib.get_close_matches(name, valid, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    choices = f"valid: {', '.join(valid)}" if more is None else more
    return ConfigError(f"unknown {kind} {name!r} in {where}{hint}; {choices}")
