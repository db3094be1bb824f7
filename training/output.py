"""A run's output directory: its checkpoints (the newest whole one, what a finished run left), and its lock.

Never trains over an earlier run's checkpoints by accident, never past ``max_steps``, and never beside another live
run; ``training.run.plan`` asks these before anything slow runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from models.loading import damage
from runtime import distributed
from settings.arguments import CONFIG_FILE
from settings.checks import check_writable
from settings.config import Resolved
from settings.errors import ConfigError

logger = logging.getLogger(__name__)


@contextmanager
def claimed(out: Path) -> Iterator[None]:
    """The output directory locked for this run (a second run into it is refused), and on the way out, whatever
    happened, unlocked; a directory the run created and left empty is removed."""
    created = outermost_missing(out)  # the lock creates it and any missing parent
    lock = distributed.OutputLock(out)
    if distributed.is_main() and not lock.acquire():
        check_not_in_use(out)  # raises, naming the run that took it since plan()
    try:
        yield
    finally:
        lock.release()
        if created is not None and distributed.is_main():
            remove_empty(out, created)


def outermost_missing(out: Path) -> Path | None:
    """The outermost directory of ``out`` that does not exist yet (``outputs`` for a new ``outputs/cpu``)."""
    return next((p for p in [*reversed(out.parents), out] if not p.exists()), None)


def remove_empty(out: Path, top: Path) -> None:
    """Remove ``out`` and its parents up to ``top`` while they are empty: what a run created and left unused."""
    for directory in [out, *out.parents]:
        if not directory.is_dir() or any(directory.iterdir()):
            return
        directory.rmdir()
        if directory == top:
            return


def check_not_in_use(out: Path) -> None:
    """A second live run into the same directory would interleave checkpoints and files with the first."""
    pid = distributed.OutputLock(out).holder()
    if pid is not None:
        who = f"pid {pid}" if pid > 0 else "another process"
        raise ConfigError(
            f"{out} is in use by a live run ({who}): wait for it or stop it, or choose another --output_dir"
        )


TRAINER_STATE = "trainer_state.json"  # transformers writes it last of a checkpoint's files


def newest_checkpoint(out: Path) -> tuple[Path, int] | None:
    """The newest checkpoint that was completely written, and its step.

    transformers writes trainer_state.json last, so a run killed while saving (kill -9, power
    loss) leaves a newest directory without it; resuming from that one would fail.
    """
    checkpoints = [p for p in out.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    for path in sorted(checkpoints, key=lambda p: int(p.name.split("-")[-1]), reverse=True):
        try:
            state = json.loads((path / TRAINER_STATE).read_text())
        except (OSError, ValueError):
            logger.warning("skipping %s: it was not completely written (the run stopped while saving)", path)
            continue
        # A copy cut short, or a disk error: resuming would fail deep in torch's or safetensors' loader.
        broken = next(((f.name, why) for f in sorted(path.iterdir()) if (why := damage(f)) is not None), None)
        if broken is not None:
            logger.warning("skipping %s: its %s is damaged (%s)", path, *broken)
            continue
        return path, int(state.get("global_step", 0))
    return None


def check_output_dir(resolved: Resolved) -> tuple[Path, Path | None, bool]:
    """The output directory, the checkpoint to resume from, and whether training there is complete.

    Never trains over an earlier run's checkpoints by accident (that run would be lost), and never
    past ``max_steps`` (transformers would run one more step on a finished run's last checkpoint).
    """
    script, max_steps = resolved.script, resolved.training.max_steps
    out = Path(resolved.training.output_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output_dir {out} is a file, not a directory: choose another --output_dir")
    check_writable(out, "--output_dir")
    if distributed.is_main():  # another process finds the lock its own main process may have taken already
        check_not_in_use(out)
    newest = newest_checkpoint(out) if out.is_dir() else None
    saved = (out / "adapter_config.json").is_file() or (out / "model.safetensors").is_file()  # LoRA, or full
    finished = (out / CONFIG_FILE).is_file() and saved
    if finished:
        trained_on = trained_model(out / CONFIG_FILE)
        if trained_on != resolved.model.model_name_or_path:
            raise ConfigError(
                f"{out} holds a run of {trained_on}, not {resolved.model.model_name_or_path}: pass --model {trained_on}"
            )
    done = newest is not None and newest[1] >= max_steps > 0
    if script.merge and finished and (done or not script.resume):
        return out, None, True  # merge the finished run's adapter; train nothing
    if script.resume and newest is None:
        raise ConfigError(f"--resume: no complete checkpoint in {out}; run without --resume to start afresh")
    if not script.resume and newest is not None:
        if finished:
            hint = "pass --merge to merge its adapter, or --resume with a higher --max_steps"
        elif newest[1] == max_steps:
            hint = f"it reached max_steps ({max_steps}) but stopped before saving its adapter: pass --resume to save it"
        else:
            hint = "pass --resume to continue"
        raise ConfigError(
            f"{out} already holds checkpoints (newest {newest[0].name}); {hint}, or choose another --output_dir"
        )
    if done and not finished:  # --resume (asked for above): save its adapter and play the games after (fit)
        return out, newest[0], False
    return out, newest[0] if newest else None, done


def trained_model(config: Path) -> str:
    """The model a finished run in this directory trained, from its run configuration."""
    try:
        return yaml.safe_load(config.read_text())["model"]["name_or_path"]
    except (yaml.YAMLError, UnicodeDecodeError, TypeError, KeyError):
        raise ConfigError(
            f"{config} is not a run's configuration (no model section): restore it, or remove it and rerun with "
            "--resume to save the run again"
        ) from None
