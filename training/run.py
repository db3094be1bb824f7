"""The run around GRPO: every input checked before anything slow (``plan``), the training rows, the
output directory's checkpoints and lock, the fit with its out-of-memory advice, and what is saved.

``grpo_train.py`` calls these in order; each raises ``ConfigError`` for what a user can fix.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
import yaml
from transformers import Trainer

from models import memory
from models.adapter import check_adapter
from models.cost import expected_time
from models.loading import (
    check_bitsandbytes,
    find_tokenizer,
    folds_system,
    merge_adapter,
    reloadable_vllm_cpu_weights,
)
from models.source import model_source
from runtime import distributed
from runtime.preemption import StopOnSignal
from settings.arguments import CONFIG_FILE
from settings.checks import VLLM_CPU_KV_DEFAULT, VLLM_CPU_KV_ENV, check_cache_dir
from settings.config import SFT, Resolved
from settings.errors import ConfigError, Stopped, writing
from settings.summary import to_yaml
from training.card import make_adapter_config_portable
from training.data import (
    build_rows,
    check_rows_fill_a_step,
    drop_long_prompts,
    game_starts,
    held_out_rows,
    load_rows,
    save_rows,
)
from training.health import Health, set_aside
from training.output import TRAINER_STATE, check_output_dir, newest_checkpoint
from training.preview import signal_preview
from training.record import RecordInCheckpoints, check_resume_fits, run_record, write_record
from training.rollback import RollbackAdvisor
from training.sft import check_sft_step
from training.sft_data import load_sft_dataset
from training.trackers import name_the_run, offline_wandb_unless_logged_in
from wordle import train_secrets

logger = logging.getLogger(__name__)

ROWS_FILE = "train_rows.jsonl"


@dataclass
class Plan:
    """What a run will do, decided from its inputs before anything slow runs or anything is written."""

    source: str  # where the model loads from: the embedded model's directory, a local directory or a hub id
    out: Path
    checkpoint: Path | None  # the checkpoint to resume from
    rows: list[dict] | None  # --dataset's rows, validated; None: built (or reloaded on --resume) later
    done: bool = False  # output_dir holds a run that reached max_steps: nothing to train


def plan(resolved: Resolved) -> Plan:
    """Every input checked in the order a user would fix them: the model, the libraries a setting
    needs, the adapter to continue, the dataset, then the output directory. Raises ConfigError on the first problem."""
    script = resolved.script
    check_cache_dir()
    source = model_source(resolved.model.model_name_or_path)
    check_bitsandbytes(resolved)
    if resolved.stage is SFT:
        check_supervised_rows(resolved)
        return _with_output_dir(resolved, source, None)
    if resolved.training.use_vllm and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            'use_vllm needs vLLM, which is not installed: pip install -e ".[vllm]" (CPU: docs/several-gpus.md), or --use_vllm false'
        )
    if script.adapter is not None:
        check_adapter(script.adapter, source, resolved)
    rows = None
    if script.dataset and Path(script.dataset).exists():
        try:
            rows = load_rows(script.dataset)
        except ValueError as exc:
            raise ConfigError(f"dataset {script.dataset}: {exc}") from None
    game = script.rollout.plays_games
    # --dataset's rows, else the rows this run builds: a start state per training secret, or --train_rows states
    built = len(train_secrets(script.secrets)) if game else script.train_rows
    check_rows_fill_a_step(built if rows is None else len(rows), resolved.training, game, script.dataset or None)
    return _with_output_dir(resolved, source, rows)


def _with_output_dir(resolved: Resolved, source: str, rows: list[dict] | None) -> Plan:
    """The plan, once the output directory is checked: on --resume, the checkpoint must fit what the run asks for."""
    out, checkpoint, done = check_output_dir(resolved)
    if resolved.script.resume and checkpoint is not None:
        changed = check_resume_fits(resolved, source, checkpoint)
        if changed:
            resolved.notes.append(f"--resume from {checkpoint.name} with settings changed: {'; '.join(changed)}")
    return Plan(source, out, checkpoint, rows, done)


def check_supervised_rows(resolved: Resolved) -> None:
    """--dataset's supervised rows, when the directory exists: each row checked, and enough of them for a step."""
    dataset = resolved.script.dataset
    rows = resolved.script.train_rows
    if dataset and Path(dataset).exists():
        try:
            rows = len(load_sft_dataset(dataset))
        except ValueError as exc:
            raise ConfigError(f"dataset {dataset}: {exc}") from None
    check_sft_step(rows, resolved.training, f"dataset {dataset}" if dataset else "--train_rows")


