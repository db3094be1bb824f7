"""What a run was trained with, written into each checkpoint and beside the final adapter (``wordle_grpo_config.yaml``:
the resolved configuration and the base model's fingerprint), and the check that a ``--resume`` still fits it.

A setting that changes the weights or what they mean (the model, LoRA's rank, alpha and targets, 4-bit, the stage,
the rollout mode, the adapter continued) cannot change on ``--resume``: the checkpoint's weights would load into
another shape with a torch traceback, or train on as something they are not. It is refused in one line before
anything slow. A setting that may change (max_steps, the learning rate, logging, save_steps) is allowed, and a
note lists what changed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainerCallback

from models.adapter import fingerprint
from settings.arguments import CONFIG_FILE
from settings.config import Resolved
from settings.errors import ConfigError
from settings.summary import summary

logger = logging.getLogger(__name__)


def run_record(resolved: Resolved, source: str) -> dict[str, Any]:
    """The resolved configuration, with the base model's fingerprint (``grpo_train.py --adapter`` checks it too)."""
    record = summary(resolved)
    record["model"]["fingerprint"] = fingerprint(source, resolved.model.model_revision)
    return record


def write_record(record: dict[str, Any], folder: Path) -> None:
    (folder / CONFIG_FILE).write_text(yaml.safe_dump(record, sort_keys=False, allow_unicode=True, width=120))


class RecordInCheckpoints(TrainerCallback):
    """Each checkpoint holds the run's record, so that ``--resume`` can compare what it asks for with it."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                write_record(self.record, folder)
        return control


def _lora(record: dict[str, Any], key: str) -> Any:
    lora = record.get("lora")
    if not isinstance(lora, dict):
        return "off (full fine-tuning)"
    value = lora.get(key)
    return sorted(value) if isinstance(value, list) else value


# (the setting as the line names it, how to read it from a record, the flags that set it)
FIXED = (
    ("the stage", lambda r: r.get("stage", "grpo"), ()),
    ("the model", lambda r: r["model"]["name_or_path"], ("--model", "--model_name_or_path")),
    ("the model's fingerprint", lambda r: r["model"].get("fingerprint"), ("--model_revision",)),
    ("LoRA's rank", lambda r: _lora(r, "r"), ("--lora_r", "--use_peft")),
    ("LoRA's alpha", lambda r: _lora(r, "alpha"), ("--lora_alpha",)),
    ("LoRA's targets", lambda r: _lora(r, "target_modules"), ("--lora_target_modules",)),
    ("the adapter it continues", lambda r: _lora(r, "continues"), ("--adapter",)),
    ("quantization", lambda r: r.get("quantization"), ("--load_in_4bit", "--no-4bit", "--load_in_8bit")),
    ("the rollout mode", lambda r: (r.get("rollout") or {}).get("mode"), ("--rollout",)),
)
# Settings that differ on every resume, or only say how this command was typed.
_SAME_RUN = {"resume", "dry_run", "world_size"}


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_shown(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def check_resume_fits(resolved: Resolved, source: str, checkpoint: Path) -> list[str]:
    """ConfigError when ``checkpoint`` was trained with another value of a setting in ``FIXED``; else the settings that
    changed, as ``name old -> new`` (nothing where the checkpoint holds no record: one saved before records were)."""
    path = checkpoint / CONFIG_FILE
    if not path.is_file():
        return []
    try:
        saved = yaml.safe_load(path.read_text())
        saved["model"]["name_or_path"]
    except (yaml.YAMLError, UnicodeDecodeError, TypeError, KeyError):
        raise ConfigError(f"{path} is not a run's configuration (no model section): restore it") from None
    asked = run_record(resolved, source)
    flags = [a.split("=")[0] for a in resolved.argv if a.startswith("--")]
    for what, read, setters in FIXED:
        before, now = read(saved), read(asked)
        if before == now:
            continue
        given = next((f for f in flags if f in setters), None)
        how = f"drop {given}, or start a new --output_dir" if given else "start a new --output_dir"
        raise ConfigError(
            f"--resume: {checkpoint.name} in {checkpoint.parent} was trained with {what} {_shown(before)}, and this "
            f"run asks for {_shown(now)}: {how}"
        )
    changed = []
    for section in [s for s in saved if s.endswith("_config") or s == "script"]:
        old, new = saved.get(section) or {}, asked.get(section) or {}
        for key in sorted(set(old) | set(new)):
            if key not in _SAME_RUN and old.get(key) != new.get(key):
                changed.append(f"{key} {_shown(old.get(key, 'default'))} -> {_shown(new.get(key, 'default'))}")
    return changed
