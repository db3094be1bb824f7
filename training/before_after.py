"""The full games before and after training, on the held-out secrets from each of ``--eval_openings``:
``eval/before.json`` (reused on --resume), ``eval/after.json``, the tables, the plots and ``eval.md``.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from transformers.integrations import TensorBoardCallback

from evaluation.metrics import compute_metrics, guesses_saved
from evaluation.plots import plot_by_turn, plot_guess_histogram, plot_learning_curve, plot_reward_curves
from evaluation.report import (
    PlayerResult,
    by_opening,
    console,
    markdown,
    markdown_tables,
    opening_heading,
    plainly,
    read_json,
    rich_table,
    write_json,
)
from evaluation.run import evaluate_baselines, evaluate_model, select_secrets, without_adapter
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


def _announce(resolved: Resolved, when: str) -> None:
    """The line that opens the games before or after training (the signal tests wait on it)."""
    logger.info(
        "playing the games %s training: %d held-out secrets from %s",
        when,
        resolved.script.eval_games,
        ", ".join(resolved.script.eval_openings),
    )


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
    _announce(resolved, "before")
    before = _play(resolved, model, tokenizer, "before")
    base = []
    if resolved.script.adapter:  # the start is the adapter GRPO continues: the model without it plays too
        with without_adapter(model) as bare:
            base = _play(resolved, bare, tokenizer, "base")
    if not distributed.is_main():
        return [*before, *base]
    secrets = select_secrets(resolved.script.eval_games)
    results = []
    for mine in before:
        bare = [r for r in base if r.opening == mine.opening]
        results += [mine, *bare, *evaluate_baselines(secrets, resolved.training.seed, Opening.parse(mine.opening))]
    write_json(path, results, eval_settings(resolved))
    return results


def evaluate_end(resolved: Resolved, trainer, tokenizer, out: Path, before: list[PlayerResult]) -> list[PlayerResult]:
    """The trained model's games, the before/after tables (one per opening), and the files under ``eval/``."""
    directory = out / EVAL_DIR
    _announce(resolved, "after")
    after = _play(resolved, trainer.model, tokenizer, "after")
    if not distributed.is_main():
        return [*before, *after]
    for mine in after:  # game by game against the start, which played the same secrets from the same openings
        was = next(r for r in before if r.opening == mine.opening)
        mine.metrics["guesses_saved"] = guesses_saved(was.games, mine.games, seed=resolved.training.seed)
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
    if resolved.script.adapter:
        note += f"; before: the adapter GRPO continued ({resolved.script.adapter}); base: the model without it"
    notes = [note, *plainly(results)]
    (directory / "eval.md").write_text(markdown(results, title="Before and after training", notes=notes))
    games = after[0].metrics["games"]
    for spec, group in by_opening(results).items():
        console().print(rich_table(group, title=f"Before and after training: {opening_heading(spec)}, {games} games"))
    for mine in after:
        was = next(r for r in before if r.opening == mine.opening)
        saved = mine.metrics["guesses_saved"]
        logger.info(
            "evaluation, %s: win rate %.3f before, %.3f after; %+.2f guesses a game [%+.2f, %+.2f] fewer after",
            Opening.parse(mine.opening).label,
            was.win_rate,
            mine.win_rate,
            saved["mean"],
            saved["low"],
            saved["high"],
        )
    logger.info("evaluation files in %s", directory)
    report_to_trackers(trainer, results)  # after the files, so that a tracker's failure never costs them
    return results


def card_evaluation(results: list[PlayerResult]) -> str:
    """The adapter card's evaluation: what training changed in plain figures, then the tables."""
    lines = "\n".join(f"- {line}" for line in plainly(results))
    return (
        f"{lines}\n\n{markdown_tables(results, heading='### ')}" if lines else markdown_tables(results, heading="### ")
    )


# --- the trackers (--report_to) ----------------------------------------------------------------------------

