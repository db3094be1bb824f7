"""A LoRA adapter that a run continues (``grpo_train.py --adapter``: the supervised stage's output): checked against
the base before anything loads, then loaded as trainable.

PEFT loads an adapter onto any base whose layers have its shapes, in silence: an adapter made for another model of
the same family would train as if it fitted. Every run records a fingerprint of its base (its config.json and
revision) in its run configuration; a base that gives another one is refused in one line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import yaml
from peft import PeftModel

from models.loading import checked_adapter_dir
from models.source import model_config
from settings.arguments import CONFIG_FILE
from settings.config import Resolved
from settings.errors import ConfigError

logger = logging.getLogger(__name__)

# What a save by another transformers, or a load in another dtype, writes differently into the same model's config.
_NOT_THE_MODEL = ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache")


def fingerprint(source: str, revision: str | None = None) -> str:
    """The base model's identity: a digest of its config.json (less what a re-save changes) and its revision."""
    config = {k: v for k, v in model_config(source, revision).items() if k not in _NOT_THE_MODEL}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    return digest if revision is None else f"{digest}@{revision}"


def recorded_base(adapter: Path) -> dict[str, Any] | None:
    """The base the adapter was trained on, as its run recorded it (in the adapter's directory, or for a checkpoint,
    in its run's): ``{"name_or_path": ..., "fingerprint": ...}``, or None where no run of this project made it."""
    for folder in (adapter, adapter.parent):
        path = folder / CONFIG_FILE
        if path.is_file():
            try:
                model = yaml.safe_load(path.read_text())["model"]
            except (yaml.YAMLError, UnicodeDecodeError, TypeError, KeyError):
                raise ConfigError(f"{path} is not a run's configuration (no model section): restore it") from None
            return model if isinstance(model, dict) else None
    return None


def check_adapter(adapter: str, source: str, resolved: Resolved) -> None:
    """ConfigError unless ``adapter`` is whole and was trained on the base ``source`` is."""
    path = checked_adapter_dir(adapter)
    record = recorded_base(path)
    if record is None or "fingerprint" not in record:
        logger.warning(
            "%s holds no record of the model it was trained on (not a run of this project): checked by its layers' "
            "shapes alone",
            adapter,
        )
        return
    mine = fingerprint(source, resolved.model.model_revision)
    if record["fingerprint"] != mine:
        raise ConfigError(
            f"the adapter in {adapter} was trained on {record['name_or_path']} (fingerprint {record['fingerprint']}), "
            f"and --model {resolved.model.model_name_or_path} is another model ({mine}): pass --model "
            f"{record['name_or_path']}, or an adapter trained on this one"
        )


def load_adapter(model: Any, adapter: str) -> PeftModel:
    """The adapter on ``model``, its LoRA trainable (as TRL takes a PeftModel: no second LoRA config)."""
    try:
        return PeftModel.from_pretrained(model, adapter, is_trainable=True)
    except RuntimeError as exc:  # torch's load_state_dict: the layers are another model's shape
        if "size mismatch" not in str(exc):
            raise
        first = re.search(
            r"size mismatch for ([^:]+): copying a param with shape (\S+) from checkpoint, "
            r"the shape in current model is (\S+)",
            str(exc),
        )
        what = f"{first[1]} is {first[2]} in the adapter, {first[3]} in the model" if first else "shapes differ"
        raise ConfigError(
            f"the adapter in {adapter} does not fit this model's layers ({what}): pass the model it was trained on"
        ) from None