def training_rows(resolved: Resolved, run: Plan) -> list[dict]:
    """Rows from --dataset (validated by ``plan``, or built and saved there), else built and kept in output_dir.

    Keeping the built rows lets --resume continue on exactly the data the run started with. In game
    mode a row is a start state: by default every secret of ``--secrets`` with no guesses yet.
    """
    script, seed = resolved.script, resolved.training.seed
    path = Path(script.dataset) if script.dataset else run.out / ROWS_FILE
    if script.rollout.plays_games and run.rows is None and not script.dataset:
        rows = game_starts(train_secrets(script.secrets), script.game_openings, seed)
        logger.info(
            "game mode: %d start states, every training secret (%s), %.0f%% of them from random guesses",
            len(rows),
            script.secrets,
            100 * script.game_openings,
        )
    elif run.rows is not None:
        rows = run.rows
        logger.info("loaded %d game states from %s", len(rows), path)
    elif path.exists() and script.resume:
        rows = load_rows(path)  # written by this run: a failure here is a bug, not bad input
        logger.info("reloaded the run's %d game states from %s", len(rows), path)
    else:
        rows = build_rows(
            script.train_rows,
            seed=seed,
            secrets=train_secrets(script.secrets),
            explore=script.explore,
            progress=distributed.is_main(),
        )
        if distributed.is_main():
            save_rows(rows, path)
        logger.info("built %d game states (seed %d) and saved them to %s", len(rows), seed, path)
    leaked = held_out_rows(rows)
    if leaked:
        logger.warning("%d rows use held-out evaluation secrets: evaluation on them will overstate skill", leaked)
    return rows


def merge(resolved: Resolved, run: Plan) -> None:
    with writing(run.out / "merged", then="rerun with --merge"):
        merged = merge_adapter(run.source, run.out, run.out / "merged", resolved)
    logger.info("saved the merged model to %s", merged)


def prepare(resolved: Resolved, run: Plan) -> None:
    if run.checkpoint is not None:
        logger.info("resuming from %s", run.checkpoint)
        warning = distributed.resume_warning(run.checkpoint, resolved.training)
        if warning:
            logger.warning(warning)
    name_the_run(resolved, resuming=run.checkpoint is not None)
    offline_wandb_unless_logged_in(resolved)
    if getattr(resolved.training, "use_vllm", False) and resolved.script.device == "cpu":  # before vLLM starts
        os.environ.setdefault(VLLM_CPU_KV_ENV, VLLM_CPU_KV_DEFAULT)
        reloadable_vllm_cpu_weights()
    if resolved.script.torch_threads:
        torch.set_num_threads(resolved.script.torch_threads)


def start(resolved: Resolved, train: Callable[[Resolved, Plan], object]) -> None:
    """An entry script's run: the dry run's preview (one, under torchrun), or the processes set up, every input
    checked before anything slow runs or anything is written, the resolved configuration logged, and ``train``."""
    if resolved.script.dry_run:
        if os.environ.get("RANK", "0") == "0":
            dry_run(resolved)
        return
    distributed.setup(resolved.training)  # several processes: only the main one logs INFO and writes
    run = plan(resolved)
    logger.info("resolved configuration:\n%s", to_yaml(resolved))
    train(resolved, run)


