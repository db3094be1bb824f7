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

import training.quiet  # noqa: F401  first: it must precede any import of bitsandbytes (see its docstring)

# isort: split
import importlib.util
import json
import logging
import os
import shlex
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
import transformers
import yaml
from rich.console import Console
from rich.logging import RichHandler
from trl import GRPOConfig, get_peft_config

from evaluation.metrics import compute_metrics
from evaluation.report import (
    PlayerResult,
    by_opening,
    console,
    markdown,
    markdown_tables,
    opening_heading,
    plot_by_turn,
    plot_guess_histogram,
    plot_learning_curve,
    plot_reward_curves,
    read_json,
    rich_table,
    write_json,
)
from evaluation.run import evaluate_baselines, evaluate_model, select_secrets
from rewards import get_reward_funcs
from training import distributed, memory
from training.arguments import DASHED
from training.card import PortableCheckpoints, make_adapter_config_portable, write_model_card
from training.cli import brief, help_requested, run_cli
from training.config import (
    CONFIG_FILE,
    VLLM_CPU_KV_DEFAULT,
    VLLM_CPU_KV_ENV,
    ConfigError,
    Resolved,
    ScriptArguments,
    available_profiles,
    load_profile,
    make_parser,
    resolve,
)
from training.data import (
    build_rows,
    check_reply_fits,
    check_rows_fill_a_step,
    drop_long_prompts,
    game_starts,
    held_out_rows,
    load_rows,
    save_rows,
)
from training.device import MpsCacheCallback
from training.modeling import (
    check_bitsandbytes,
    find_tokenizer,
    folds_system,
    load_model,
    load_tokenizer,
    merge_adapter,
    model_source,
    reloadable_vllm_cpu_weights,
)
from training.rollout import GameCheck, GameRollout
from training.summary import eval_settings, to_yaml
from training.trainer import WordleGRPOTrainer
from wordle import spread, train_secrets
from wordle.openings import Opening

logger = logging.getLogger("grpo_train")

ROWS_FILE = "train_rows.jsonl"
EVAL_DIR = "eval"


