"""What the two entry scripts share: ``--help`` that fits a screen, and user errors as one line.

A user error is a :class:`~settings.config.ConfigError`: it is printed as ``error: ...`` on stderr
with exit code 2, never as a traceback; stdout stays empty.
"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from settings.errors import DISK_FULL, ConfigError

HELP_ALL = "--help-all"


def _default_text(name: str, default: Any, profiles: dict[str, dict[str, Any]]) -> str | None:
    """What ``--help`` says of a field's default: its value, and which profiles set their own."""
    setting = sorted(p for p, values in profiles.items() if name in values)
    if setting and len(setting) == len(profiles):
        return "set by the profile"
    shown = None if default in (None, False, "") else str(default)
    if not setting:
        return shown
    own = f"the {', '.join(setting)} profile{'s set' if len(setting) > 1 else ' sets'} its own"
    return f"{shown}; {own}" if shown else own


def _option_lines(
    fields: Sequence[Any], profiles: dict[str, dict[str, Any]], dashed: Sequence[str], width: int = 100
) -> list[str]:
    lines = []
    for f in fields:
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        text = f.metadata.get("help", "")
        said = _default_text(f.name, default, profiles)
        if said is not None and "(default:" not in text:  # a help text may say the default in its own words
            text += f" (default: {said})"
        wrapped = textwrap.wrap(text, width - 28) or [""]
        flag = f.name.replace("_", "-") if f.name in dashed else f.name  # the one spelling the docs use
        lines.append(f"  --{flag:<24}{wrapped[0]}")
        lines += [" " * 28 + more for more in wrapped[1:]]
    return lines


def brief(dataclass: type, helps: dict[str, str]) -> list[Any]:
    """Fields of another dataclass (TRL's) for ``--help``, with a short help of their own."""
    fields = {f.name: f for f in dataclasses.fields(dataclass)}
    return [
        SimpleNamespace(
            name=name,
            default=fields[name].default,
            default_factory=fields[name].default_factory,
            metadata={"help": text},
        )
        for name, text in helps.items()
    ]


def help_requested(
    argv: Sequence[str],
    doc: str,
    own: type,
    extra: Sequence[str] = (),
    full: Callable[[], str] | None = None,
    more: Sequence[Any] = (),
    profiles: Callable[[], dict[str, dict[str, Any]]] | None = None,
    dashed: Sequence[str] = (),
) -> bool:
    """Print help and return True when asked: ``--help`` shows the script's docstring, its own options (the
    dataclass ``own``, then the ``more`` fields), ``--help-all`` every option the script accepts
    (``full()``). ``profiles()`` maps each profile to its values: a default a profile replaces says so.
    The ``dashed`` fields show as ``--dry-run``, the others by their name."""
    if full is not None and HELP_ALL in argv:
        print(full())
        return True
    if not ({"-h", "--help"} & set(argv)):
        return False
    options = [*dataclasses.fields(own), *more]
    lines = [doc.strip(), "", "Options:", *extra, *_option_lines(options, profiles() if profiles else {}, dashed)]
    if full is not None:
        lines += ["", f"{HELP_ALL}: every option, including each TRL GRPOConfig and ModelConfig field."]
    print("\n".join(lines))
    return True


def run_cli(body: Callable[[], object]) -> int:
    """Run ``body()``: exit code 0, or 2 with one ``error:`` line on stderr for a user error."""
    try:
        body()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # any other write that ran out of space: the adapter, the evaluation's files
        if exc.errno not in DISK_FULL:
            raise
        where = f" writing {exc.filename}" if exc.filename else ""
        print(f"error: the disk filled{where} ({exc.strerror}): free space, then rerun with --resume", file=sys.stderr)
        return 2
    return 0
