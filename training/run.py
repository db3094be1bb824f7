"""The run around GRPO: every input checked before anything slow (``plan``), the training rows, the
output directory's checkpoints and lock, the fit with its out-of-memory advice, and what is saved.

``grpo_train.py`` calls these in order; each raises ``ConfigError`` for what a user can fix.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
import yaml
from transformers import Trainer

from models import memory
from models.adapter import check_adapter, fingerprint
from models.loading import (
    check_bitsandbytes,
    damage,
    find_tokenizer,
    folds_system,
    merge_adapter,
    reloadable_vllm_cpu_weights,
)
from models.source import model_source
from runtime import distributed
from runtime.preemption import StopOnSignal
from settings.arguments import CONFIG_FILE
from settings.checks import VLLM_CPU_KV_DEFAULT, VLLM_CPU_KV_ENV, check_cache_dir, check_writable
from settings.config import SFT, Resolved
from settings.errors import ConfigError, Stopped, writing
from settings.summary import summary, to_yaml
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
from training.handoff import signal_preview
from training.rollback import RollbackAdvisor
from training.sft import check_sft_step
from training.sft_data import load_sft_dataset
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
        out, checkpoint, done = check_output_dir(resolved)
        return Plan(source, out, checkpoint, None, done)
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
    out, checkpoint, done = check_output_dir(resolved)
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


@contextmanager
def claimed(run: Plan) -> Iterator[None]:
    """The output directory locked for this run (a second run into it is refused), and on the way out, whatever
    happened, unlocked; a directory the run created and left empty is removed."""
    created = outermost_missing(run.out)  # the lock creates it and any missing parent
    lock = distributed.OutputLock(run.out)
    if distributed.is_main() and not lock.acquire():
        check_not_in_use(run.out)  # raises, naming the run that took it since plan()
    try:
        yield
    finally:
        lock.release()
        if created is not None and distributed.is_main():
            remove_empty(run.out, created)


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


# The project trackers file a run under, unless the user names one: transformers' default is "huggingface" for all.
PROJECT = "wordle-grpo"
HF_DEFAULT_PROJECT = "huggingface"  # TrainingArguments.project's default: counts as not set


def name_the_run(resolved: Resolved, resuming: bool = False) -> None:
    """Trackers file the run under ``wordle-grpo``, named after its output directory, unless the user named them.

    transformers (5.x) gives trackio ``args.project`` and ``args.run_name`` (none: a random name), wandb
    ``$WANDB_PROJECT`` and ``args.run_name``. A named run also lets trackio, which transformers closes at the end
    of training, reopen the same run for the final evaluation (``training.before_after``) instead of a new one.
    TensorBoard needs nothing: it writes under ``output_dir/runs/`` unless ``$TENSORBOARD_LOGGING_DIR`` says
    otherwise.
    """
    args = resolved.training
    if not args.report_to:
        return
    wandb = "wandb" in args.report_to
    named = args.run_name is not None
    if not named:
        # wandb's own variable for the name would lose to an explicit run_name, so it is the user's choice here.
        chosen = os.environ.get("WANDB_NAME") if wandb else None
        args.run_name = chosen or Path(args.output_dir).resolve().name
    if args.project == HF_DEFAULT_PROJECT:
        # Neither transformers nor trackio reads TRACKIO_PROJECT itself; a user who set it meant it.
        args.project = os.environ.get("TRACKIO_PROJECT", PROJECT)
    if wandb:
        os.environ.setdefault("WANDB_PROJECT", PROJECT)
    projects = (("trackio", args.project), ("wandb", os.environ.get("WANDB_PROJECT")))
    where = [f"{tracker} project {project!r}" for tracker, project in projects if tracker in args.report_to]
    logger.info("tracking run %r%s", args.run_name, "".join(f", {w}" for w in where))
    if "trackio" in args.report_to and not (named or resuming) and args.run_name in _trackio_runs(args.project):
        # trackio continues a run of the same name: a new run into a directory named as an earlier one's would
        # add its steps to that run's curves.
        logger.warning(
            "trackio: project %r already holds a run named %r, and this run's logs will continue it: pass "
            "--run_name to keep them apart",
            args.project,
            args.run_name,
        )


def _trackio_runs(project: str) -> list[str]:
    """The names of the runs this machine's trackio holds in ``project`` (none: a project not yet created)."""
    import trackio  # only a run that reports to trackio needs it

    try:
        return [run.name for run in trackio.Api().runs(project)]
    except ValueError:  # trackio's answer for a project it does not hold
        return []


def offline_wandb_unless_logged_in(resolved: Resolved) -> None:
    """wandb would otherwise stop to ask for a login; runs stay offline (``wandb sync`` later) unless the user has one."""
    logged_in = os.environ.get("WANDB_API_KEY") or "api.wandb.ai" in _read(Path.home() / ".netrc")
    if "wandb" in resolved.training.report_to and not logged_in and "WANDB_MODE" not in os.environ:
        os.environ["WANDB_MODE"] = "offline"
        logger.info("wandb: no login found, logging offline under ./wandb (upload later with `wandb sync`)")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


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


def dry_run(resolved: Resolved) -> None:
    """The resolved configuration and the memory estimate, from config.json and the tokenizer alone: no
    weights load or download, so a preview stays seconds and answers before a download."""
    name = resolved.model.model_name_or_path
    try:
        source = model_source(name, weights=False)
        tokenizer = find_tokenizer(source, resolved)
    except ConfigError as err:
        # The profiles' default model has a shape this project knows: its estimate needs no hub.
        if name == memory.QWEN2_5_3B_ID and resolved.model.model_revision in (None, "main"):
            estimate = memory.preflight(resolved, name, known=memory.QWEN2_5_3B)
        else:
            estimate = {"unavailable": str(err)}
    else:
        if tokenizer is not None and folds_system(tokenizer):
            resolved.notes.append("chat template: it has no system role, so the rules open the first user message")
        estimate = memory.preflight(resolved, source, tokenizer)
    print(to_yaml(resolved), end="")
    print(yaml.safe_dump({"memory_estimate": estimate}, sort_keys=False, width=120), end="")
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


def fit(resolved: Resolved, trainer: Trainer, checkpoint: Path | None) -> None:
    """GRPO, resumed from ``checkpoint`` if given; running out of memory is one line that says what to lower."""
    if checkpoint is not None and trainer.state.load_from_json(str(checkpoint / TRAINER_STATE)).global_step >= (
        trainer.args.max_steps
    ):
        # The run reached max_steps and stopped before saving its adapter (a full disk, a signal): its last
        # checkpoint's weights and state, and no step, which transformers would take once more from there.
        trainer._load_from_checkpoint(str(checkpoint))
        trainer.state = trainer.state.load_from_json(str(checkpoint / TRAINER_STATE))
        logger.info("%s reached max_steps: saving its adapter, training nothing", checkpoint)
        return
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


def save(resolved: Resolved, run: Plan, trainer: Trainer, tokenizer) -> None:
    """The adapter and tokenizer (loadable with PeftModel.from_pretrained), and the resolved config with the base
    model's fingerprint (``grpo_train.py --adapter`` checks it)."""
    out = run.out
    trainer.save_model(str(out))  # the main process writes, the others wait
    if distributed.is_main():
        if resolved.model.use_peft:
            make_adapter_config_portable(out, resolved.model.model_name_or_path)
        tokenizer.save_pretrained(str(out))
        config = summary(resolved)
        config["model"]["fingerprint"] = fingerprint(run.source, resolved.model.model_revision)
        (out / CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=120))
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