def setup_logging() -> None:
    # Logs go to stderr: stdout holds only what a run produces (the --dry-run YAML, the results table).
    handler = RichHandler(console=Console(stderr=True), show_path=False)
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[handler], force=True)
    transformers.utils.logging.set_verbosity_warning()
    # Deprecations inside transformers/TRL that this project cannot act on, named one by one.
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)


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
    needs, the dataset, then the output directory. Raises ConfigError on the first problem."""
    script = resolved.script
    source = model_source(resolved.model.model_name_or_path)
    check_bitsandbytes(resolved)
    if resolved.training.use_vllm and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            'use_vllm needs vLLM, which is not installed: pip install -e ".[vllm]" (CPU: README, vLLM), or --use_vllm false'
        )
    rows = None
    if script.dataset and Path(script.dataset).exists():
        try:
            rows = load_rows(script.dataset)
        except ValueError as exc:
            raise ConfigError(f"dataset {script.dataset}: {exc}") from None
    game = script.rollout == "game"
    # --dataset's rows, else the rows this run builds: a start state per training secret, or --train_rows states
    built = len(train_secrets(script.secrets)) if game else script.train_rows
    check_rows_fill_a_step(built if rows is None else len(rows), resolved.training, game)
    out, checkpoint, done = check_output_dir(resolved)
    return Plan(source, out, checkpoint, rows, done)


def check_not_in_use(out: Path) -> None:
    """A second live run into the same directory would interleave checkpoints and files with the first."""
    pid = distributed.OutputLock(out).holder()
    if pid is not None:
        who = f"pid {pid}" if pid > 0 else "another process"
        raise ConfigError(
            f"{out} is in use by a live run ({who}): wait for it or stop it, or choose another --output_dir"
        )


def newest_checkpoint(out: Path) -> tuple[Path, int] | None:
    """The newest checkpoint that was completely written, and its step.

    transformers writes trainer_state.json last, so a run killed while saving (kill -9, power
    loss) leaves a newest directory without it; resuming from that one would fail.
    """
    checkpoints = [p for p in out.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    for path in sorted(checkpoints, key=lambda p: int(p.name.split("-")[-1]), reverse=True):
        try:
            state = json.loads((path / "trainer_state.json").read_text())
        except (OSError, ValueError):
            logger.warning("skipping %s: it was not completely written (the run stopped while saving)", path)
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
    if distributed.is_main():  # another process finds the lock its own main process may have taken already
        check_not_in_use(out)
    newest = newest_checkpoint(out) if out.is_dir() else None
    saved = (out / "adapter_config.json").is_file() or (out / "model.safetensors").is_file()  # LoRA, or full
    finished = (out / CONFIG_FILE).is_file() and saved
    if finished:
        trained_on = yaml.safe_load((out / CONFIG_FILE).read_text())["model"]["name_or_path"]
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
        else:
            hint = "pass --resume to continue"
        raise ConfigError(
            f"{out} already holds checkpoints (newest {newest[0].name}); {hint}, or choose another --output_dir"
        )
    if done and not finished:
        raise ConfigError(
            f"{newest[0]} reached max_steps ({max_steps}) but the run stopped before saving to {out}: its adapter is "
            f"in the checkpoint (python evaluate.py --adapter {newest[0]}); raise --max_steps to train on"
        )
    return out, newest[0] if newest else None, done


def training_rows(resolved: Resolved, run: Plan) -> list[dict]:
    """Rows from --dataset (validated by ``plan``, or built and saved there), else built and kept in output_dir.

    Keeping the built rows lets --resume continue on exactly the data the run started with. In game
    mode a row is a start state: by default every secret of ``--secrets`` with no guesses yet.
    """
    script, seed = resolved.script, resolved.training.seed
    path = Path(script.dataset) if script.dataset else run.out / ROWS_FILE
    if script.rollout == "game" and run.rows is None and not script.dataset:
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


def offline_wandb_unless_logged_in(resolved: Resolved) -> None:
    """wandb would otherwise stop to ask for a login; runs stay offline (``wandb sync`` later) unless the user has one."""
    logged_in = os.environ.get("WANDB_API_KEY") or "api.wandb.ai" in _read(Path.home() / ".netrc")
    if "wandb" in resolved.training.report_to and not logged_in and "WANDB_MODE" not in os.environ:
        os.environ["WANDB_MODE"] = "offline"
        logger.info("wandb: no login found, logging offline under ./wandb (upload later with `wandb sync`)")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def merge(resolved: Resolved, run: Plan) -> None:
    merged = merge_adapter(run.source, run.out, run.out / "merged", resolved)
    logger.info("saved the merged model to %s", merged)


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
    created = not run.out.exists()
    lock = distributed.OutputLock(run.out)
    if distributed.is_main() and not lock.acquire():
        check_not_in_use(run.out)  # raises, naming the run that took it since plan()
    try:
        return _train(resolved, run)
    finally:
        lock.release()
        if created and distributed.is_main() and run.out.is_dir() and not any(run.out.iterdir()):
            run.out.rmdir()  # a run that stopped before writing anything leaves no empty directory


def _train(resolved: Resolved, run: Plan) -> WordleGRPOTrainer:
    prepare(resolved, run)
    tokenizer = load_tokenizer(run.source, resolved)
    check_reply_fits(tokenizer, resolved.training.max_completion_length)
    log_memory_estimate(resolved, run.source, tokenizer)
    model = load_model(run.source, resolved)
    train_dataset = dataset(resolved, run, model, tokenizer)
    # Full games on held-out secrets before training, to compare with after (reused on --resume).
    skip = resolved.script.skip_eval
    before = None if skip else evaluate_start(resolved, model, tokenizer, run.out, resuming=bool(run.checkpoint))
    trainer = make_trainer(resolved, model, tokenizer, train_dataset)
    fit(resolved, trainer, run.checkpoint)
    save(resolved, run, trainer, tokenizer)
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
        eval_markdown_table=None if results is None else markdown_tables(results, heading="### "),
    )
    return trainer


def prepare(resolved: Resolved, run: Plan) -> None:
    if run.checkpoint is not None:
        logger.info("resuming from %s", run.checkpoint)
        warning = distributed.resume_warning(run.checkpoint, resolved.training)
        if warning:
            logger.warning(warning)
    offline_wandb_unless_logged_in(resolved)
    if resolved.training.use_vllm and resolved.script.device == "cpu":  # before vLLM starts (see training.config)
        os.environ.setdefault(VLLM_CPU_KV_ENV, VLLM_CPU_KV_DEFAULT)
        reloadable_vllm_cpu_weights()
    if resolved.script.torch_threads:
        torch.set_num_threads(resolved.script.torch_threads)


def log_memory_estimate(resolved: Resolved, source: str, tokenizer) -> None:
    """The --dry-run estimate, logged before the weights load; every process holds the same, so the main one says it."""
    if not distributed.is_main():
        return
    estimate = memory.preflight(resolved, source, tokenizer)
    if "warning" in estimate:
        logger.warning("memory: %s", estimate["warning"])
    elif "peak_gb" in estimate:
        logger.info("memory estimate: peak %.2f GB per device (%s)", estimate["peak_gb"], estimate["assumes"])


def dataset(resolved: Resolved, run: Plan, model, tokenizer) -> datasets.Dataset:
    """Game states rendered by wordle/, with prompts that fit the model's context beside a reply."""
    script, args = resolved.script, resolved.training
    budget = script.max_prompt_length or model.config.max_position_embeddings - args.max_completion_length
    rows = drop_long_prompts(datasets.Dataset.from_list(training_rows(resolved, run)), tokenizer, budget)
    if len(rows) == 0:
        raise ConfigError(f"no prompt fits in {budget} tokens; raise --max_prompt_length or lower --max-completion")
    check_rows_fill_a_step(len(rows), args, game=script.rollout == "game")  # some prompts may have been too long
    return rows


