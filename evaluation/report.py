"""Evaluation outputs: JSON, a Markdown table with replays, PNG plots and a rich terminal table.

A result is one player's games and metrics (:class:`PlayerResult`). Results are always shown one
row per player; a constrained model is its own row, labelled as such.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from evaluation.play import Game
from rewards import REWARD_FUNCS
from wordle import MAX_GUESSES

SQUARES = {"G": "🟩", "Y": "🟨", "B": "⬛"}
INVALID_MARK = "❌"
_REPLY_SHOWN = 48  # characters of an invalid reply shown in a replay


@dataclass
class PlayerResult:
    label: str
    kind: str  # "model", "constrained" or "baseline"
    metrics: dict[str, Any]
    games: list[Game] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "kind": self.kind,
            "metrics": self.metrics,
            "games": [g.to_dict() for g in self.games],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlayerResult:
        return cls(data["label"], data["kind"], data["metrics"], [Game.from_dict(g) for g in data["games"]])

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
    "inconsistent",
    "repeat",
    *(name.removesuffix("_reward") for name in REWARD_FUNCS),
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
                rate(m["inconsistent_rate"]),
                rate(m["repeat_rate"]),
                *(reward(m["rewards"][name]) for name in REWARD_FUNCS),
            ]
        )
    return rows


def markdown(
    results: Sequence[PlayerResult], title: str = "Wordle evaluation", replays: int = 3, notes: Sequence[str] = ()
) -> str:
    """A table (one row per player, 95% CIs in brackets), then replays of the model rows' games."""
    games = results[0].metrics["games"] if results else 0
    lines = [
        f"# {title}",
        "",
        (
            f"{games} full games per player; rates over games (win), turns (invalid) or valid guesses "
            "(inconsistent, repeat); reward columns are each reward's mean over every state played. "
            "A constrained row is the model with its guesses masked to the listed words, not its own skill."
        ),
        "",
        *[f"- {n}" for n in notes],
        *([""] if notes else []),
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *("| " + " | ".join(row) + " |" for row in table_rows(results)),
    ]
    for r in results:
        if r.kind == "baseline" or replays <= 0:
            continue
        lines += ["", f"## Replays: {r.label}", ""]
        for game in pick_replays(r.games, replays):
            lines += ["```", *replay_lines(game), "```"]
    return "\n".join(lines) + "\n"


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


def _save(plt, fig, path: str | Path) -> Path:
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    return plt


def plot_guess_histogram(results: Sequence[PlayerResult], path: str | Path) -> Path:
    """Grouped bars: the share of games won in 1..6 guesses, and lost, per player."""
    plt = _pyplot()
    buckets = [*(str(k) for k in range(1, MAX_GUESSES + 1)), "fail"]
    width = 0.8 / max(1, len(results))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, r in enumerate(results):
        d, n = r.metrics["distribution"], max(1, r.metrics["games"])
        xs = [j + (i - (len(results) - 1) / 2) * width for j in range(len(buckets))]
        ax.bar(xs, [d[b] / n for b in buckets], width=width, label=r.label)
    ax.set_xticks(range(len(buckets)), buckets)
    ax.set_xlabel("guesses to win")
    ax.set_ylabel("share of games")
    ax.set_title(f"Guess counts over {results[0].metrics['games'] if results else 0} games")
    ax.legend(fontsize="small")
    return _save(plt, fig, path)


def load_log_history(source: str | Path | Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A trainer's log history: the list itself (``trainer.state.log_history``), or a
    ``trainer_state.json`` path (or a directory holding one)."""
    if not isinstance(source, (str, Path)):
        return list(source)
    path = Path(source)
    if path.is_dir():
        path = path / "trainer_state.json"
    return json.loads(path.read_text(encoding="utf-8"))["log_history"]


def plot_reward_curves(source: str | Path | Sequence[dict[str, Any]], path: str | Path) -> Path | None:
    """Each reward's mean per logged step (``rewards/<name>/mean``), one panel per reward, plus
    the total. None when the history holds no reward logs."""
    history = [h for h in load_log_history(source) if "step" in h]
    keys = sorted({k for h in history for k in h if k.startswith("rewards/") and k.endswith("/mean")})
    if "reward" in {k for h in history for k in h}:
        keys.append("reward")
    if not keys:
        return None
    plt = _pyplot()
    cols = min(3, len(keys))
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        steps, values = zip(*[(h["step"], h[key]) for h in history if key in h])
        ax.plot(steps, values, linewidth=0.5, alpha=0.3, color="tab:blue")
        # Each logged step is one group of completions, so the raw curve is mostly noise: the trend
        # is the moving average over about a fiftieth of the run.
        window = max(1, len(values) // 50)
        if window > 1:
            smooth = np.convolve(values, np.ones(window) / window, mode="valid")
            ax.plot(steps[window - 1 :], smooth, linewidth=1.5, color="tab:blue", label=f"mean of {window} logs")
            ax.legend(loc="lower right", fontsize=7)
        ax.set_title(key.removeprefix("rewards/").removesuffix("/mean") if key != "reward" else "total (weighted)")
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(keys) :]:
        ax.set_visible(False)
    return _save(plt, fig, path)
