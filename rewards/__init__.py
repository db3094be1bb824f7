"""Reward functions for Wordle GRPO, built on ``wordle/``, and their registry.

Every reward is named for its metric key (TRL logs ``rewards/<name>/mean``). ``DEFAULT_WEIGHTS``
is what the trainer uses unless told otherwise; it is chosen so that, for every game state:

(a) any reply that is not an allowed word (unparseable, not five ASCII letters, or a non-word)
    totals strictly less than any parseable guess of an allowed word, whatever its feedback
    score: 0.5*1 + 0.1*1.0 < 1*1 + 0.1*(-2.5), i.e. the feedback weight stays below 1/7 of the
    format weight;
(b) guessing the secret totals strictly more than any other reply: the win weight exceeds the
    most the other terms can add, 2.0 > 0.1*(1.0 - (-2.5)) + 1.0.

tests/test_rewards.py checks both on fixed transcripts and on random states.

In game mode (``--rollout game``) ``game_reward``, the whole game's return, joins them with
``GAME_WEIGHTS``, and ``win_reward`` weighs 0 there (it is still logged): the game's return already pays
the win, more for a quicker one, while a turn's own win is a lottery among the answers still possible,
each as likely to be the secret, which drowned the information signal that teaches the choice among them
(docs/research-log.md). A turn's total is its own shaping plus its game's return, so in the same state
(a) still holds between replies whose games end alike, a hack also costing its game a turn, and the
winning reply totals more than any reply whose game is lost; a reply whose game is won later can total
more than the winning one, by at most the information it adds less the return of the guess it cost
(tests/test_rollout.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rewards.functions import (
    NO_GUESS_FEEDBACK,
    candidate_reward,
    feedback_reward,
    format_reward,
    game_reward,
    info_gain_reward,
    win_reward,
)

RewardFunc = Callable[..., list]

# The per-turn rewards: each scores one reply to one game state (both rollout modes).
TURN_REWARDS: dict[str, RewardFunc] = {
    f.__name__: f for f in (format_reward, feedback_reward, info_gain_reward, candidate_reward, win_reward)
}
# Every reward; game_reward needs the game columns that only --rollout game provides.
REWARD_FUNCS: dict[str, RewardFunc] = {**TURN_REWARDS, game_reward.__name__: game_reward}
GAME_ONLY = frozenset({game_reward.__name__})

# Documented range of each reward, checked by the property tests.
REWARD_RANGES: dict[str, tuple[float, float]] = {
    "format_reward": (0.0, 1.0),
    "feedback_reward": (-2.5, 1.0),
    "info_gain_reward": (0.0, 1.0),
    "candidate_reward": (0.0, 1.0),
    "win_reward": (0.0, 1.0),
    "game_reward": (0.0, 1.5),
}

DEFAULT_WEIGHTS: dict[str, float] = {
    "format_reward": 1.0,
    "feedback_reward": 0.1,
    "info_gain_reward": 1.0,
    "win_reward": 2.0,
}

# Game mode: the per-turn rewards keep their weights as shaping, but for the win, which the game's return
# pays (a won game gives each of its turns 2.0 to 3.0, more the fewer guesses it took); see the docstring.
GAME_WEIGHTS: dict[str, float] = {**DEFAULT_WEIGHTS, "win_reward": 0.0, "game_reward": 2.0}


def default_rewards(whole_games: bool) -> dict[str, float]:
    """The rewards and weights a run uses unless told otherwise: with ``game_reward`` when it plays whole games."""
    return dict(GAME_WEIGHTS if whole_games else DEFAULT_WEIGHTS)


def get_reward_funcs(names: Iterable[str] | None = None) -> list[RewardFunc]:
    """The reward functions for ``names`` (the per-turn ones, in registry order, by default)."""
    if names is None:
        return list(TURN_REWARDS.values())
    unknown = [n for n in names if n not in REWARD_FUNCS]
    if unknown:
        raise ValueError(f"unknown reward {', '.join(map(repr, unknown))}; valid: {', '.join(REWARD_FUNCS)}")
    return [REWARD_FUNCS[n] for n in names]


def total_reward(completions: list, weights: dict[str, float] | None = None, **columns) -> list[float]:
    """The weighted sum TRL computes from these rewards: what the ordering rules are stated on."""
    weights = DEFAULT_WEIGHTS if weights is None else weights
    totals = [0.0] * len(completions)
    for name, weight in weights.items():
        for i, value in enumerate(get_reward_funcs([name])[0](completions, **columns)):
            totals[i] += weight * value
    return totals


__all__ = [
    "DEFAULT_WEIGHTS",
    "GAME_ONLY",
    "GAME_WEIGHTS",
    "NO_GUESS_FEEDBACK",
    "REWARD_FUNCS",
    "REWARD_RANGES",
    "TURN_REWARDS",
    "candidate_reward",
    "default_rewards",
    "feedback_reward",
    "format_reward",
    "game_reward",
    "get_reward_funcs",
    "info_gain_reward",
    "total_reward",
    "win_reward",
]
