"""The resolved configuration as a reader checks it: what ``--dry-run`` prints and a run saves.

``summary()`` orders it as a reader checks a run (profile, device, model, precision, quantization,
LoRA, batch, rollout, generation, memory, rewards, evaluation), then lists every field that differs
from TRL's defaults; ``to_yaml()`` is what ``wordle_grpo_config.yaml`` holds, and what
``evaluate.py --adapter`` reads back.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from trl import GRPOConfig

from runtime import device as devices
from runtime import distributed
from settings.arguments import SLOTS, TINY, ScriptArguments
from settings.config import SFT, Resolved, plain
from settings.game import lone_turns_expected
from wordle import EVAL_SIZE
from wordle.openings import Opening

# How evaluate.py --adapter plays a supervised adapter: from every opening the rows came from.
SFT_OPENINGS = ("own", "answer", "allowed", "answer:2")


def precision(training: GRPOConfig) -> str:
    return "bf16 mixed" if training.bf16 else "fp16 mixed" if training.fp16 else "fp32"


def _quantization(m) -> Any:
    quant: Any = "none"
    if m.load_in_4bit:
        quant = {
            "bits": 4,
            "type": m.bnb_4bit_quant_type,
            "double_quant": m.use_bnb_nested_quant,
            "compute_dtype": m.dtype,
            "library": "bitsandbytes",
        }
    elif m.load_in_8bit:
        quant = {"bits": 8, "library": "bitsandbytes"}
    return quant


def _common(resolved: Resolved) -> dict[str, Any]:
    """What both stages say first: profile, device, model, precision, quantization and LoRA."""
    s, t, m = resolved.script, resolved.training, resolved.model
    return {
        "stage": resolved.stage.name,
        "profile": s.profile,
        "device": {"target": s.device, "present": devices.has_device(s.device)},
        "model": {
            "name_or_path": m.model_name_or_path,
            "embedded": m.model_name_or_path == TINY,
            "dtype": m.dtype,
            "trust_remote_code": t.trust_remote_code,
        },
        "precision": precision(t),
        "quantization": _quantization(m),
        "lora": (
            {
                "r": m.lora_r,
                "alpha": m.lora_alpha,
                "dropout": m.lora_dropout,
                "target_modules": m.lora_target_modules,
                **({"continues": s.adapter} if getattr(s, "adapter", None) else {}),
            }
            if m.use_peft
            else "off (full fine-tuning)"
        ),
    }


def summary(resolved: Resolved) -> dict[str, Any]:
    """What the run will do, in the order a reader checks it, then every field that differs from TRL."""
    if resolved.stage is SFT:
        return _sft_summary(resolved)
    s, t = resolved.script, resolved.training
    record = distributed.processes_record(t)  # a --dry-run --world_size N config counts N processes
    world, completions = record["processes"], record["effective_batch"]
    return {
        **_common(resolved),
        "batch": {
            "per_device_train_batch_size": t.per_device_train_batch_size,
            "gradient_accumulation_steps": t.gradient_accumulation_steps,
            "processes": world,
            "num_generations": t.num_generations,
            "effective_completions_per_step": completions,
            "effective_prompts_per_step": completions // t.num_generations,
            "generation_batch_size": t.generation_batch_size,
            "steps_per_generation": t.steps_per_generation,
        },
        "rollout": _rollout_summary(s, completions, t.num_generations),
        "generation": {
            "max_completion_length": t.max_completion_length,
            "temperature": t.temperature,
            "use_vllm": t.use_vllm,
        },
        "memory": {
            "gradient_checkpointing": bool(t.gradient_checkpointing),
            "optimizer": plain(t.optim),
            "mps_empty_cache_steps": s.mps_empty_cache_steps,
        },
        "rewards": resolved.weights,
        "secrets": s.secrets,
        # What evaluate.py --adapter OUTPUT_DIR reads back, so that it replays the run's own evaluation.
        "evaluation": {"before_and_after": not s.skip_eval, **eval_settings(resolved)},
        "notes": resolved.notes,
        **resolved.changed,
    }


def supervised_steps(resolved: Resolved, rows: int | None = None) -> int:
    """The optimizer steps the supervised stage takes: ``max_steps``, or its epochs over the rows, counted as the
    Trainer counts them (a last short batch, and a last short accumulation, are steps too)."""
    t = resolved.training
    if t.max_steps > 0:
        return t.max_steps
    world = distributed.processes_record(t)["processes"]
    rows = resolved.script.train_rows if rows is None else rows
    batches = math.ceil(rows / (t.per_device_train_batch_size * world))
    return max(1, math.ceil(t.num_train_epochs * math.ceil(batches / t.gradient_accumulation_steps)))


def _sft_summary(resolved: Resolved) -> dict[str, Any]:
    s, t = resolved.script, resolved.training
    world = distributed.processes_record(t)["processes"]
    per_step = t.per_device_train_batch_size * t.gradient_accumulation_steps * world
    return {
        **_common(resolved),
        "batch": {
            "per_device_train_batch_size": t.per_device_train_batch_size,
            "gradient_accumulation_steps": t.gradient_accumulation_steps,
            "processes": world,
            "rows_per_step": per_step,
        },
        "data": {
            "rows": s.train_rows if not s.dataset else f"those of {s.dataset}",
            "dataset": s.dataset or f"built into {t.output_dir}/sft_data",
            "secrets": "sft (GRPO with --adapter plays rl)",
            "reply_budget": f"{resolved.reply_budget} tokens (the GRPO stage's max_completion_length)",
            "loss": "on the completion alone (TRL's completion_only_loss for prompt/completion rows)",
        },
        "schedule": {
            "epochs": t.num_train_epochs if t.max_steps <= 0 else None,
            "steps": supervised_steps(resolved),
            "learning_rate": t.learning_rate,
            "lr_scheduler": plain(t.lr_scheduler_type),
            "warmup_steps": t.warmup_steps,
            "save_steps": t.save_steps,
        },
        "memory": {
            "gradient_checkpointing": bool(t.gradient_checkpointing),
            "optimizer": plain(t.optim),
            "mps_empty_cache_steps": s.mps_empty_cache_steps,
        },
        "validation_games": (
            f"every {s.game_eval_steps} steps, {s.game_eval_games} validation secrets, greedy, from its own opening "
            "and from a random answer"
            if s.game_eval_steps
            else "off"
        ),
        "evaluation": eval_settings(resolved),
        "next": f"python grpo_train.py --profile {s.profile} --adapter {t.output_dir}",
        "notes": resolved.notes,
        **resolved.changed,
    }


def _rollout_summary(script: ScriptArguments, samples: int, generations: int) -> dict[str, Any]:
    if not script.rollout.plays_games:
        return {
            "mode": script.rollout.value,
            "completions_per_step": samples,
            "states_per_step": samples // generations,
        }
    return {
        "mode": script.rollout.value,
        "games_per_step": samples // SLOTS,
        "start_states_per_step": samples // (SLOTS * generations),
        "games_per_start_state": generations,
        "samples_per_step": samples,
        "start_states": f"{script.game_openings:.0%} from one or two random guesses, the rest from its own opening",
        "sample_layout": f"{SLOTS} turn slots x {generations} games per start state; a slot after its game ended "
        "is a masked placeholder whose rewards are all None",
        "lone_turns_expected": f"{lone_turns_expected(generations):.0%} of the turns after the first are their slot's "
        "only live game (advantage 0, no signal), for games as long as the embedded model's start plays them",
        "game_check": (
            f"every {script.game_eval_steps} steps, {script.game_eval_games} validation secrets, greedy, from its "
            "own opening and from a random answer"
            if script.game_eval_steps
            else "off"
        ),
    }


def eval_settings(resolved: Resolved) -> dict[str, Any]:
    """How the run plays its evaluation games: saved with them (a saved before.json is reused on
    --resume only if they match) and in the resolved YAML, which evaluate.py --adapter reads back."""
    decoding = resolved.decoding
    return {
        "model": resolved.model.model_name_or_path,
        "games": getattr(resolved.script, "eval_games", EVAL_SIZE),
        "decoding": decoding.describe(),
        "max_new_tokens": decoding.max_new_tokens,
        "seed": decoding.seed,
        "openings": [Opening.parse(spec).spec for spec in getattr(resolved.script, "eval_openings", SFT_OPENINGS)],
        **({"adapter": resolved.script.adapter} if getattr(resolved.script, "adapter", None) else {}),
    }


def to_yaml(resolved: Resolved) -> str:
    return yaml.safe_dump(summary(resolved), sort_keys=False, allow_unicode=True, width=120)
