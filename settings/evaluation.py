"""``evaluate.py``'s arguments, checked before anything loads; given a run's output directory as
``--adapter``, what the user left unset comes from the run's own configuration.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import transformers
import yaml
from transformers import HfArgumentParser

from evaluation.plots import load_log_history
from evaluation.run import SPLITS
from settings.arguments import CONFIG_FILE, TINY
from settings.checks import check_cache_dir, check_writable
from settings.errors import ConfigError
from wordle.decoding import CONSTRAIN_CHOICES, Decoding
from wordle.openings import Opening

BACKENDS = ("hf", "vllm")
DEFAULT_SEED = transformers.TrainingArguments.seed  # the trainer's default, so both tables agree


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
        default=True,
        metadata={
            "help": "also play the solver, the entropy players that say answers only and the random baselines "
            "(--no_baselines to skip)"
        },
    )
    start: bool = field(
        default=True,
        metadata={
            "help": "with --adapter, also play the model without it (the start) on the same games, and report the "
            "guesses the adapter saves against it, game by game, with their interval (--no_start to skip)"
        },
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
    torch_threads: int | None = field(
        default=None,
        metadata={
            "help": "CPU threads for torch, 0 for torch's default (default: the adapter's run's, else as grpo_train's "
            "profiles: 1 for the embedded model, whose tiny matrices a second thread only slows, else 0)"
        },
    )


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
    check_cache_dir()
    if args.out is not None:
        check_writable(Path(args.out), "--out")
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
            '--backend vllm needs vLLM, which is not installed: pip install -e ".[vllm]" (CPU: docs/several-gpus.md), '
            "or --vllm_server URL"
        )
    if args.torch_threads < 0:
        raise ConfigError(f"--torch_threads must be 0 (torch's default) or more, got {args.torch_threads}")
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
    script: dict = {}  # the run's script flags that differ from their defaults
    if saved is not None:
        try:
            config = yaml.safe_load(saved.read_text())
            run, script = config["evaluation"], config.get("script") or {}
        except (yaml.YAMLError, TypeError, KeyError, ValueError):  # ValueError: not text (UnicodeDecodeError)
            raise ConfigError(f"{saved} is not a run's configuration (no evaluation section): was it edited?") from None
    defaults = {"model": TINY, "games": 300, "seed": DEFAULT_SEED, "max_new_tokens": None, "openings": ["own"]}
    for name, default in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, run.get(name, default))
    if args.torch_threads is None:
        args.torch_threads = script.get("torch_threads", 1 if args.model == TINY else 0)


def decoding(args: EvalArguments) -> Decoding:
    """The model row's decoding; ``--constrain`` adds a second, constrained row."""
    return Decoding(
        max_new_tokens=args.max_new_tokens, sample=args.sample, temperature=args.temperature, seed=args.seed
    )


def openings(args: EvalArguments) -> list[Opening]:
    """The openings asked for, in order, each once."""
    parsed = [Opening.parse(spec) for spec in args.openings]
    return list(dict.fromkeys(parsed))
