"""Evaluation outputs: JSON, a Markdown table with replays and a rich terminal table (the PNG plots are
``evaluation.plots``).

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

from rich.console import Console
from rich.table import Table

from rewards import TURN_REWARDS
from wordle import MAX_GUESSES
from wordle.game import Game
from wordle.openings import Opening

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


def _saved(metrics: dict[str, Any]) -> str:
    """The guesses saved against the start, game by game, signed (a row with no start to compare with: blank)."""
    saved = metrics.get("guesses_saved")
    if saved is None or saved["mean"] is None:
        return ""
    return f"{saved['mean']:+.2f} [{saved['low']:+.2f}, {saved['high']:+.2f}]"


def _distribution(metrics: dict[str, Any]) -> str:
    d = metrics["distribution"]
    return " ".join(str(d[str(k)]) for k in range(1, MAX_GUESSES + 1)) + f" / {d['fail']}"


COLUMNS = (
    "player",
    "win rate",
    "guesses (wins)",
    "guesses saved vs start",
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
                _saved(m),
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


def plainly(results: Sequence[PlayerResult]) -> list[str]:
    """What training changed, in figures, one line per opening where a row was compared with its start (the
    first model row of the opening): the guesses saved game by game, and what the start already had."""
    lines = []
    for spec, group in by_opening(results).items():
        start = next((r for r in group if r.kind == "model"), None)
        trained = next((r for r in group if r.metrics.get("guesses_saved") is not None), None)
        if start is None or trained is None:
            continue
        was, now = start.metrics, trained.metrics
        lines.append(
            f"From {Opening.parse(spec).label}: {_saved(now)} guesses a game against the start on the same games "
            f"(a lost game counts {MAX_GUESSES + 1}); the start already won {_pct(was['win_rate'])} in "
            f"{_mean(was['mean_guesses_won'])} guesses a win, after training {_pct(now['win_rate'])} in "
            f"{_mean(now['mean_guesses_won'])}."
        )
    return lines


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
            "every state played. Guesses saved vs start: the start's guesses minus this row's, game by game on the "
            "same secrets from the same openings, a lost game counted as 7 (positive: fewer guesses). A constrained "
            "row is the model with its guesses masked to the listed words, not its own skill. Games that start from "
            "guesses the player did not choose show whether it reads the feedback or follows a memorised opening."
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