def make_trainer(resolved: Resolved, model, tokenizer, train_dataset: datasets.Dataset) -> WordleGRPOTrainer:
    script = resolved.script
    suppress = getattr(model.generation_config, "suppress_tokens", None)
    if suppress and not resolved.training.use_vllm:
        # TRL builds its generation config from generation_kwargs alone, and the evaluation honours the
        # model's own list (evaluation.play.ModelPlayer): training samples as it will be judged.
        kwargs = resolved.training.generation_kwargs or {}
        resolved.training.generation_kwargs = {"suppress_tokens": list(suppress), **kwargs}
    n_check = script.game_eval_games
    check = GameCheck(spread(train_secrets("val"), n_check), resolved.decoding, resolved.training.seed)
    return WordleGRPOTrainer(
        rollout=GameRollout() if script.rollout == "game" else None,
        check=check if script.game_eval_steps else None,
        check_steps=script.game_eval_steps,
        model=model,
        reward_funcs=get_reward_funcs(script.rewards),
        args=resolved.training,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(resolved.model),
        callbacks=[
            distributed.RecordProcesses(),
            PortableCheckpoints(resolved.model.model_name_or_path),
            memory.RollbackAdvisor.for_run(resolved),
            *([MpsCacheCallback(script.mps_empty_cache_steps)] if script.mps_empty_cache_steps else []),
        ],
    )


def fit(resolved: Resolved, trainer: WordleGRPOTrainer, checkpoint: Path | None) -> None:
    """GRPO, resumed from ``checkpoint`` if given; running out of memory is one line that says what to lower."""
    try:
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except torch.OutOfMemoryError:
        raise ConfigError(_oom_message(resolved)) from None
    except RuntimeError as exc:  # MPS reports running out of memory as a plain RuntimeError
        if "out of memory" not in str(exc).lower():
            raise
        raise ConfigError(_oom_message(resolved)) from None


def save(resolved: Resolved, run: Plan, trainer: WordleGRPOTrainer, tokenizer) -> None:
    """The adapter and tokenizer (loadable with PeftModel.from_pretrained), and the resolved config."""
    out = run.out
    trainer.save_model(str(out))  # the main process writes, the others wait
    if distributed.is_main():
        if resolved.model.use_peft:
            make_adapter_config_portable(out, resolved.model.model_name_or_path)
        tokenizer.save_pretrained(str(out))
        (out / CONFIG_FILE).write_text(to_yaml(resolved))
        what = "LoRA adapter" if resolved.model.use_peft else "fully fine-tuned model (load it with --model)"
        logger.info("saved the %s, tokenizer and %s to %s", what, CONFIG_FILE, out)
        if resolved.script.merge:  # one full unquantized model, loaded once, after the adapter is complete
            merge(resolved, run)
    distributed.barrier()


# --- full-game evaluation before and after training ------------------------------------------------


def _play(resolved: Resolved, model, tokenizer, label: str) -> list[PlayerResult]:
    """The model's games on the held-out secrets, from each of ``--eval_openings``; each process plays its share,
    and every one gets all games."""
    secrets = select_secrets(resolved.script.eval_games)
    seed = resolved.training.seed
    results = []
    for spec in resolved.script.eval_openings:
        opening = Opening.parse(spec)
        [mine] = evaluate_model(
            model, tokenizer, distributed.shard(secrets), resolved.decoding, label=label, opening=opening
        )
        games = distributed.unshard(mine.games)
        if len(games) != len(mine.games):
            mine = PlayerResult(label, mine.kind, compute_metrics(games, seed=seed), games, opening.spec)
        results.append(mine)
    return results


def evaluate_start(resolved: Resolved, model, tokenizer, out: Path, resuming: bool) -> list[PlayerResult]:
    """The starting model's games and the baselines', from each opening, saved to ``eval/before.json``. On
    --resume a saved file made with the same settings is reused: the starting model is the same, and greedy
    play would only repeat the same games."""
    path = out / EVAL_DIR / "before.json"
    if resuming and path.is_file():
        settings, results = read_json(path)
        if settings == eval_settings(resolved):
            logger.info("reusing the evaluation before training from %s", path)
            return results
        logger.warning("%s was made with other settings (%s); evaluating again", path, settings)
    if not resolved.quantized:  # quantized weights were placed on their device as they loaded
        model.to(resolved.training.device)  # where the Trainer would move it anyway
    before = _play(resolved, model, tokenizer, "before")
    if not distributed.is_main():
        return before
    secrets = select_secrets(resolved.script.eval_games)
    results = []
    for mine in before:
        results += [mine, *evaluate_baselines(secrets, resolved.training.seed, Opening.parse(mine.opening))]
    write_json(path, results, eval_settings(resolved))
    return results