def dry_run(resolved: Resolved) -> None:
    """The resolved configuration and the memory estimate, from config.json and the tokenizer alone: no
    weights load or download, so a preview stays seconds and answers before a download."""
    name = resolved.model.model_name_or_path
    source, tokenizer, known, unavailable = name, None, None, None
    try:
        source = model_source(name, weights=False)
        tokenizer = find_tokenizer(source, resolved)
    except ConfigError as err:
        # The profiles' default model has a shape this project knows: its estimate needs no hub.
        if name == memory.QWEN2_5_3B_ID and resolved.model.model_revision in (None, "main"):
            known = memory.QWEN2_5_3B
        else:
            unavailable = {"unavailable": str(err)}
    if tokenizer is not None and folds_system(tokenizer):
        resolved.notes.append("chat template: it has no system role, so the rules open the first user message")
    estimate = unavailable or memory.preflight(resolved, source, tokenizer, known=known)
    print(to_yaml(resolved), end="")
    print(yaml.safe_dump({"memory_estimate": estimate}, sort_keys=False, width=120), end="")
    if resolved.stage is SFT:  # its steps, and how long they take at least on this device
        expected = unavailable or expected_time(resolved, source, tokenizer, known=known)
        print(yaml.safe_dump({"expected_time": expected}, sort_keys=False, width=120), end="")
    if getattr(resolved.script, "adapter", None):  # how many of GRPO's groups the warm start leaves with signal
        try:
            preview = signal_preview(resolved, model_source(name))
        except ConfigError as err:
            preview = {"unavailable": str(err)}
        print(yaml.safe_dump({"warm_start": preview}, sort_keys=False, width=120), end="")


def log_memory_estimate(resolved: Resolved, source: str, tokenizer) -> None:
    """The --dry-run estimate, logged before the weights load; every process holds the same, so the main one says it."""
    if not distributed.is_main():
        return
    estimate = memory.preflight(resolved, source, tokenizer)
    if "warning" in estimate:
        logger.warning("memory: %s", estimate["warning"])
    elif "peak_gib" in estimate:
        logger.info("memory estimate: peak %.2f GiB per device (%s)", estimate["peak_gib"], estimate["assumes"])


def dataset(resolved: Resolved, run: Plan, model, tokenizer) -> datasets.Dataset:
    """Game states rendered by wordle/, with prompts that fit the model's context beside a reply."""
    script, args = resolved.script, resolved.training
    budget = script.max_prompt_length or model.config.max_position_embeddings - args.max_completion_length
    rows = drop_long_prompts(datasets.Dataset.from_list(training_rows(resolved, run)), tokenizer, budget)
    if len(rows) == 0:
        raise ConfigError(f"no prompt fits in {budget} tokens; raise --max_prompt_length or lower --max-completion")
    # Some prompts may have been too long.
    check_rows_fill_a_step(len(rows), args, game=script.rollout.plays_games, source=script.dataset or None)
    return rows


def fit(resolved: Resolved, trainer: Trainer, run: Plan) -> Health:
    """The stage's training, resumed from the plan's checkpoint if any; running out of memory is one line that says
    what to lower. Each checkpoint holds the run's record, which a --resume compares with what it asks for, and every
    log is watched for a run in trouble (``training.health``), whose finding is returned."""
    checkpoint = run.checkpoint
    trainer.add_callback(RecordInCheckpoints(run_record(resolved, run.source)))
    health = Health(resolved.training.learning_rate, getattr(resolved.script, "stop_on_collapse", False))
    trainer.add_callback(health)
    if checkpoint is not None and trainer.state.load_from_json(str(checkpoint / TRAINER_STATE)).global_step >= (
        trainer.args.max_steps
    ):
        # The run reached max_steps and stopped before saving its adapter (a full disk, a signal): its last
        # checkpoint's weights and state, and no step, which transformers would take once more from there.
        trainer._load_from_checkpoint(str(checkpoint))
        trainer.state = trainer.state.load_from_json(str(checkpoint / TRAINER_STATE))
        logger.info("%s reached max_steps: saving its adapter, training nothing", checkpoint)
        return health
    stop = StopOnSignal()
    trainer.add_callback(stop)
    stop.listen()
    try:
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except torch.OutOfMemoryError:
        raise ConfigError(_oom_message(resolved)) from None
    except RuntimeError as exc:  # MPS reports running out of memory as a plain RuntimeError
        if "out of memory" not in str(exc).lower():
            raise
        raise ConfigError(_oom_message(resolved)) from None
    finally:
        stop.restore()
        trainer.remove_callback(stop)
    if stop.signal is not None:
        step, argv = trainer.state.global_step, resolved.argv
        again = shlex.join(["python", resolved.stage.entry, *argv, *([] if "--resume" in argv else ["--resume"])])
        raise Stopped(
            f"{stop.signal.name} at step {step} of {trainer.args.max_steps}, checkpoint-{step} saved in "
            f"{trainer.args.output_dir}; to finish: {again}",
            128 + stop.signal,
        )
    if health.collapsed_at is not None:
        trainer.log({"health/collapsed_at": float(health.collapsed_at)})  # every tracker, and the log history
        if health.stop_on_collapse:
            raise Stopped(_collapse_line(resolved, run.out, health), COLLAPSED)
    return health


