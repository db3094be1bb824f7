"""The supervised warm start: a LoRA trained on the teacher's games (TRL's SFTTrainer), which GRPO then continues.

Every published Wordle-RL result that reports numbers warmed up on supervised games before RL. The teacher is the
project's own (wordle/teacher.py): among the answers still possible, the one of most expected information, with a
think that states what the feedback established, written to fit the GRPO stage's reply budget. Two commands per
profile (profiles/NAME.yaml, its sft: section; any field can be overridden on the command line):

    python sft_train.py --profile mps                              # writes outputs/mps-sft: a LoRA adapter
    python grpo_train.py --profile mps --adapter outputs/mps-sft    # GRPO continues that adapter
    python sft_train.py --profile cuda                             # 4-bit QLoRA: outputs/cuda-sft
    python sft_train.py --profile mps --dry-run                    # what it would do, its memory and steps

Useful flags: --max-completion 96 (thinks written for the smaller budget), --dataset DIR (rows to load, or to build
there), --train_rows N, --use_peft false (full fine-tuning), --resume, --game_eval_steps N (validation games).
"""

from __future__ import annotations

import runtime.quiet  # noqa: F401  first: it must precede any import of bitsandbytes (see its docstring)

# isort: split
import logging
import shlex
import sys

from trl import SFTConfig

from models.loading import load_model, load_tokenizer
from runtime import distributed
from runtime.device import MpsCacheCallback
from runtime.preemption import Interrupted, deferred, interruptible
from settings.arguments import SFTArguments
from settings.cli import brief, entry_main
from settings.config import SFT, Resolved, help_defaults, make_parser, resolve
from settings.errors import writing
from training.card import PortableCheckpoints, write_model_card
from training.data import check_reply_fits
from training.output import claimed
from training.phases import Phases
from training.rollback import RollbackAdvisor
from training.run import Plan, fit, log_memory_estimate, merge, plan, prepare, save, start
from training.sft import WordleSFTTrainer, data_dir, make_sft_trainer, supervised_rows

logger = logging.getLogger("sft_train")

# The SFTConfig fields that the README's commands use, shown by --help beside the script's own.
SFT_OPTIONS = {
    "output_dir": "where checkpoints, the adapter, the rows (sft_data/) and the resolved config are written",
    "num_train_epochs": "passes over the rows (max_steps, when positive, decides instead)",
    "learning_rate": "the LoRA learning rate",
    "per_device_train_batch_size": "rows per micro-batch",
    "gradient_accumulation_steps": "micro-batches per optimizer step",
    "seed": "seed of the rows and the training order: a run is repeatable in it",
    "report_to": "where to log: none, or trackio, tensorboard, wandb (several: comma-separated); docs/trackers.md",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return entry_main(
        argv,
        __doc__,
        SFTArguments,
        more=brief(SFTConfig, SFT_OPTIONS),
        full=lambda defaults: make_parser(defaults, stage=SFT).format_help(),
        defaults=lambda: help_defaults(argv, stage=SFT),
        body=lambda: start(resolve(argv, stage=SFT), train),
    )


def train(resolved: Resolved, run: Plan | None = None) -> WordleSFTTrainer | None:
    """The stage, in order: the tokenizer, the rows, the model, SFT, saving. None when ``output_dir`` already holds
    the finished stage (then only ``--merge`` has work to do)."""
    if run is None:
        distributed.setup(resolved.training)
        run = plan(resolved)
    if run.done:
        logger.info("the run in %s is complete: nothing to train", run.out)
        if resolved.script.merge and distributed.is_main():
            merge(resolved, run)
        return None
    phases = Phases(resolved, run.out)  # what a signal outside the steps says: the phase, what is on disk
    with claimed(run.out), interruptible(phases.line):
        return _train(resolved, run, phases)


def _train(resolved: Resolved, run: Plan, phases: Phases) -> WordleSFTTrainer:
    prepare(resolved, run)
    # The tokenizer first: the rows are written to fit the reply budget in its tokens.
    tokenizer = load_tokenizer(run.source, resolved)
    check_reply_fits(tokenizer, resolved.reply_budget)
    phases.now = "building the rows"
    with writing(run.out):
        rows = supervised_rows(resolved, run.out, tokenizer, resuming=bool(run.checkpoint))
    log_memory_estimate(resolved, run.source, tokenizer)
    phases.now = "loading the model"
    model = load_model(run.source, resolved)
    script = resolved.script
    callbacks = [
        distributed.RecordProcesses(),
        PortableCheckpoints(resolved.model.model_name_or_path),
        RollbackAdvisor.for_run(resolved),
        *([MpsCacheCallback(script.mps_empty_cache_steps)] if script.mps_empty_cache_steps else []),
    ]
    phases.now = "training"
    trainer = make_sft_trainer(resolved, model, tokenizer, rows, callbacks)
    with writing(run.out):
        fit(resolved, trainer, run)
    phases.now = "saving the adapter"  # a signal now waits for whole files
    with deferred() as signals, writing(run.out):
        save(resolved, run, trainer, tokenizer)
        if distributed.is_main() and resolved.model.use_peft:
            write_model_card(
                run.out,
                base_model=resolved.model.model_name_or_path,
                profile=script.profile,
                command=shlex.join(["python", "sft_train.py", *resolved.argv]),
                steps=trainer.state.global_step,
                supervised_rows=str(data_dir(resolved, run.out)),
            )
    phases.saved = True
    if signals:
        raise Interrupted(signals[0], phases.line(signals[0]))
    logger.info("next: python grpo_train.py --profile %s --adapter %s", script.profile, run.out)
    return trainer


if __name__ == "__main__":
    sys.exit(main())
