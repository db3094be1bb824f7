"""Play full games of Wordle with a model on the 300 held-out secrets, next to the solver and random baselines.

    python evaluate.py --model tiny                                    # the embedded model, greedy, 300 games
    python evaluate.py --model tiny --adapter outputs/cpu --out outputs/cpu/eval-cli
    python evaluate.py --model tiny --adapter outputs/cpu --constrain allowed   # adds a constrained row
    python evaluate.py --model Qwen/Qwen2.5-3B-Instruct --games 50 --sample --temperature 1.0 --seed 1
    python evaluate.py --model tiny --adapter outputs/cpu --backend vllm          # vLLM generates (README, vLLM)
    python evaluate.py --model tiny --backend vllm --vllm_server http://127.0.0.1:8000   # a running `vllm serve`

With --out DIR it writes eval.json (metrics, 95% CIs and every game's transcript), eval.md (the
table and replays), guesses.png and, with --train_log (a run's eval/log_history.json, a
trainer_state.json or a checkpoint directory), rewards.png. Given a run's output directory as
--adapter, the model, games, reply length and seed default to the run's own.
"""

from __future__ import annotations

import training.quiet  # noqa: F401  first: it must precede any import of bitsandbytes (see its docstring)

# isort: split
import importlib.util
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import transformers
import yaml
from rich.console import Console
from rich.logging import RichHandler
from transformers import HfArgumentParser

from evaluation.constrain import ReplyBudgetError
from evaluation.report import (
    by_opening,
    console,
    load_log_history,
    markdown,
    opening_heading,
    pick_replays,
    plot_by_turn,
    plot_guess_histogram,
    plot_reward_curves,
    replay_lines,
    rich_table,
    write_json,
)
from evaluation.run import SPLITS, evaluate_baselines, evaluate_model, select_secrets
from evaluation.vllm_backend import LocalEngine, ServerEngine, ServerError
from training.cli import help_requested, run_cli
from training.config import CONFIG_FILE, TINY, ConfigError
from training.modeling import load_for_inference, load_generation_side, load_vllm
from wordle.decoding import CONSTRAIN_CHOICES, Decoding
from wordle.openings import Opening

BACKENDS = ("hf", "vllm")
DEFAULT_SEED = transformers.TrainingArguments.seed  # the trainer's default, so both tables agree

logger = logging.getLogger("evaluate")


