"""The full games before and after training, on the held-out secrets from each of ``--eval_openings``:
``eval/before.json`` (reused on --resume), ``eval/after.json``, the tables, the plots and ``eval.md``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from evaluation.metrics import compute_metrics
from evaluation.plots import plot_by_turn, plot_guess_histogram, plot_learning_curve, plot_reward_curves
from evaluation.report import (
    PlayerResult,
    by_opening,
    console,
    markdown,
    opening_heading,
    read_json,
    rich_table,
    write_json,
)
from evaluation.run import evaluate_baselines, evaluate_model, select_secrets
from runtime import distributed
from settings.config import Resolved
from settings.summary import eval_settings
from wordle.openings import Opening

logger = logging.getLogger(__name__)

EVAL_DIR = "eval"


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
