"""Evaluation outputs: JSON, a Markdown table with replays, PNG plots and a rich terminal table.

A result is one player's games and metrics (:class:`PlayerResult`). Results are always shown one
row per player; a constrained model is its own row, labelled as such.
"""

from __future__ import annotations

import json
import re
import sys
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console
from rich.table import Table

from rewards import REWARD_FUNCS, REWARD_RANGES, TURN_REWARDS
from wordle import MAX_GUESSES
from wordle.game import Game
from wordle.openings import Opening

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SQUARES = {"G": "🟩", "Y": "🟨", "B": "⬛"}
INVALID_MARK = "❌"
_REPLY_SHOWN = 48  # characters of an invalid reply shown in a replay


@dataclass
class PlayerResult:
    label: str
    kind: str  # "model", "constrained" or "baseline"
    metrics: dict[str, Any]
    games: list[Game] = field(default_factory=list)
    opening: str = "own"  # how every game started (wordle.openings.Opening.spec)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "kind": self.kind,
            "opening": self.opening,
            "metrics": self.metrics,
            "games": [g.to_dict() for g in self.games],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlayerResult:
        games = [Game.from_dict(g) for g in data["games"]]
        return cls(data["label"], data["kind"], data["metrics"], games, data.get("opening", "own"))

    @property
    def win_rate(self) -> float:
        return self.metrics["win_rate"]["rate"]


# --- replays --------------------------------------------------------------------------------------


def squares(pattern: str) -> str:
    """``"GYBBB"`` -> ``"🟩🟨⬛⬛⬛"``."""
    return "".join(SQUARES[m] for m in pattern.upper())


def replay_lines(game: Game) -> list[str]:
    """The game as Wordle shares it, one line per turn; an invalid turn says why, with its reply."""
    outcome = f"won in {game.guesses}" if game.won else f"lost after {game.guesses}"
    lines = [f"{game.secret} ({outcome})"]
    lines += [f"{k} {squares(pattern)} {guess} (given)" for k, (guess, pattern) in enumerate(game.start, start=1)]
    for turn in game.turns:
        if turn.status == "valid":
            lines.append(f"{turn.turn} {squares(turn.pattern)} {turn.guess}")
        else:
            reply = turn.reply if len(turn.reply) <= _REPLY_SHOWN else turn.reply[:_REPLY_SHOWN] + "…"
            lines.append(f"{turn.turn} {INVALID_MARK} {turn.status}: {reply!r}")
    return lines


def pick_replays(games: Sequence[Game], k: int) -> list[Game]:
    """``k`` games to show: wins and losses alternating, in secret order, so both are seen."""
    won = [g for g in games if g.won]
    lost = [g for g in games if not g.won]
    picked: list[Game] = []
    while len(picked) < k and (won or lost):
        for pool in (won, lost):
            if pool and len(picked) < k:
                picked.append(pool.pop(0))
    return picked


# --- tables ---------------------------------------------------------------------------------------


def _pct(rate: dict[str, Any]) -> str:
    if rate["rate"] is None:
        return "n/a"
    return f"{100 * rate['rate']:.1f}% [{100 * rate['low']:.1f}–{100 * rate['high']:.1f}]"


def _mean(value: dict[str, Any], digits: int = 2) -> str:
    if value["mean"] is None:
        return "n/a"
    return f"{value['mean']:.{digits}f} [{value['low']:.{digits}f}–{value['high']:.{digits}f}]"


def _distribution(metrics: dict[str, Any]) -> str:
    d = metrics["distribution"]
    return " ".join(str(d[str(k)]) for k in range(1, MAX_GUESSES + 1)) + f" / {d['fail']}"


COLUMNS = (
    "player",
    "win rate",
    "guesses (wins)",
    "1 2 3 4 5 6 / fail",
    "format fail",
    "non-word",
    "contradicts feedback",
    "repeat",
    *(name.removesuffix("_reward") for name in TURN_REWARDS),
)


def table_rows(results: Sequence[PlayerResult], ci: bool = True) -> list[list[str]]:
    """One row of cells per player; ``ci=False`` keeps the intervals of the win rate and guesses only."""
    rate = _pct if ci else (lambda r: "n/a" if r["rate"] is None else f"{100 * r['rate']:.1f}%")
    reward = (lambda v: _mean(v, 3)) if ci else (lambda v: "n/a" if v["mean"] is None else f"{v['mean']:.3f}")
    rows = []
    for r in results:
        m = r.metrics
        rows.append(
            [
                r.label,
                _pct(m["win_rate"]),
                _mean(m["mean_guesses_won"]),
                _distribution(m),
                rate(m["format_failure_rate"]),
                rate(m["nonword_rate"]),
                rate(m["contradiction_rate"]),
                rate(m["repeat_rate"]),
                *(reward(m["rewards"][name]) for name in TURN_REWARDS),
            ]
        )
    return rows


