"""The supervised warm start on TRL's SFTTrainer: the teacher's rows (``training.sft_data``), built for the run's
tokenizer and reply budget or loaded, and the trainer watched as GRPO's is (``training.watch``), with validation games
every ``--game_eval_steps`` steps.

The loss is on the completion alone: TRL does that by itself for prompt/completion rows (``completion_only_loss``,
None: decided by the dataset), and the labels decode to the reply and the template's end of turn.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import datasets
from transformers import ProgressCallback, TrainerCallback
from trl import SFTTrainer, get_peft_config

from evaluation.play import ModelPlayer
from runtime import distributed
from runtime.device import memory_source
from settings.config import Resolved
from settings.errors import ConfigError
from training.rollout import GameCheck
from training.sft_data import Budget, BuildStats, build_sft_rows, check_budget, load_sft_dataset, save_sft_dataset
from training.watch import RunProgress, Watched
from wordle import spread, train_secrets

logger = logging.getLogger(__name__)

SFT_DATA = "sft_data"  # the built rows, in the output directory: --resume continues on the same rows


def data_dir(resolved: Resolved, out: Path) -> Path:
    return Path(resolved.script.dataset) if resolved.script.dataset else out / SFT_DATA


def supervised_rows(resolved: Resolved, out: Path, tokenizer: Any, resuming: bool) -> datasets.Dataset:
    """``--dataset``'s rows if the directory exists (or the run's own on --resume), else built for this tokenizer and
    reply budget and saved there; every reply checked against the budget."""
    script, seed = resolved.script, resolved.training.seed
    path = data_dir(resolved, out)
    budget = Budget(resolved.reply_budget)
    if path.exists() and (script.dataset or resuming):
        rows = load_sft_dataset(path)  # checked by plan() already, where the user named it
        logger.info("loaded %d supervised rows from %s", len(rows), path)
    else:
        built, stats = build_sft_rows(script.train_rows, seed, tokenizer, budget, progress=distributed.is_main())
        if distributed.is_main():
            save_sft_dataset(built, stats, path)
        distributed.barrier()
        log_build(stats, path)
        rows = datasets.Dataset.from_list(built)
    check_budget(rows, tokenizer, budget, str(path))
    return rows


def log_build(stats: BuildStats, path: Path) -> None:
    t = stats.reply_tokens
    logger.info(
        "built %d supervised rows (%d distinct states, sft secrets, seed %d) in %s: replies of %g tokens (median), "
        "%g (99th percentile), %d at most, of max_completion_length %d",
        stats.rows,
        stats.unique_states,
        stats.seed,
        path,
        t["p50"],
        t["p99"],
        t["max"],
        stats.budget,
    )


def check_sft_step(rows: int, args: Any, source: str) -> None:
    """ConfigError unless ``rows`` fill one optimizer step (the Trainer would otherwise take none, in silence)."""
    needed = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    if rows < needed:
        raise ConfigError(
            f"one step takes {needed} rows, and {source} has {rows}: add rows, or lower "
            "--per_device_train_batch_size or --gradient_accumulation_steps"
        )


class ModelCheck(GameCheck):
    """The periodic validation games of the supervised stage: its model plays, greedily, as ``evaluate.py`` plays it."""

    def player(self, trainer: Any) -> ModelPlayer:
        return ModelPlayer(trainer.model, trainer.processing_class, self.decoding)


class WordleSFTTrainer(Watched, SFTTrainer):
    """TRL's SFTTrainer, watched (``training.watch``), with each step's wall time and the periodic games."""

    def __init__(self, *args, check: GameCheck | None = None, check_steps: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.add_callback(_StepTime(self))
        self.remove_callback(ProgressCallback)
        if not self.args.disable_tqdm:
            self.add_callback(RunProgress(format_sft_log))
        self.watch_games(check, check_steps)


class _StepTime(TrainerCallback):
    """``step_time``: each optimizer step's wall time, averaged over a log's steps as TRL's own metrics are."""

    def __init__(self, trainer: SFTTrainer) -> None:
        self.trainer = trainer
        self.started: float | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self.started is not None:
            self.trainer._metrics["train"]["step_time"].append(time.perf_counter() - self.started)
            self.started = None


def format_sft_log(logs: dict[str, float], step: int, max_steps: int, device: str = "cpu") -> str | None:
    """One line per training log: the loss, how many reply tokens the model predicts right, the validation games'
    figures when played, the step's time and the peak memory of ``device``."""
    if "loss" not in logs:
        return None
    parts = [f"step {step}/{max_steps}", f"loss {logs['loss']:.3f}"]
    if "mean_token_accuracy" in logs:
        parts.append(f"reply tokens right {logs['mean_token_accuracy']:.3f}")
    if "learning_rate" in logs:
        parts.append(f"lr {logs['learning_rate']:.2e}")
    if "val/win_rate" in logs:
        check = [f"validation won {logs['val/win_rate']:.2f}"]
        check += [f"invalid {logs['val/invalid_rate']:.2f}"] if "val/invalid_rate" in logs else []
        check += [f"guesses {logs['val/guesses']:.2f}"] if "val/guesses" in logs else []
        parts.append(" ".join(check))
    if "step_time" in logs:
        parts.append(f"{logs['step_time']:.2f} s/step")
    if "peak_memory_mb" in logs:
        parts.append(f"peak {logs['peak_memory_mb']:.0f} MB {memory_source(device)}")
    return " | ".join(parts)


def make_sft_trainer(
    resolved: Resolved, model: Any, tokenizer: Any, rows: datasets.Dataset, callbacks: list
) -> WordleSFTTrainer:
    """TRL's SFTTrainer on the rows, a LoRA from ModelConfig (none with --use_peft false), and the periodic games."""
    script = resolved.script
    check = ModelCheck(spread(train_secrets("val"), script.game_eval_games), resolved.decoding, resolved.training.seed)
    return WordleSFTTrainer(
        model=model,
        args=resolved.training,
        train_dataset=rows,
        processing_class=tokenizer,
        peft_config=get_peft_config(resolved.model),
        check=check if script.game_eval_steps else None,
        check_steps=script.game_eval_steps,
        callbacks=callbacks,
    )
