"""What the training logs say of a set of games: their rates (won, guesses per win, invalid, contradicting), and
how many of game mode's turns are the only live game of their slot, which carry no signal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wordle.game import Game, count


def game_rates(games: Sequence[Game], prefix: str = "game") -> dict[str, float]:
    """``PREFIX/*`` metrics of a set of games: win rate, guesses per win, invalid and inconsistent rates, and the
    share of guesses made with feedback in view that contradict it."""
    c = count(games)
    rates = {
        f"{prefix}/win_rate": c.wins / max(c.games, 1),
        f"{prefix}/invalid_rate": (c.format_failures + c.nonwords) / max(c.turns, 1),
    }
    if c.won_guesses:
        rates[f"{prefix}/guesses"] = sum(c.won_guesses) / len(c.won_guesses)
    if c.valid:
        rates[f"{prefix}/inconsistent_rate"] = c.inconsistent / c.valid
    if c.informed:
        rates[f"{prefix}/contradiction_rate"] = c.inconsistent / c.informed
    return rates


def lone_turn_share(games: Sequence[Game], generations: int) -> float:
    """The share of turns after the first that are the only live game of their start state's slot:
    each such turn is its own group's mean, so it has advantage 0 and teaches nothing. (3.6% over the
    main job's steps; pooling a slot's baseline over the step's start states did not help, docs/research-log.md.)"""
    lone = later = 0
    for first in range(0, len(games), generations):
        lengths = [len(game.turns) for game in games[first : first + generations]]
        for slot in range(1, max(lengths, default=0)):
            live = sum(length > slot for length in lengths)
            later += live
            lone += live == 1
    return lone / max(later, 1)


def log_game_metrics(trainer: Any, games: Sequence[Game], generations: int) -> None:
    # What TRL's completions/* metrics cannot say: how the games went (the trainer counts only live turns in
    # those, WordleGRPOTrainer._count_live_turns). _log_metric averages over the logging interval and processes.
    for name, value in game_rates(games).items():
        trainer._log_metric(name, value)
    trainer._log_metric("game/lone_turns", lone_turn_share(games, generations))