def markdown_table(results: Sequence[PlayerResult]) -> str:
    """The Markdown table alone: one row per player, 95% CIs in brackets."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in table_rows(results))])


def by_opening(results: Sequence[PlayerResult]) -> dict[str, list[PlayerResult]]:
    """The results grouped by how their games started, in first-seen order: one table each."""
    groups: dict[str, list[PlayerResult]] = {}
    for r in results:
        groups.setdefault(r.opening, []).append(r)
    return groups


def opening_heading(spec: str) -> str:
    return f"Games from {Opening.parse(spec).label}"


def markdown_tables(results: Sequence[PlayerResult], heading: str = "") -> str:
    """A Markdown table per opening, each under its heading (``heading`` goes before it: ``"## "``); games
    from the players' own opening alone get no heading."""
    groups = by_opening(results)
    parts = []
    for spec, group in groups.items():
        if len(groups) > 1 or spec != "own":
            parts.append(f"{heading}{opening_heading(spec)}")
        parts.append(markdown_table(group))
    return "\n\n".join(parts)


def markdown(
    results: Sequence[PlayerResult], title: str = "Wordle evaluation", replays: int = 3, notes: Sequence[str] = ()
) -> str:
    """A table per opening (one row per player, 95% CIs in brackets), then replays of the model rows' games."""
    games = results[0].metrics["games"] if results else 0
    lines = [
        f"# {title}",
        "",
        (
            f"{games} full games per player; rates over games (win), turns (invalid) or guesses made with feedback "
            "in view (contradicts feedback) and valid guesses (repeat); reward columns are each reward's mean over "
            "every state played. A constrained row is the model with its guesses masked to the listed words, not "
            "its own skill. Games that start from guesses the player did not choose show whether it reads the "
            "feedback or follows a memorised opening."
        ),
        "",
        *[f"- {n}" for n in notes],
        *([""] if notes else []),
    ]
    lines += [markdown_tables(results, heading="## "), ""]
    for r in results:
        if r.kind == "baseline" or replays <= 0:
            continue
        suffix = "" if r.opening == "own" else f", {Opening.parse(r.opening).label}"
        lines += [f"## Replays: {r.label}{suffix}", ""]
        for game in pick_replays(r.games, replays):
            lines += ["```", *replay_lines(game), "```"]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def rich_table(results: Sequence[PlayerResult], title: str | None = None) -> Table:
    """The terminal's table: 95% CIs on the win rate and mean guesses only, to fit a terminal
    (the Markdown and JSON carry every interval)."""
    games = results[0].metrics["games"] if results else 0
    table = Table(title=title or f"Wordle, {games} full games (95% CI)")
    for i, column in enumerate(COLUMNS):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in table_rows(results, ci=False):
        table.add_row(*row)
    return table


def console() -> Console:
    """A console for the tables: a terminal's own width, or wide enough when output goes to a file or pipe."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def write_json(path: str | Path, results: Sequence[PlayerResult], settings: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"settings": settings, "players": [r.to_dict() for r in results]}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_json(path: str | Path) -> tuple[dict[str, Any], list[PlayerResult]]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return data["settings"], [PlayerResult.from_dict(p) for p in data["players"]]


# --- plots ----------------------------------------------------------------------------------------

# One colour per player, the same in every plot of every run. The starting model is "before" in
# grpo_train and "model" in evaluate.py, the trained one "after" and "model + adapter": each pair
# shares a colour, so the two scripts' plots read alike. Okabe-Ito colours, safe for colour blindness.
PLAYER_COLOURS: dict[str, str] = {
    "before": "#0072B2",
    "model": "#0072B2",
    "after": "#D55E00",
    "model + adapter": "#D55E00",
    "solver": "#009E73",
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
    window. Validation only: the held-out secrets are read once, by the final table. None without a periodic
    check."""
    history = [h for h in load_log_history(source) if "step" in h]
    checks = [h for h in history if "val/win_rate" in h]
    if not checks:
        return None
    fig = _figure(figsize=(8, 4.5))
    ax = fig.subplots()
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
    return fig


def plot_learning_curve(source: str | Path | Sequence[dict[str, Any]], path: str | Path) -> Path | None:
    """:func:`learning_curve_figure` saved as a PNG at ``path``; None (and no file) without a periodic check."""
    fig = learning_curve_figure(source)
    return None if fig is None else _save(fig, path)