COLLAPSED = 3  # the exit code of a run stopped by --stop_on_collapse


def _collapse_line(resolved: Resolved, out: Path, health: Health) -> str:
    """What a run stopped by its collapse says: the step, the checkpoints set aside, and how to go on from the last
    healthy one (with a learning rate ten times lower, the likely cause's cure)."""
    moved = set_aside(out, health.last_healthy) if distributed.is_main() else []
    distributed.barrier()
    newest = newest_checkpoint(out)
    lower = f"{health.learning_rate / 10:g}"
    argv = [a for a in resolved.argv if a != "--resume"]
    if "--learning_rate" in argv:
        argv[argv.index("--learning_rate") + 1] = lower
    else:
        argv += ["--learning_rate", lower]
    aside = f"; set aside {', '.join(moved)}" if moved else ""
    if newest is None:
        go_on = f"no checkpoint was saved before it: start again with a lower learning rate: {shlex.join(['python', resolved.stage.entry, *argv])}"
    else:
        go_on = f"continue from {newest[0].name} with a lower learning rate: {shlex.join(['python', resolved.stage.entry, *argv, '--resume'])}"
    return f"{health.describe()}; stopped by --stop_on_collapse, no adapter saved{aside}; {go_on}"


def save(resolved: Resolved, run: Plan, trainer: Trainer, tokenizer) -> None:
    """The adapter and tokenizer (loadable with PeftModel.from_pretrained), and the resolved config with the base
    model's fingerprint (``grpo_train.py --adapter`` checks it)."""
    out = run.out
    trainer.save_model(str(out))  # the main process writes, the others wait
    if distributed.is_main():
        if resolved.model.use_peft:
            make_adapter_config_portable(out, resolved.model.model_name_or_path)
        tokenizer.save_pretrained(str(out))
        write_record(run_record(resolved, run.source), out)
        what = "LoRA adapter" if resolved.model.use_peft else "fully fine-tuned model (load it with --model)"
        logger.info("saved the %s, tokenizer and %s to %s", what, CONFIG_FILE, out)
        if resolved.script.merge:  # one full unquantized model, loaded once, after the adapter is complete
            merge(resolved, run)
    distributed.barrier()


def _oom_message(resolved: Resolved) -> str:
    """The rollback's rungs that this run has not taken, in order (as the rollback advisor gives them)."""
    t = resolved.training
    where = (
        f"out of memory on {resolved.script.device} with max_completion_length {t.max_completion_length} and "
        f"per_device_train_batch_size {t.per_device_train_batch_size}"
    )
    rungs = RollbackAdvisor.for_run(resolved).rungs()
    if not rungs:
        return f"{where}, and every rollback is taken: use a smaller model, 4-bit weights, or more memory"
    tries = "; if that fails too, ".join(rungs)
    return f"{where}: retry with {tries} (with --resume to continue from the last checkpoint in {t.output_dir})"