@dataclass
class EvalArguments:
    model: str | None = field(
        default=None,
        metadata={
            "help": "'tiny' (the embedded model), a hub id or a local directory (default: the adapter's run's, "
            "else tiny)"
        },
    )
    adapter: str | None = field(default=None, metadata={"help": "a LoRA adapter directory (grpo_train's output_dir)"})
    games: int | None = field(
        default=None,
        metadata={
            "help": "games to play, spread over the 300 held-out secrets (default: the adapter's run's, else 300)"
        },
    )
    split: str = field(
        default="heldout",
        metadata={
            "help": "the secrets to play: heldout (the 300 that report results) or val (the 202 validation secrets "
            "that settings are chosen on; no training plays them)"
        },
    )
    openings: list[str] | None = field(
        default=None,
        metadata={
            "help": "how each game starts, one table each: own (the model opens), answer or allowed (a random answer "
            "or allowed non-answer word played first, seeded per secret by --seed), answer:K or allowed:K (K of "
            "them), words:CRANE,SLATE (these guesses) (default: the adapter's run's, else own)"
        },
    )
    sample: bool = field(default=False, metadata={"help": "sample replies (default: greedy)"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature (with --sample)"})
    seed: int | None = field(
        default=None,
        metadata={
            "help": f"seed of sampling, the random baselines and the bootstrap (default: the adapter's run's, else "
            f"{DEFAULT_SEED}, the trainer's)"
        },
    )
    constrain: str | None = field(
        default=None,
        metadata={
            "help": f"also play with guesses constrained to {' or '.join(CONSTRAIN_CHOICES)} words "
            "(reported as its own row)"
        },
    )
    baselines: bool = field(
        default=True, metadata={"help": "also play the solver and the random baselines (--no_baselines to skip)"}
    )
    out: str | None = field(default=None, metadata={"help": "directory for eval.json, eval.md and the PNG plots"})
    replays: int = field(default=3, metadata={"help": "games of each model row to replay as emoji rows"})
    train_log: str | None = field(
        default=None,
        metadata={
            "help": "a run's eval/log_history.json, a trainer_state.json or a checkpoint directory, for the "
            "reward-curve plot"
        },
    )
    batch_size: int = field(default=64, metadata={"help": "games generated per model.generate call"})
    max_new_tokens: int | None = field(
        default=None,
        metadata={
            "help": "reply length limit (default: the adapter's run's max_completion_length, else the model's "
            "generation_config, else 256)"
        },
    )
    device: str | None = field(
        default=None, metadata={"help": "cuda, mps or cpu (default: the best one here; hf backend only)"}
    )
    backend: str = field(
        default="hf",
        metadata={
            "help": "what generates: hf (transformers' generate) or vllm (vLLM, with its LoRA and structured outputs)"
        },
    )
    vllm_server: str | None = field(
        default=None,
        metadata={
            "help": "with --backend vllm: the URL of a running `vllm serve MODEL` server (with an adapter: started "
            "with --enable-lora --lora-modules NAME=ADAPTER_DIR) instead of vLLM in this process"
        },
    )
    torch_threads: int = field(default=1, metadata={"help": "CPU threads for torch (0: torch's default)"})


def _parser() -> HfArgumentParser:
    parser = HfArgumentParser(EvalArguments)

    def error(message: str) -> None:
        raise ConfigError(message.splitlines()[0])

    parser.error = error  # one line, not argparse's usage block
    return parser


def parse(argv: list[str]) -> EvalArguments:
    args, rest = _parser().parse_args_into_dataclasses(argv, return_remaining_strings=True)
    if rest:
        raise ConfigError(f"unknown argument {rest[0]!r}; see python evaluate.py --help")
    if args.adapter is not None and not Path(args.adapter).is_dir():
        raise ConfigError(f"adapter directory {Path(args.adapter).resolve()} does not exist")
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ConfigError(f"--out {args.out} is a file, not a directory: choose another --out")  # before any game
    apply_run_config(args)
    if args.constrain is not None and args.constrain not in CONSTRAIN_CHOICES:
        raise ConfigError(f"unknown --constrain {args.constrain!r}; valid: {', '.join(CONSTRAIN_CHOICES)}")
    try:
        openings(args)
    except ValueError as exc:
        raise ConfigError(f"--openings: {exc}") from None
    if args.split not in SPLITS:
        raise ConfigError(f"unknown --split {args.split!r}; valid: {', '.join(SPLITS)}")
    if args.games < 1:
        raise ConfigError(f"--games must be at least 1, got {args.games}")
    if args.backend not in BACKENDS:
        raise ConfigError(f"unknown --backend {args.backend!r}; valid: {', '.join(BACKENDS)}")
    if args.vllm_server is not None and args.backend != "vllm":
        raise ConfigError("--vllm_server is where --backend vllm generates: pass --backend vllm")
    if args.backend == "vllm" and args.vllm_server is None and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            '--backend vllm needs vLLM, which is not installed: pip install -e ".[vllm]" (CPU: README), '
            "or --vllm_server URL"
        )
    if args.batch_size < 1:
        raise ConfigError(f"--batch_size must be at least 1, got {args.batch_size}")
    try:
        decoding(args)
    except ValueError as exc:  # its messages name the field: --max_new_tokens, --temperature
        raise ConfigError(f"--{exc}") from None
    if args.train_log is not None:
        try:
            load_log_history(args.train_log)  # read now, so a bad file fails before any game is played
        except ValueError as exc:
            raise ConfigError(f"--train_log {exc}") from None
    return args


def run_config(args: EvalArguments) -> Path | None:
    """The adapter's run configuration (``wordle_grpo_config.yaml``), where there is one."""
    saved = None if args.adapter is None else Path(args.adapter) / CONFIG_FILE
    return saved if saved is not None and saved.is_file() else None


def apply_run_config(args: EvalArguments) -> None:
    """Fill what the user left unset from the adapter's run (``wordle_grpo_config.yaml``), so that
    ``evaluate.py --adapter OUTPUT_DIR`` replays the evaluation the run made; else the defaults."""
    saved = run_config(args)
    run: dict = {}
    if saved is not None:
        try:
            run = yaml.safe_load(saved.read_text())["evaluation"]
        except (yaml.YAMLError, TypeError, KeyError):
            raise ConfigError(f"{saved} is not a run's configuration (no evaluation section): was it edited?") from None
    defaults = {"model": TINY, "games": 300, "seed": DEFAULT_SEED, "max_new_tokens": None, "openings": ["own"]}
    for name, default in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, run.get(name, default))


