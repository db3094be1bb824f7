"""How well a player chooses among what the feedback left: the expected information of its guess on fixed game
states, which separates a player that plans its guesses from one that picks any still-possible answer.

Wins and guesses per game mix this choice with the luck of the secrets; on fixed states the same player always
meets the same choices, so two players (a start and its adapter) compare state by state. The states are games of
the given secrets from any opening (the model's own opener, a random answer or a random allowed word), then zero to
two random still-possible answers, kept where at least three answers remain (with two or fewer, any of them is as
good a guess as another).

    states = information_states(train_secrets("val"))       # what the research probe and the slow test use
    information_of(ModelPlayer(model, tokenizer), states)    # mean_ci of each state's information, 0 to 1
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from evaluation.metrics import mean_ci
from rewards import info_gain_reward
from wordle import Solver, allowed, answers, candidates
from wordle.game import GameView, History, Player, play_guesses

# The fewest answers left for a state to hold a choice worth measuring.
MIN_CANDIDATES = 3


def information_states(secrets: Sequence[str], per_secret: int = 2, seed: int = 0) -> list[tuple[str, History]]:
    """``(secret, history)`` states, seeded: ``per_secret`` draws for each secret, of which those with at least
    ``MIN_CANDIDATES`` answers still possible are kept (about 70%). A third open with the answer of most opening
    information (RAISE, the embedded model's own opener)."""
    opener = Solver("answers").next_guess()
    rng = random.Random(seed)
    states = []
    for secret in secrets:
        for _ in range(per_secret):
            draw = rng.random()
            first = opener if draw < 1 / 3 else rng.choice(answers()) if draw < 2 / 3 else rng.choice(allowed())

            def choose(history: list[tuple[str, str]], first: str = first, secret: str = secret) -> str:
                if not history:
                    return first
                left = [w for w in candidates(history).words() if w != secret]
                return rng.choice(left) if left else secret

            history = tuple(play_guesses(secret, 1 + rng.randint(0, 2), choose))
            if len(candidates(history)) >= MIN_CANDIDATES:
                states.append((secret, history))
    return states


def information_of(player: Player, states: Sequence[tuple[str, History]], seed: int = 0) -> dict[str, Any]:
    """The expected information of ``player``'s reply in each state (``info_gain_reward``: bits over the answers
    still possible, over log2 of their number; 0 for a reply that is no allowed word): the mean over the states
    with its 95% interval, and ``per_state`` for comparing two players state by state."""
    views = [GameView(history, len(history) + 1, i) for i, (_, history) in enumerate(states)]
    replies = player.replies(views)
    values = info_gain_reward(
        replies,
        past_guess_history=[[list(pair) for pair in history] for _, history in states],
        secret=[secret for secret, _ in states],
    )
    return mean_ci(values, seed=seed) | {"per_state": values}
