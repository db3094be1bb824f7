"""What the two entry scripts share: ``--help`` that fits a screen, and user errors as one line.

A user error is a :class:`~settings.config.ConfigError`: it is printed as ``error: ...`` on stderr
with exit code 2, never as a traceback; stdout stays empty.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import sys
import textwrap
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import transformers
from rich.console import Console
from rich.logging import RichHandler
from tqdm import tqdm

from runtime.preemption import Interrupted
from settings.arguments import DASHED
from settings.errors import ConfigError, Stopped, disk_full_line, is_disk_full

HELP_ALL = "--help-all"


def shown(value: Any) -> str:
    """A default as it would be typed on the command line: ``game``, ``own answer``, ``false``, ``1e-05``."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (list, tuple)):
        return " ".join(shown(v) for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


@dataclass
class HelpDefaults:
    """The defaults that help shows: the profile's values (with its embedded-model section when the model is
    the embedded one) and ``--config``'s, over TRL's; ``profile_keys`` are the ones the profile sets."""

    profile: str
    values: dict[str, Any]
    profile_keys: set[str]
    header: str

    def note(self, name: str, value: Any) -> str | None:
        """``(default: X)``, naming the profile when it set X; None for a default of None (nothing set)."""
        if value is None:
            return None
        source = f", from profile {self.profile}" if name in self.profile_keys else ""
        return f"(default: {shown(value)}{source})"


NO_PROFILE = HelpDefaults("", {}, set(), "")  # a script without profiles: each field's own default


def _option_lines(fields: Sequence[Any], defaults: HelpDefaults, dashed: Sequence[str], width: int = 100) -> list[str]:
    """Each field with its default worded by ``defaults.note``, as ``--help-all``'s formatter does."""
    lines = []
    for f in fields:
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        text = f.metadata.get("help", "")
        note = defaults.note(f.name, defaults.values.get(f.name, default))
        if note is not None and "(default:" not in text:  # a help text may say the default in its own words
            text += f" {note}"
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
    full: Callable[[Any], str] | None = None,
    more: Sequence[Any] = (),
    defaults: Callable[[], Any] | None = None,
    dashed: Sequence[str] = (),
) -> bool:
    """Print help and return True when asked: ``--help`` shows the script's docstring, its own options (the
    dataclass ``own``, then the ``more`` fields), ``--help-all`` every option the script accepts
    (``full(defaults)``). ``defaults()`` is the profile's (``settings.config.help_defaults``): both show the
    same default for a field, and say when the profile set it. The ``dashed`` fields show as ``--dry-run``."""
    asked_all = full is not None and HELP_ALL in argv
    if not asked_all and not ({"-h", "--help"} & set(argv)):
        return False
    given = defaults() if defaults else None
    header = [given.header, ""] if given else []
    if asked_all:
        print("\n".join([*header, full(given)]))
        return True
    options = [*dataclasses.fields(own), *more]
    lines = [doc.strip(), "", *header, "Options:", *extra, *_option_lines(options, given or NO_PROFILE, dashed)]
    if full is not None:
        lines += ["", f"{HELP_ALL}: every option, including each TRL GRPOConfig and ModelConfig field."]
    print("\n".join(lines))
    return True


CONFIG_LINE = "  --config FILE             a YAML file of any options, between the profile and the command line"


def entry_main(
    argv: Sequence[str],
    doc: str,
    own: type,
    more: Sequence[Any],
    full: Callable[[Any], str],
    defaults: Callable[[], Any],
    body: Callable[[], object],
) -> int:
    """An entry script's main: its help when asked (the profile's defaults read, so a bad profile is the same one-line
    error as in a run), else the logging set up and ``body`` run under :func:`run_cli`."""
    asked = []
    code = run_cli(
        lambda: asked.append(
            help_requested(argv, doc, own, [CONFIG_LINE], full=full, more=more, defaults=defaults, dashed=DASHED)
        )
    )
    if code or asked[0]:
        return code
    setup_logging()
    return run_cli(body)


def run_cli(body: Callable[[], object], then: str = "rerun with --resume") -> int:
    """Run ``body()``: exit code 0, or 2 with one ``error:`` line on stderr for a user error. ``then``: what to do
    once space is back, when a write found the disk full."""
    try:
        body()
    except ConfigError as exc:
        last_line(f"error: {exc}")
        return 2
    except (Stopped, Interrupted) as exc:
        last_line(f"stopped: {exc}")
        return exc.code
    except Exception as exc:  # any other write that ran out of space, whichever library raised it
        if not is_disk_full(exc):
            raise
        last_line(f"error: {disk_full_line(exc, None, then)}")
        return 2
    return 0


def last_line(line: str) -> None:
    """``line`` on stderr, on a line of its own and the last one there: every progress bar still drawn (the
    training's, left open by the error that ends it) is closed first, which ends its line and stops it being drawn
    again below."""
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()
    sys.stderr.flush()
    print(line, file=sys.stderr, flush=True)


def setup_logging() -> None:
    # Logs go to stderr: stdout holds only what a run produces (the --dry-run YAML, the results table).
    handler = RichHandler(console=Console(stderr=True), show_path=False)
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[handler], force=True)
    transformers.utils.logging.set_verbosity_warning()
    # Deprecations inside transformers/TRL that this project cannot act on, named one by one.
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
