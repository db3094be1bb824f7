"""What the two entry scripts share: ``--help`` that fits a screen, and user errors as one line.

A user error is a :class:`~training.config.ConfigError`: it is printed as ``error: ...`` on stderr
with exit code 2, never as a traceback; stdout stays empty.
"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from training.config import ConfigError

HELP_ALL = "--help-all"


def _option_lines(fields: Sequence[Any], width: int = 100) -> list[str]:
    lines = []
    for f in fields:
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        text = f.metadata.get("help", "")
        if default not in (None, False, "") and "default" not in text:
            text += f" (default: {default})"
        wrapped = textwrap.wrap(text, width - 28) or [""]
        lines.append(f"  --{f.name:<24}{wrapped[0]}")
        lines += [" " * 28 + more for more in wrapped[1:]]
    return lines


def help_requested(
    argv: Sequence[str], doc: str, own: type, extra: Sequence[str] = (), full: Callable[[], str] | None = None
) -> bool:
    """Print help and return True when asked: ``--help`` shows the script's docstring and its own
    options (the dataclass ``own``), ``--help-all`` every option the script accepts (``full()``)."""
    if full is not None and HELP_ALL in argv:
        print(full())
        return True
    if not ({"-h", "--help"} & set(argv)):
        return False
    lines = [doc.strip(), "", "Options:", *extra, *_option_lines(dataclasses.fields(own))]
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
    return 0