def decoding(args: EvalArguments) -> Decoding:
    """The model row's decoding; ``--constrain`` adds a second, constrained row."""
    return Decoding(
        max_new_tokens=args.max_new_tokens, sample=args.sample, temperature=args.temperature, seed=args.seed
    )


def openings(args: EvalArguments) -> list[Opening]:
    """The openings asked for, in order, each once."""
    parsed = [Opening.parse(spec) for spec in args.openings]
    return list(dict.fromkeys(parsed))


def load(args: EvalArguments) -> tuple:
    """The model (or vLLM engine) and tokenizer of the backend asked for."""
    if args.backend == "hf":
        return load_for_inference(args.model, args.adapter, device=args.device)
    source, adapter_dir, tokenizer, generation = load_generation_side(args.model, args.adapter)
    if args.vllm_server is not None:
        try:
            return ServerEngine(args.vllm_server, generation, adapter_dir, model=(args.model, source)), tokenizer
        except ServerError as exc:
            raise ConfigError(str(exc)) from None
    llm, lora = load_vllm(source, adapter_dir, seed=args.seed)
    return LocalEngine(llm, generation, lora), tokenizer


def run(args: EvalArguments, out_console: Console) -> list:
    model_decoding = decoding(args)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    model, tokenizer = load(args)
    saved = run_config(args)
    if saved is not None:  # said once loaded: an error until then is one line alone
        logger.info("settings not given on the command line come from %s", saved)
    secrets = select_secrets(args.games, args.split)
    label = "model" if args.adapter is None else "model + adapter"
    results = []
    for opening in openings(args):
        try:
            results += evaluate_model(
                model,
                tokenizer,
                secrets,
                model_decoding,
                constrain=args.constrain,
                batch_size=args.batch_size,
                label=label,
                opening=opening,
            )
        except (ReplyBudgetError, ServerError) as exc:  # known once loaded, or the server answered: before any game
            raise ConfigError(str(exc)) from None
        if args.baselines:
            results += evaluate_baselines(secrets, seed=args.seed, opening=opening)

    groups = by_opening(results)
    for spec, group in groups.items():
        out_console.print(rich_table(group, title=f"{opening_heading(spec)}, {len(secrets)} full games (95% CI)"))
    for result in results:
        if result.kind == "baseline":
            continue
        for game in pick_replays(result.games, args.replays):
            out_console.print(f"[bold]{result.label}[/bold]: " + "\n".join(replay_lines(game)), highlight=False)

    if args.out:
        out = Path(args.out)
        settings = asdict(args) | {"secrets": list(secrets)}
        model_note = f"model {args.model}" + (f", adapter {args.adapter}" if args.adapter else "")
        model_note += f", {args.backend} backend" + (f" at {args.vllm_server}" if args.vllm_server else "")
        notes = [f"{model_note}; {model_decoding.describe()}"]
        write_json(out / "eval.json", results, settings)
        (out / "eval.md").write_text(markdown(results, replays=args.replays, notes=notes), encoding="utf-8")
        first = next(iter(groups.values()))  # the plots: the first opening's games
        plot_guess_histogram(first, out / "guesses.png")
        plot_by_turn(first, out / "by_turn.png")
        if args.train_log and plot_reward_curves(args.train_log, out / "rewards.png") is None:
            logger.warning("%s holds no reward logs: no rewards.png", args.train_log)
        logger.info("wrote eval.json, eval.md and the plots to %s", out)
    return results


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if help_requested(argv, __doc__, EvalArguments):
        return 0
    handler = RichHandler(console=Console(stderr=True), show_path=False)  # logs on stderr, results on stdout
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[handler], force=True)
    transformers.utils.logging.set_verbosity_warning()
    return run_cli(lambda: run(parse(argv), console()))


if __name__ == "__main__":
    sys.exit(main())
