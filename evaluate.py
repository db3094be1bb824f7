"""Play full games of Wordle with a model on the 300 held-out secrets, next to the solver and random baselines;
with an adapter, also the model without it (its start), and the guesses the adapter saves game by game.

    python evaluate.py --model tiny                                    # the embedded model, greedy, 300 games
    python evaluate.py --model tiny --adapter outputs/cpu --out outputs/cpu/eval-cli
    python evaluate.py --model tiny --adapter outputs/cpu --constrain allowed   # adds a constrained row
    python evaluate.py --model Qwen/Qwen2.5-3B-Instruct --games 50 --sample --temperature 1.0 --seed 1
    python evaluate.py --model tiny --adapter outputs/cpu --backend vllm          # vLLM generates (README, vLLM)
    python evaluate.py --model tiny --backend vllm --vllm_server http://127.0.0.1:8000   # a running `vllm serve`

With --adapter, each opening's table holds the start ("model"), the adapter ("model + adapter") and the guesses
it saves against the start on the same games (--no_start to skip the start). With --out DIR it writes eval.json
(metrics, 95% CIs and every game's transcript), eval.md (the table and replays), guesses.png and, with
--train_log (a run's eval/log_history.json, a trainer_state.json or a checkpoint directory), rewards.png. Given a
run's output directory as --adapter, the model, games, reply length and seed default to the run's own.
"""

from __future__ import annotations

import runtime.quiet  # noqa: F401  first: it must precede any import of bitsandbytes (see its docstring)

# isort: split
import logging
import sys
from dataclasses import asdict
from pathlib import Path

import torch
import transformers
from rich.console import Console
from rich.logging import RichHandler

from evaluation.constrain import ReplyBudgetError
from evaluation.metrics import guesses_saved
from evaluation.plots import plot_by_turn, plot_guess_histogram, plot_reward_curves
from evaluation.report import (
    by_opening,
    console,
    markdown,
    opening_heading,
    pick_replays,
    replay_lines,
    rich_table,
    write_json,
)
from evaluation.run import evaluate_baselines, evaluate_model, select_secrets, without_adapter
from evaluation.vllm_backend import LocalEngine, ServerEngine, ServerError
from models.loading import load_for_inference, load_generation_side, load_vllm
from settings.cli import help_requested, run_cli
from settings.errors import ConfigError, writing
from settings.evaluation import EvalArguments, decoding, openings, parse, run_config

logger = logging.getLogger("evaluate")


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
            start = None
            if args.adapter is not None and args.start:  # the same games without the adapter: what it started from
                with without_adapter(model) as base:
                    [start] = evaluate_model(
                        base, tokenizer, secrets, model_decoding, batch_size=args.batch_size, opening=opening
                    )
            mine = evaluate_model(
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
        if start is not None:
            mine[0].metrics["guesses_saved"] = guesses_saved(start.games, mine[0].games, seed=args.seed)
            results.append(start)
        results += mine
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
        with writing(out, then="rerun it"):
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
    return run_cli(lambda: run(parse(argv), console()), then="rerun it")


if __name__ == "__main__":
    sys.exit(main())
