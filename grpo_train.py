"""Train a LoRA adapter that plays Wordle by reasoning, with GRPO (TRL). The one entry point.

One command per profile (profiles/NAME.yaml; any field can be overridden on the command line):

    python grpo_train.py --profile cpu               # any machine, offline: the embedded tiny model, minutes
    python grpo_train.py --profile mps               # Apple Silicon: Qwen2.5-3B-Instruct + LoRA, fp32
    python grpo_train.py --profile cuda              # NVIDIA: Qwen2.5-3B-Instruct, 4-bit NF4 QLoRA
    python grpo_train.py --profile rocm              # AMD under ROCm: bf16 LoRA, no bitsandbytes
    python grpo_train.py --profile auto --dry-run    # what a run here would do, as YAML, without loading anything

Useful flags: --max-completion 96 (memory is short), --no-4bit (no bitsandbytes), --resume (after an
interruption), --model PATH_OR_HUB_ID, --config my.yaml (between the profile and the command line),
--merge (also write a merged model), --dataset rows.jsonl.
"""

from __future__ import annotations

import runtime.quiet  # noqa: F401  first: it must precede any import of bitsandbytes (see its docstring)

# isort: split
import logging
import shlex
import sys

import datasets
from trl import GRPOConfig, get_peft_config

from evaluation.vllm_backend import allowed_token_ids
from models.adapter import load_adapter
from models.loading import load_model, load_tokenizer
from rewards import get_reward_funcs
from runtime import distributed
from runtime.device import MpsCacheCallback
from runtime.preemption import Interrupted, deferred, interruptible
from settings.arguments import ScriptArguments
from settings.cli import brief, entry_main
from settings.config import Resolved, help_defaults, make_parser, resolve
from settings.errors import writing
from training.before_after import card_evaluation, evaluate_end, evaluate_start
from training.card import PortableCheckpoints, write_model_card
from training.data import check_reply_fits
from training.output import claimed
from training.phases import Phases
from training.rollback import RollbackAdvisor
from training.rollout import GameCheck, GameRollout
from training.run import Plan, dataset, fit, log_memory_estimate, merge, plan, prepare, save, start
from training.trainer import WordleGRPOTrainer
from wordle import spread, train_secrets

logger = logging.getLogger("grpo_train")


# --- parse: the help, then the arguments ---------------------------------------------------------------

