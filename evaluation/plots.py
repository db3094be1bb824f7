"""Evaluation's PNG plots: guesses per game, play by turn, reward curves and the learning curve, in
one colour per player across every plot of both scripts.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evaluation.report import PlayerResult
from rewards import REWARD_FUNCS, REWARD_RANGES
from wordle import MAX_GUESSES

if TYPE_CHECKING:
    from matplotlib.figure import Figure


# One colour per player, the same in every plot of every run. The starting model is "before" in
# grpo_train and "model" in evaluate.py, the trained one "after" and "model + adapter": each pair
# shares a colour, so the two scripts' plots read alike. Okabe-Ito colours, safe for colour blindness.
PLAYER_COLOURS: dict[str, str] = {
    "before": "#0072B2",
    "model": "#0072B2",
    "after": "#D55E00",
    "model + adapter": "#D55E00",
    "solver": "#009E73",
    "entropy over answers": "#56B4E9",
    "entropy over candidates": "#E69F00",
    "random candidate": "#CC79A7",
    "random allowed": "#999999",
}
# Players named otherwise (a caller's own label) get one of these, by a hash of the label: fixed
# across runs, unlike Python's salted hash().
_OTHER_COLOURS = ("#E69F00", "#56B4E9", "#000000")  # Okabe-Ito's yellow is too faint on white
TRAINED_COLOUR = PLAYER_COLOURS["after"]  # the reward curves are the trained model's
# A constrained row is named after its model ("model + adapter (constrained: allowed words)", or
# play.py's default "model, constrained to allowed words"); it is drawn in that model's colour, hatched.
_CONSTRAINED_SUFFIX = re.compile(r" \(constrained: .*\)$|, constrained to .*$")


def player_colour(label: str) -> str:
    """The colour of the player ``label`` (a constrained row: its model's)."""
    base = _CONSTRAINED_SUFFIX.sub("", label)
    return PLAYER_COLOURS.get(base) or _OTHER_COLOURS[zlib.crc32(base.encode()) % len(_OTHER_COLOURS)]


def _figure(**kwargs: Any) -> Figure:
    # Imported here: matplotlib adds half a second to every start of both scripts, --help included.
    # A bare Figure, not pyplot: no backend to choose and no global list of open figures to close.
    from matplotlib.figure import Figure

    return Figure(layout="constrained", **kwargs)


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def guess_histogram_figure(results: Sequence[PlayerResult]) -> Figure:
    """Grouped bars: the share of games won in 1..6 guesses, and lost, per player, in the given order."""
    buckets = [*(str(k) for k in range(1, MAX_GUESSES + 1)), "fail"]
    width = 0.8 / max(1, len(results))
    fig = _figure(figsize=(9, 4.5))
    ax = fig.subplots()
    for i, r in enumerate(results):
        d, n = r.metrics["distribution"], max(1, r.metrics["games"])
        xs = [j + (i - (len(results) - 1) / 2) * width for j in range(len(buckets))]
        colour = player_colour(r.label)
        style = {"color": colour}
        if r.kind == "constrained":  # the engine's skill, not the model's: set apart at a glance
            style = {"color": "white", "edgecolor": colour, "hatch": "///"}
        ax.bar(xs, [d[b] / n for b in buckets], width=width, label=r.label, **style)
    ax.set_xticks(range(len(buckets)), buckets)
    ax.set_xlabel(f"guesses to win (fail = not solved in {MAX_GUESSES})")
    ax.set_ylabel("share of games")
    ax.yaxis.set_major_formatter(lambda share, _: f"{100 * share:.0f}%")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    games = results[0].metrics["games"] if results else 0
    ax.set_title(f"Guesses to win, {games} held-out games per player")
    if results:
        ax.legend(
            ax.containers,
            [f"{r.label}: {100 * r.win_rate:.1f}% won" for r in results],
            loc="upper left",
            fontsize="small",
        )
    return fig


def plot_guess_histogram(results: Sequence[PlayerResult], path: str | Path) -> Path:
    """:func:`guess_histogram_figure` saved as a PNG at ``path``."""
    return _save(guess_histogram_figure(results), path)


def by_turn_figure(results: Sequence[PlayerResult]) -> Figure:
    """Per model row (baselines left out), the share of valid guesses at each turn that contradict the
    feedback so far (solid, with 95% intervals) and that repeat an earlier guess (dashed)."""
    fig = _figure(figsize=(8, 4.5))
    ax = fig.subplots()
    for r in results:
        turns = r.metrics.get("by_turn")
        if r.kind == "baseline" or not turns:
            continue
        colour = player_colour(r.label)
        for key, style in (("inconsistent", "o-"), ("repeat", "s--")):
            points = [(int(k), v[key]) for k, v in turns.items() if v[key]["rate"] is not None]
            if not points:
                continue
            x = [k for k, _ in points]
            y = [w["rate"] for _, w in points]
            err = [[w["rate"] - w["low"] for _, w in points], [w["high"] - w["rate"] for _, w in points]]
            alpha = 1.0 if key == "inconsistent" else 0.6
            ax.errorbar(x, y, yerr=err, fmt=style, color=colour, alpha=alpha, capsize=3, label=f"{r.label}: {key}")
    ax.set_xticks(range(2, MAX_GUESSES + 1))
    ax.set(xlabel="turn", ylabel="share of valid guesses", ylim=(0, 1))
    ax.set_title("Guesses that contradict the feedback (solid) or repeat a guess (dashed), by turn")
    ax.yaxis.set_major_formatter(lambda share, _: f"{100 * share:.0f}%")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a model with no valid guess has nothing to draw
        ax.legend(loc="upper left", fontsize="small")
    return fig


def plot_by_turn(results: Sequence[PlayerResult], path: str | Path) -> Path:
    """:func:`by_turn_figure` saved as a PNG at ``path``."""
    return _save(by_turn_figure(results), path)


def load_log_history(source: str | Path | Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A trainer's log history: the list itself (``trainer.state.log_history``), that list as JSON
    (grpo_train's ``eval/log_history.json``), or a ``trainer_state.json`` (or a directory holding one).

    Raises ValueError, with a one-line message, for a path that is none of these.
    """
    if not isinstance(source, (str, Path)):
        return list(source)
    path = Path(source)
    if path.is_dir():
        path = path / "trainer_state.json"
    problem = f"{path.resolve()} is neither a trainer_state.json (or a directory holding one) nor a log_history.json"
    if not path.is_file():
        raise ValueError(f"{problem}: it does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{problem}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{problem}: not text") from None
    history = data.get("log_history") if isinstance(data, dict) else data
    if isinstance(data, dict) and not isinstance(history, list):
        raise ValueError(f"{problem}: an object without a log_history list")
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise ValueError(f"{problem}: not a list of log objects")
    return history


def _total_range(weights: Mapping[str, float]) -> tuple[float, float]:
    """The weighted total's range, from each reward's documented range."""
    lows, highs = zip(*(sorted((w * REWARD_RANGES[n][0], w * REWARD_RANGES[n][1])) for n, w in weights.items()))
    return sum(lows), sum(highs)


def reward_curves_figure(
    source: str | Path | Sequence[dict[str, Any]], weights: Mapping[str, float] | None = None
) -> Figure | None:
    """One panel per reward (``rewards/<name>/mean`` per logged step), plus the weighted total, each
    on its documented range (the total's from ``weights``, the run's reward weights, when given).
    None when the history holds no reward logs."""
    history = [h for h in load_log_history(source) if "step" in h]
    logged = {k for h in history for k in h}
    logged_rewards = {k[len("rewards/") : -len("/mean")] for k in logged if re.fullmatch(r"rewards/.+/mean", k)}
    names = [n for n in REWARD_FUNCS if n in logged_rewards] + sorted(logged_rewards - set(REWARD_FUNCS))
    keys = [f"rewards/{n}/mean" for n in names] + (["reward"] if "reward" in logged else [])
    if not keys:
        return None
    cols = min(3, len(keys))
    rows = -(-len(keys) // cols)
    fig = _figure(figsize=(4.2 * cols, 3.2 * rows + 0.5))
    axes = fig.subplots(rows, cols, squeeze=False)
    window = 1
    for ax, key in zip(axes.flat, keys):
        steps, values = zip(*[(h["step"], h[key]) for h in history if key in h])
        # Each logged step is one group of completions, so a long run's raw curve is mostly noise:
        # it is drawn faint, and the trend is the moving average over about a fiftieth of the run.
        window = max(1, len(values) // 50)
        if window > 1:
            ax.plot(steps, values, linewidth=0.5, alpha=0.3, color=TRAINED_COLOUR)
            smooth = np.convolve(values, np.ones(window) / window, mode="valid")
            ax.plot(steps[window - 1 :], smooth, linewidth=1.5, color=TRAINED_COLOUR)
        else:
            ax.plot(steps, values, linewidth=1.5, marker=".", color=TRAINED_COLOUR)
        ax.xaxis.get_major_locator().set_params(integer=True)  # no step 1.5 on a short run
        name = key.removeprefix("rewards/").removesuffix("/mean")
        if key == "reward":
            ax.set_title("total (weighted sum)")
            span = _total_range(weights) if weights and all(n in REWARD_RANGES for n in weights) else None
        else:
            ax.set_title(name)
            span = REWARD_RANGES.get(name)
        ax.set_xlabel("GRPO step")
        if span is None:
            ax.set_ylabel("mean over the step")
        else:
            # The documented range as the axis, so every run's panels compare at a glance.
            pad = 0.05 * (span[1] - span[0])
            ax.set_ylim(span[0] - pad, span[1] + pad)
            ax.set_ylabel(f"mean over the step, range [{span[0]:g}, {span[1]:g}]")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.set_visible(False)
    how = f"thin: each logged step; thick: mean of {window} logged steps" if window > 1 else "each logged step"
    fig.suptitle(f"Rewards during GRPO training ({how})")
    return fig


def plot_reward_curves(
    source: str | Path | Sequence[dict[str, Any]], path: str | Path, weights: Mapping[str, float] | None = None
) -> Path | None:
    """:func:`reward_curves_figure` saved as a PNG at ``path``; None (and no file) when the history
    holds no reward logs."""
    fig = reward_curves_figure(source, weights)
    return None if fig is None else _save(fig, path)


def learning_curve_figure(source: str | Path | Sequence[dict[str, Any]]) -> Figure | None:
    """Win rate against training steps: the periodic greedy check on validation secrets (what settings are
    chosen on) from the model's own opening and from a random answer played first, the share of its guesses
    that contradict the feedback, and in game mode the sampled training games of each step, averaged over a
    window; beside it, where the check logged them, the guesses per win from both openings (what is left to
    learn once it wins). Validation only: the held-out secrets are read once, by the final table. None without
    a periodic check."""
    history = [h for h in load_log_history(source) if "step" in h]
    checks = [h for h in history if "val/win_rate" in h]
    if not checks:
        return None
    guesses = [key for key in ("val/guesses", "val_opening/guesses") if all(key in h for h in checks)]
    fig = _figure(figsize=(12, 4.5) if guesses else (8, 4.5))
    ax, *right = fig.subplots(1, 2 if guesses else 1, width_ratios=[3, 2] if guesses else None, squeeze=False)[0]
    steps = [h["step"] for h in checks]
    lines = (
        ("val/win_rate", "o-", TRAINED_COLOUR, "validation, its own opening: won"),
        ("val_opening/win_rate", "o:", TRAINED_COLOUR, "validation, a random answer first: won"),
        ("val/contradiction_rate", "s-", PLAYER_COLOURS["before"], "its own opening: guesses contradicting feedback"),
        ("val_opening/contradiction_rate", "s:", PLAYER_COLOURS["before"], "a random answer first: contradicting"),
    )
    for key, style, colour, label in lines:
        if all(key in h for h in checks):
            ax.plot(steps, [h[key] for h in checks], style, color=colour, label=label)
    sampled = [(h["step"], h["game/win_rate"]) for h in history if "game/win_rate" in h]
    if sampled:
        window = max(1, len(sampled) // 20)
        x, y = zip(*sampled)
        smooth = np.convolve(y, np.ones(window) / window, mode="valid")
        ax.plot(x[window - 1 :], smooth, color="grey", alpha=0.7, label=f"training games, sampled ({window}-step mean)")
    ax.set(xlabel="training step", ylabel="share of games (won) or of guesses", ylim=(0, 1), title="Learning curve")
    ax.grid(alpha=0.3)
    ax.legend(loc="center right", fontsize="small")
    for axis in right:
        for key, style, label in zip(guesses, ("o-", "o:"), ("its own opening", "a random answer first"), strict=False):
            axis.plot(steps, [h[key] for h in checks], style, color=TRAINED_COLOUR, label=label)
        axis.set(xlabel="training step", ylabel="guesses per won game", title="Validation: guesses per win")
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    return fig


def plot_learning_curve(source: str | Path | Sequence[dict[str, Any]], path: str | Path) -> Path | None:
    """:func:`learning_curve_figure` saved as a PNG at ``path``; None (and no file) without a periodic check."""
    fig = learning_curve_figure(source)
    return None if fig is None else _save(fig, path)