# What each player's row gives the trackers: the metrics of evaluation.metrics, each a rate or a mean with its
# 95% interval.
FIGURES = (
    "win_rate",
    "mean_guesses_won",
    "guesses_saved",
    "contradiction_rate",
    "repeat_rate",
    "format_failure_rate",
    "invalid_rate",
)
TABLE_KEY = "eval/before_after"
TABLE_COLUMNS = (
    "opening",
    "player",
    "kind",
    "games",
    *(f"{f}{end}" for f in FIGURES for end in ("", "_ci_low", "_ci_high")),
)


def figures(metric: dict | None) -> tuple[float | None, float | None, float | None]:
    """A rate (``wilson``) or a mean (``mean_ci``) and its interval; None where nothing was observed, or the
    row has no such figure (the start has no guesses saved against itself)."""
    if metric is None:
        return None, None, None
    value = metric["rate"] if "rate" in metric else metric["mean"]
    if value is None:
        return None, None, None
    return value, metric["low"], metric["high"]


def opening_key(spec: str) -> str:
    """An opening as a tracker key's part: ``answer:2`` -> ``answer_2`` (TensorBoard renames ``:`` and ``,``)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", spec)


def final_scalars(results: list[PlayerResult]) -> dict[str, float]:
    """The model's figures before and after, per opening: ``eval_OPENING/PLAYER/FIGURE`` with ``_ci_low`` and
    ``_ci_high``. The ``eval_`` prefix is the Trainer's own for evaluation, which every tracker callback files
    under ``eval/`` (``eval/own/after/win_rate``). A figure with nothing observed is left out."""
    logs = {}
    for result in results:
        if result.kind == "baseline":  # the baselines' figures never change: the table holds them
            continue
        prefix = f"eval_{opening_key(result.opening)}/{result.label}"
        for name in FIGURES:
            value, low, high = figures(result.metrics.get(name))
            if value is not None:
                logs |= {f"{prefix}/{name}": value, f"{prefix}/{name}_ci_low": low, f"{prefix}/{name}_ci_high": high}
    return logs


def final_table(results: list[PlayerResult]) -> list[list]:
    """One row per player per opening, baselines included, in ``TABLE_COLUMNS`` order."""
    rows = []
    for r in results:
        cells = [value for name in FIGURES for value in figures(r.metrics.get(name))]
        rows.append([r.opening, r.label, r.kind, r.metrics["games"], *cells])
    return rows


def _wandb_table(trainer, results: list[PlayerResult]) -> None:
    import wandb

    if wandb.run is not None:  # transformers started it; it stays open until the process ends
        table = wandb.Table(columns=list(TABLE_COLUMNS), data=final_table(results))
        wandb.log({TABLE_KEY: table, "train/global_step": trainer.state.global_step})


def _trackio_table(trainer, results: list[PlayerResult]) -> None:
    import trackio

    # The run transformers closed at the end of training was reopened, by its name, by trainer.log's scalars.
    table = trackio.Table(columns=list(TABLE_COLUMNS), data=final_table(results))
    trackio.log({TABLE_KEY: table, "train/global_step": trainer.state.global_step})


def _tensorboard_table(trainer, results: list[PlayerResult]) -> None:
    # TensorBoard has no tables: its text dashboard renders Markdown. The writer is the callback's own,
    # reopened in the same log directory by trainer.log's scalars.
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.tb_writer is not None:
            callback.tb_writer.add_text(TABLE_KEY, markdown_tables(results, heading="#### "), trainer.state.global_step)
            callback.tb_writer.flush()


# Each tracker's own table object; a tracker not named here gets the scalars alone.
TABLES = {"wandb": _wandb_table, "trackio": _trackio_table, "tensorboard": _tensorboard_table}


def report_to_trackers(trainer, results: list[PlayerResult]) -> None:
    """The final evaluation in every ``--report_to`` tracker, at the last step: the scalars through
    ``trainer.log`` (every tracker's callback gets them, and the log history), the table through each
    tracker's own table. The main process only: no collective runs here."""
    if not trainer.args.report_to:
        return
    trainer.log(final_scalars(results))
    for tracker in trainer.args.report_to:
        if tracker in TABLES:
            TABLES[tracker](trainer, results)