# The TRL fields that the README's commands use, shown by --help beside the script's own.
TRL_OPTIONS = {
    "output_dir": "where checkpoints, the adapter, eval/ and the resolved config are written",
    "max_steps": "GRPO steps to train",
    "save_steps": "save a checkpoint (for --resume) every N steps",
    "learning_rate": "the LoRA learning rate",
    "seed": "seed of the data, sampling and evaluation: a run is repeatable in it",
    "report_to": "where to log: none, or trackio, tensorboard, wandb (several: comma-separated); docs/trackers.md",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return entry_main(
        argv,
        __doc__,
        ScriptArguments,
        more=brief(GRPOConfig, TRL_OPTIONS),
        full=lambda defaults: make_parser(defaults).format_help(),
        defaults=lambda: help_defaults(argv),
        body=lambda: start(resolve(argv), train),
    )


# --- the run: load, data, evaluate, trainer, train, save, evaluate ------------------------------------------


def train(resolved: Resolved, run: Plan | None = None) -> WordleGRPOTrainer | None:
    """The run, in order: model, data, the evaluation before, GRPO, saving, the evaluation after.

    None when ``output_dir`` already holds the finished run (then only ``--merge`` has work to do).
    """
    if run is None:  # _main set up the processes before its plan()
        distributed.setup(resolved.training)
        run = plan(resolved)
    if run.done:
        logger.info("the run in %s is complete (max_steps %d): nothing to train", run.out, resolved.training.max_steps)
        if resolved.script.merge and distributed.is_main():
            merge(resolved, run)
        return None
    phases = Phases(resolved, run.out)  # what a signal outside the steps says: the phase, what is on disk
    with claimed(run.out), interruptible(phases.line):  # a run stopped before writing anything leaves no directory
        return _train(resolved, run, phases)


def _train(resolved: Resolved, run: Plan, phases: Phases) -> WordleGRPOTrainer:
    prepare(resolved, run)
    # Load: the tokenizer first, so that a reply limit it cannot hold fails before the weights load.
    # With --adapter, the tokenizer saved beside it: the one the supervised stage trained with.
    tokenizer = load_tokenizer(resolved.script.adapter or run.source, resolved)
    check_reply_fits(tokenizer, resolved.training.max_completion_length)
    log_memory_estimate(resolved, run.source, tokenizer)
    model = load_model(run.source, resolved)
    if resolved.script.adapter:  # the supervised warm start's LoRA, trainable: GRPO continues it
        model = load_adapter(model, resolved.script.adapter)
    # Data: game states (or start states) rendered by wordle/, with prompts that fit beside a reply.
    phases.now = "building the training rows"
    train_dataset = dataset(resolved, run, model, tokenizer)
    # Evaluate: full games on the held-out secrets before training, to compare with after (reused on --resume).
    phases.now = "playing the games before training"
    skip = resolved.script.skip_eval
    before = None if skip else evaluate_start(resolved, model, tokenizer, run.out, resuming=bool(run.checkpoint))
    # Trainer, train, save: a signal during the save waits for whole files.
    phases.now = "training"
    trainer = make_trainer(resolved, model, tokenizer, train_dataset)
    with writing(run.out):  # a full disk in a checkpoint or the trackers' files: the checkpoints stay whole
        health = fit(resolved, trainer, run)
    phases.now = "saving the adapter"
    with deferred() as signals, writing(run.out):
        save(resolved, run, trainer, tokenizer)
    phases.saved = True
    if signals:
        raise Interrupted(signals[0], phases.line(signals[0]))
    phases.now = "playing the games after training"
    # Evaluate again: the before/after tables and plots, then the adapter's card that shows them. The adapter is
    # saved by now: a disk that fills here costs the evaluation alone, which evaluate.py plays again.
    again = f"python evaluate.py --adapter {run.out} --out {run.out / 'eval'} (the adapter is saved)"
    with writing(run.out / "eval", then=again):
        results = None if before is None else evaluate_end(resolved, trainer, tokenizer, run.out, before)
        if not distributed.is_main() or not resolved.model.use_peft:  # the card describes an adapter
            return trainer
        write_model_card(
            run.out,
            base_model=resolved.model.model_name_or_path,
            profile=resolved.script.profile,
            command=shlex.join(["python", "grpo_train.py", *resolved.argv]),
            rewards=resolved.weights,
            steps=trainer.state.global_step,
            eval_markdown_table=None if results is None else card_evaluation(results),
            warning=None if health.collapsed_at is None else health.describe(),
            continues=resolved.script.adapter,
        )
    if health.collapsed_at is not None:  # --stop_on_collapse false: trained on, and said so at the end too
        logger.warning("this run collapsed, and its adapter is what the collapse left: %s", health.describe())
    return trainer


def generation_mask(generation_config, tokenizer, use_vllm: bool) -> dict:
    """The generation kwargs that keep TRL from sampling what the model's generation config suppresses.

    TRL builds its sampling settings from ``generation_kwargs`` alone, and both evaluation backends honour the
    model's own list (evaluation.play.ModelPlayer, evaluation.vllm_backend.VLLMPlayer): training samples as it
    will be judged. vLLM's SamplingParams take the same mask as an allow list."""
    suppress = getattr(generation_config, "suppress_tokens", None)
    if not suppress:
        return {}
    if use_vllm:
        return {"allowed_token_ids": allowed_token_ids(generation_config, tokenizer)}
    return {"suppress_tokens": list(suppress)}


def make_trainer(resolved: Resolved, model, tokenizer, train_dataset: datasets.Dataset) -> WordleGRPOTrainer:
    """TRL's GRPOTrainer with the project's rollout (game mode), periodic validation games and callbacks."""
    script = resolved.script
    if mask := generation_mask(model.generation_config, tokenizer, resolved.training.use_vllm):
        resolved.training.generation_kwargs = {**mask, **(resolved.training.generation_kwargs or {})}
    n_check = script.game_eval_games
    check = GameCheck(spread(train_secrets("val"), n_check), resolved.decoding, resolved.training.seed)
    return WordleGRPOTrainer(
        rollout=GameRollout() if script.rollout.plays_games else None,
        check=check if script.game_eval_steps else None,
        check_steps=script.game_eval_steps,
        merged_generation=script.merged_generation,
        model=model,
        reward_funcs=get_reward_funcs(script.rewards),
        args=resolved.training,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=None if script.adapter else get_peft_config(resolved.model),
        callbacks=[
            distributed.RecordProcesses(),
            PortableCheckpoints(resolved.model.model_name_or_path),
            RollbackAdvisor.for_run(resolved),
            *([MpsCacheCallback(script.mps_empty_cache_steps)] if script.mps_empty_cache_steps else []),
        ],
    )


if __name__ == "__main__":
    sys.exit(main())
