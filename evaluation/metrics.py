"""Metrics of played games, each with a 95% confidence interval.

Rates use the Wilson score interval (sound near 0 and 1, where the normal approximation is not);
means use a seeded percentile bootstrap. Rates over turns treat turns as independent, which
they are not quite (turns of one game share a secret), so those intervals are a little narrow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rewards import TURN_REWARDS
from wordle import MAX_GUESSES
from wordle.game import Game, count, judged_guesses

Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 5_000
# A lost game counts one guess more than the most a won game can take, so that a player cannot look quicker
# by losing its long games: what the game-by-game comparison with the start counts.
LOST_GAME_GUESSES = MAX_GUESSES + 1


def wilson(successes: int, n: int, z: float = Z95) -> dict[str, Any]:
    """``{k, n, rate, low, high}``: the rate and its Wilson score interval. With n = 0 the rate is
    None and the interval all of [0, 1]: nothing was observed."""
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return {"k": 0, "n": 0, "rate": None, "low": 0.0, "high": 1.0}
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0 and n the bound is exactly 0 or 1; float residue would say otherwise.
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return {"k": successes, "n": n, "rate": p, "low": low, "high": high}


def mean_ci(values: Sequence[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, Any]:
    """``{n, mean, low, high}``: the mean and a seeded 95% percentile-bootstrap interval.
    Empty: all None. One value: the interval is that value."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return {"n": 0, "mean": None, "low": None, "high": None}
    rng = np.random.default_rng(seed)
    # In chunks, so that thousands of turns never need a resamples x n index array at once.
    chunk = max(1, 2_000_000 // x.size)
    means = np.concatenate(
        [
            x[rng.integers(0, x.size, size=(min(chunk, resamples - i), x.size))].mean(axis=1)
            for i in range(0, resamples, chunk)
        ]
    )
    low, high = np.percentile(means, [2.5, 97.5])
    return {"n": int(x.size), "mean": float(x.mean()), "low": float(low), "high": float(high)}


def game_guesses(game: Game) -> int:
    """The guesses ``game`` took (its given opening counted), or ``LOST_GAME_GUESSES`` if it was lost."""
    return game.guesses if game.won else LOST_GAME_GUESSES


def guesses_saved(start: Sequence[Game], trained: Sequence[Game], seed: int = 0) -> dict[str, Any]:
    """How many guesses fewer ``trained`` took than ``start``, game by game (a lost game counts
    ``LOST_GAME_GUESSES``): the mean with its 95% bootstrap interval over the paired games, which is narrower than
    two separate intervals because both players met the same secret from the same opening. Positive: fewer
    guesses after. ValueError if the two did not play the same games."""
    if [(g.secret, g.start) for g in start] != [(g.secret, g.start) for g in trained]:
        raise ValueError("the two players did not play the same games (the same secrets from the same openings)")
    return mean_ci([game_guesses(a) - game_guesses(b) for a, b in zip(start, trained, strict=True)], seed=seed)


def reward_states(games: Sequence[Game]) -> tuple[list[str], list[str], list[list[list[str]]]]:
    """Every turn played as a reward state: (replies, secrets, the valid history before the turn)."""
    replies, secrets, histories = [], [], []
    for game in games:
        for turn, history in zip(game.turns, game.histories(), strict=True):
            replies.append(turn.reply)
            secrets.append(game.secret)
            histories.append([list(pair) for pair in history])
    return replies, secrets, histories


def reward_means(games: Sequence[Game], seed: int = 0) -> dict[str, dict[str, Any]]:
    """Each per-turn reward (``rewards.TURN_REWARDS``), called on every state played (one batch per reward)."""
    replies, secrets, histories = reward_states(games)
    return {
        name: mean_ci(func(replies, secret=secrets, past_guess_history=histories), seed=seed)
        for name, func in TURN_REWARDS.items()
    }


def by_turn(games: Sequence[Game]) -> dict[str, dict[str, dict[str, Any]]]:
    """For each turn from the second (the first has no feedback to contradict): the share of its valid
    guesses that contradict the feedback so far, and that repeat an earlier guess. Shows at which
    turn a player stops using what it was told (issue 21 asked whether long prompts dilute it)."""
    valid, inconsistent, repeated = ([0] * (MAX_GUESSES + 1) for _ in range(3))
    for game in games:
        for k, history, contradicts, repeats in judged_guesses(game):
            if history:
                valid[k] += 1
                inconsistent[k] += contradicts
                repeated[k] += repeats
    return {
        str(k): {"inconsistent": wilson(inconsistent[k], valid[k]), "repeat": wilson(repeated[k], valid[k])}
        for k in range(2, MAX_GUESSES + 1)
    }


def compute_metrics(games: Sequence[Game], seed: int = 0) -> dict[str, Any]:
    """Win rate, guesses, invalid/inconsistent/repeat rates and reward means, with 95% CIs.

    Invalid rates are over turns played; inconsistent and repeat rates over valid guesses
    (a valid guess is inconsistent when it could not be the secret given the feedback so far), the
    contradiction rate over the valid guesses made with feedback in view.
    """
    counts = count(games)
    distribution = {str(k): 0 for k in range(1, MAX_GUESSES + 1)} | {"fail": 0}
    for game in games:
        distribution[str(game.guesses) if game.won else "fail"] += 1
    invalid = counts.format_failures + counts.nonwords
    return {
        "games": counts.games,
        "turns": counts.turns,
        "valid_guesses": counts.valid,
        "win_rate": wilson(counts.wins, counts.games),
        "mean_guesses_won": mean_ci(counts.won_guesses, seed=seed),
        "mean_guesses": mean_ci([game_guesses(g) for g in games], seed=seed),
        "distribution": distribution,
        "invalid_rate": wilson(invalid, counts.turns),
        "format_failure_rate": wilson(counts.format_failures, counts.turns),
        "nonword_rate": wilson(counts.nonwords, counts.turns),
        "inconsistent_rate": wilson(counts.inconsistent, counts.valid),
        # The clearer figure: a first guess has nothing to contradict, and counting it would flatter a player
        # whose games are short. Over the guesses made with feedback in view.
        "contradiction_rate": wilson(counts.inconsistent, counts.informed),
        "repeat_rate": wilson(counts.repeated, counts.valid),
        "by_turn": by_turn(games),
        "rewards": reward_means(games, seed=seed),
    }