def evaluate_end(resolved: Resolved, trainer, tokenizer, out: Path, before: list[PlayerResult]) -> list[PlayerResult]:
    """The trained model's games, the before/after tables (one per opening), and the files under ``eval/``."""
    directory = out / EVAL_DIR
    after = _play(resolved, trainer.model, tokenizer, "after")
    if not distributed.is_main():
        return [*before, *after]
    write_json(directory / "after.json", after, eval_settings(resolved))
    results = []
    for mine in after:  # per opening: before, after, then the baselines
        group = [r for r in before if r.opening == mine.opening]
        results += [*group[:1], mine, *group[1:]]
    own = [r for r in results if r.opening == results[0].opening]  # the plots: the first opening's games
    (directory / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1) + "\n")
    plot_guess_histogram(own, directory / "guesses.png")
    plot_by_turn(own, directory / "by_turn.png")
    plot_reward_curves(trainer.state.log_history, directory / "rewards.png", weights=resolved.weights)
    plot_learning_curve(trainer.state.log_history, directory / "learning_curve.png")
    note = f"{resolved.model.model_name_or_path}, greedy, before and after {trainer.state.global_step} GRPO steps"
    (directory / "eval.md").write_text(markdown(results, title="Before and after training", notes=[note]))
    games = after[0].metrics["games"]
    for spec, group in by_opening(results).items():
        console().print(rich_table(group, title=f"Before and after training: {opening_heading(spec)}, {games} games"))
    for mine in after:
        was = next(r for r in before if r.opening == mine.opening)
        logger.info(
            "evaluation, %s: win rate %.3f before, %.3f after",
            Opening.parse(mine.opening).label,
            was.win_rate,
            mine.win_rate,
        )
    logger.info("evaluation files in %s", directory)
    return results


def _oom_message(resolved: Resolved) -> str:
    t = resolved.training
    return (
        f"out of memory on {resolved.script.device} with max_completion_length {t.max_completion_length} and "
        f"per_device_train_batch_size {t.per_device_train_batch_size}: retry with --max-completion 96 and a smaller "
        f"--per_device_train_batch_size (with --resume to continue from the last checkpoint in {t.output_dir})"
    )


def dry_run(resolved: Resolved) -> None:
    """The resolved configuration and the memory estimate, from config.json and the tokenizer alone: no
    weights load or download, so a preview stays seconds and answers before a download."""
    try:
        source = model_source(resolved.model.model_name_or_path, weights=False)
        tokenizer = find_tokenizer(source, resolved)
    except ConfigError as err:
        estimate = {"unavailable": str(err)}
    else:
        if tokenizer is not None and folds_system(tokenizer):
            resolved.notes.append("chat template: it has no system role, so the rules open the first user message")
        estimate = memory.preflight(resolved, source, tokenizer)
    print(to_yaml(resolved), end="")
    print(yaml.safe_dump({"memory_estimate": estimate}, sort_keys=False, width=120), end="")


# The TRL fields that the README's commands use, shown by --help beside the script's own.
TRL_OPTIONS = {
    "output_dir": "where checkpoints, the adapter, eval/ and the resolved config are written",
    "max_steps": "GRPO steps to train",
    "save_steps": "save a checkpoint (for --resume) every N steps",
    "learning_rate": "the LoRA learning rate",
    "seed": "seed of the data, sampling and evaluation: a run is repeatable in it",
    "report_to": "where to log: none, wandb, trackio, tensorboard",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config_line = ["  --config FILE             a YAML file of any options, between the profile and the command line"]

    def profiles() -> dict:  # read only for --help: a broken profile is run_cli's one-line error otherwise
        return {name: load_profile(name) for name in available_profiles()}

    more = brief(GRPOConfig, TRL_OPTIONS)
    full = make_parser().format_help
    if help_requested(
        argv, __doc__, ScriptArguments, config_line, full=full, more=more, profiles=profiles, dashed=DASHED
    ):
        return 0
    setup_logging()
    return run_cli(lambda: _main(argv))


def _main(argv: list[str]) -> None:
    resolved = resolve(argv)
    if resolved.script.dry_run:
        if os.environ.get("RANK", "0") != "0":  # under torchrun: one preview, not one per process
            return
        dry_run(resolved)
        return
    distributed.setup(resolved.training)  # several processes: only the main one logs INFO and writes
    run = plan(resolved)  # every input checked before anything slow runs or anything is written
    logger.info("resolved configuration:\n%s", to_yaml(resolved))
    train(resolved, run)


if __name__ == "__main__":
    sys.exit(main())
