"""What the two stages need of the settings: the supervised stage a model that can write the teacher's think, and GRPO
continuing an adapter (``--adapter DIR``) its LoRA settings, read from the adapter itself.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from settings.arguments import TINY, RunArguments, ScriptArguments
from settings.errors import ConfigError

ADAPTER_CONFIG = "adapter_config.json"
# ModelConfig's LoRA fields and the adapter_config.json keys they become.
LORA_KEYS = {
    "lora_r": "r",
    "lora_alpha": "lora_alpha",
    "lora_dropout": "lora_dropout",
    "lora_target_modules": "target_modules",
    "use_rslora": "use_rslora",
}


def read_adapter_config(adapter: str) -> dict[str, Any]:
    """``--adapter``'s adapter_config.json; ConfigError when the directory is no LoRA adapter."""
    path = Path(adapter).expanduser()
    if not path.is_dir():
        raise ConfigError(f"--adapter {adapter} does not exist: pass the output_dir of sft_train.py")
    config_file = path / ADAPTER_CONFIG
    if not config_file.is_file():
        raise ConfigError(f"--adapter {adapter} has no {ADAPTER_CONFIG}: it is not a LoRA adapter")
    try:
        config = json.loads(config_file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(f"{config_file} is not valid JSON: a damaged copy or an unfinished save?") from None
    kind = config.get("peft_type") if isinstance(config, dict) else f"JSON {type(config).__name__}"
    if kind != "LORA":
        raise ConfigError(f"--adapter {adapter} holds a {kind} adapter, not a LoRA")
    return config


def _as_set(value: Any) -> set[str]:
    return {value} if isinstance(value, str) else set(value or ())


def _same(key: str, asked: Any, saved: Any) -> bool:
    if key == "lora_target_modules":
        return _as_set(asked) == _as_set(saved)
    if isinstance(saved, float) or isinstance(asked, float):
        return math.isclose(float(asked or 0), float(saved or 0))
    return asked == saved


def continue_adapter(
    script: ScriptArguments, model_kw: dict[str, Any], notes: list[str], flags: frozenset[str], given: frozenset[str]
) -> None:
    """``--adapter DIR``: GRPO continues a LoRA adapter (sft_train.py's), so the LoRA settings are the adapter's. A LoRA
    flag given on the command line that contradicts the adapter is refused; the profile's and --config's values give
    way, with a note. The supervised stage learnt from the ``sft`` secrets: GRPO plays ``rl`` unless told otherwise,
    as the embedded model does, and for the same reason (wordle/words.py)."""
    if script.adapter is None:
        return
    config = read_adapter_config(script.adapter)
    if not model_kw.get("use_peft"):
        if "use_peft" in flags:
            raise ConfigError(
                "--adapter continues a LoRA adapter and --use_peft false trains the whole model: drop one"
            )
        model_kw["use_peft"] = True
    for key, saved in LORA_KEYS.items():
        value = config.get(saved)
        if key in flags and not _same(key, model_kw.get(key), value):
            shown = ",".join(sorted(value)) if key == "lora_target_modules" else value
            asked = model_kw.get(key)
            asked = ",".join(asked) if isinstance(asked, (list, tuple)) else asked
            raise ConfigError(
                f"--{key} {asked} contradicts the adapter in {script.adapter} ({saved} {shown}): drop --{key}, GRPO "
                "continues the adapter as it was trained"
            )
        model_kw[key] = sorted(value) if key == "lora_target_modules" else value
    notes.append(
        f"--adapter {script.adapter}: GRPO continues its LoRA (r {config['r']}, alpha {config['lora_alpha']}, "
        f"{', '.join(sorted(config['target_modules']))}); the profile's LoRA settings give way"
    )
    if script.secrets == "all" and "secrets" not in given:
        script.secrets = "rl"
        notes.append("--adapter: GRPO plays the rl secrets, which the supervised stage never saw (wordle/words.py)")


def supervised(script: RunArguments, model_kw: dict[str, Any]) -> None:
    """What the supervised stage needs: a model whose tokenizer can write the teacher's think."""
    if model_kw.get("model_name_or_path") == TINY:
        raise ConfigError(
            "the embedded model has its own supervised build (python -m tinymodel), and its tokenizer cannot write "
            "the teacher's think: pass --model PATH or a hub id"
        )
