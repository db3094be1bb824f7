"""The reward functions. Each is pure: ``(completions, **dataset_columns) -> list[float]``.

Completions are plain strings or chat-format message lists (TRL passes either). The dataset
columns arrive as keyword lists, one entry per completion:

- ``secret``: the answer, a five-letter word in any case;
- ``past_guess_history``: a list of ``[GUESS, PATTERN]`` pairs, PATTERN being five G/Y/B marks.

In game mode (``--rollout game``) the rollout adds per-turn columns: ``game_turn`` (the turn's
number, None for a placeholder slot of a game that had already ended), ``game_won`` and
``game_guesses`` (the whole game's outcome). Every reward returns None on a placeholder, so TRL
leaves it out of its group's statistics.

Whether a reply parses, is a word, or wins is decided by ``wordle/`` alone, the same functions
the evaluation uses. Nothing here catches exceptions: a malformed reply scores low because the
parser returns None. A malformed dataset row raises ValueError naming the row.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from wordle import (
    MAX_GUESSES,
    candidates,
    information_many,
    is_allowed,
    is_consistent,
    normalize_word,
    parse_completion,
    row_history,
    row_secret,
)
from wordle.words import allowed_index, answer_index

# feedback_reward for a completion with no parseable five-letter guess: the floor of its range,
# the score of five known-absent letters. Under DEFAULT_WEIGHTS the format term then decides,
# so a broken reply totals below even an honest guess that reuses absent letters (the course's
# scheme gave the broken reply 0 and that honest guess -1.5).
NO_GUESS_FEEDBACK = -2.5

# feedback_reward's per-letter scores, in twentieths so that sums are exact (0.2 * 5 == 1.0).
_GREEN_KEPT, _YELLOW_MOVED, _YELLOW_REPEATED, _ABSENT_REUSED, _UNKNOWN = 4, 2, -4, -10, 1
_EMPTY_HISTORY = 0.1

State = tuple[tuple[tuple[str, str], ...], str]
T = TypeVar("T")


# game_reward: a win scores 1, plus up to this bonus for winning in fewer guesses.
GAME_WIN, GAME_SPEED_BONUS = 1.0, 0.5


def per_turn(func: Callable[..., list[float]]) -> Callable[..., list[float | None]]:
    """``func``'s scores, with None for every placeholder slot (``game_turn`` None) in game mode.

    A placeholder's columns are its game's, so ``func`` scores it like any row; only the result is
    dropped. Keeps ``func``'s name, which is its metric key."""

    @functools.wraps(func)
    def wrapper(completions: list[Any], game_turn: Sequence[int | None] | None = None, **kwargs: Any) -> list:
        scores = func(completions, **kwargs)
        if game_turn is None:
            return scores
        return [None if turn is None else score for score, turn in zip(scores, game_turn, strict=True)]

    return wrapper


def _guess_word(completion: Any) -> str | None:
    """The five-letter guess (upper case) of a well-formed reply, or None."""
    return normalize_word(parse_completion(completion))


@per_turn
def format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """1.0 allowed word, 0.5 five ASCII letters but not a word, 0.1 parses but not five ASCII
    letters, 0.0 does not parse. Range [0, 1]."""
    scores = []
    for completion in completions:
        raw = parse_completion(completion)
        if raw is None:
            scores.append(0.0)
        elif normalize_word(raw) is None:
            scores.append(0.1)
        else:
            scores.append(1.0 if is_allowed(raw) else 0.5)
    return scores


def _letter_knowledge(
    history: tuple[tuple[str, str], ...],
) -> tuple[dict[str, set[int]], dict[str, set[int]], set[str]]:
    """Per letter: positions marked G, positions marked Y, and letters only ever marked B."""
    green: dict[str, set[int]] = {}
    yellow: dict[str, set[int]] = {}
    grey: set[str] = set()
    for guess, pattern in history:
        for i, (letter, mark) in enumerate(zip(guess, pattern)):
            if mark == "G":
                green.setdefault(letter, set()).add(i)
            elif mark == "Y":
                yellow.setdefault(letter, set()).add(i)
            else:
                grey.add(letter)
    # A letter marked B in one place and G or Y elsewhere is a duplicate-letter grey, not absent.
    return green, yellow, grey - green.keys() - yellow.keys()


@per_turn
def feedback_reward(completions: list[Any], past_guess_history: Sequence[Any], **kwargs: Any) -> list[float]:
    """How well the guess uses earlier feedback: per letter +0.2 green kept, +0.1 yellow moved,
    -0.2 yellow left in place, -0.5 known-absent letter reused, +0.05 otherwise. 0.1 with no
    history; -2.5 when there is no parseable five-letter guess. Range [-2.5, 1.0]."""
    knowledge: dict[tuple, tuple] = {}
    scores = []
    for completion, history in zip(completions, _validated(past_guess_history, row_history), strict=True):
        word = _guess_word(completion)
        if word is None:
            scores.append(NO_GUESS_FEEDBACK)
            continue
        if not history:
            scores.append(_EMPTY_HISTORY)
            continue
        if history not in knowledge:
            knowledge[history] = _letter_knowledge(history)
        green, yellow, absent = knowledge[history]
        total = 0
        for i, letter in enumerate(word):
            if i in green.get(letter, ()):
                total += _GREEN_KEPT
            elif letter in yellow:
                total += _YELLOW_REPEATED if i in yellow[letter] else _YELLOW_MOVED
            elif letter in absent:
                total += _ABSENT_REUSED
            else:
                total += _UNKNOWN
        scores.append(total / 20)
    return scores


def _validated(column: Sequence[Any], check: Callable[[int, Any], T]) -> list[T]:
    """``check(row, value)`` for each row of a dataset column, once per distinct object: every
    generation of a prompt carries the same value, so a batch holds only a few."""
    seen: dict[int, T] = {}
    out = []
    for row, value in enumerate(column):
        # id() is safe as a key here: every value stays alive in the caller's list meanwhile.
        if id(value) not in seen:
            seen[id(value)] = check(row, value)
        out.append(seen[id(value)])
    return out


@per_turn
def info_gain_reward(
    completions: list[Any], past_guess_history: Sequence[Any], secret: Sequence[Any], **kwargs: Any
) -> list[float]:
    """Expected information of the guess over the candidates still possible, divided by log2 of
    their number. With one candidate left: 1.0 for guessing it, else 0.0. 0.0 for a reply that
    is not an allowed word. Range [0, 1]."""
    states = list(zip(_validated(past_guess_history, row_history), _validated(secret, row_secret), strict=True))
    # Group rows by state, then by guess: candidates are filtered once per state and one
    # vectorised entropy pass scores all of a state's distinct guesses.
    groups: dict[State, dict[str, list[int]]] = {}
    allowed_words = allowed_index()
    for row, (completion, state) in enumerate(zip(completions, states, strict=True)):
        word = _guess_word(completion)
        if word in allowed_words:
            groups.setdefault(state, {}).setdefault(word, []).append(row)
    scores = [0.0] * len(completions)
    for (history, secret_word), by_word in groups.items():
        # The secret joins the pool when a dataset uses one outside the answer list.
        cands = candidates(history, extra=(secret_word,))
        if len(cands) <= 1:
            values = [1.0 if word in cands else 0.0 for word in by_word]
        else:
            # Clipped against float residue (e.g. -4e-16 for a guess that splits nothing).
            values = np.clip(information_many(list(by_word), cands) / math.log2(len(cands)), 0.0, 1.0).tolist()
        for rows, value in zip(by_word.values(), values):
            for row in rows:
                scores[row] = value
    return scores


@per_turn
def candidate_reward(
    completions: list[Any], past_guess_history: Sequence[Any], secret: Sequence[Any], **kwargs: Any
) -> list[float]:
    """1.0 if the guess could still be the secret given every earlier feedback (it is an answer, or
    the secret itself, that scores each past guess exactly as marked), else 0.0: the exact form of
    using the feedback, which a random still-possible answer follows to win 98% of games. A repeated
    wrong guess scores 0.0. Range [0, 1]."""
    histories, secrets = _validated(past_guess_history, row_history), _validated(secret, row_secret)
    answer_words = answer_index()
    scores = []
    for completion, history, secret_word in zip(completions, histories, secrets, strict=True):
        word = _guess_word(completion)
        possible = word is not None and (word in answer_words or word == secret_word)
        scores.append(1.0 if possible and is_consistent(word, history) else 0.0)
    return scores


@per_turn
def win_reward(completions: list[Any], secret: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 if the parsed guess is the secret (any case), else 0.0. Range [0, 1]."""
    secrets = _validated(secret, row_secret)
    return [1.0 if _guess_word(c) == s else 0.0 for c, s in zip(completions, secrets, strict=True)]


def game_reward(
    completions: list[Any],
    game_won: Sequence[Any],
    game_guesses: Sequence[Any],
    game_turn: Sequence[int | None],
    **kwargs: Any,
) -> list[float | None]:
    """The whole game's return, the same for every turn of a game (game mode only): 0.0 for a lost
    game; a win scores 1.0 plus 0.5 x (6 - guesses) / 5, so 1.5 in one guess and 1.0 in six.
    None on a placeholder slot. Range [0, 1.5]."""
    scores: list[float | None] = []
    for won, guesses, turn in zip(game_won, game_guesses, game_turn, strict=True):
        if turn is None:
            scores.append(None)
        elif won is True:
            used = min(max(int(guesses), 1), MAX_GUESSES)
            scores.append(GAME_WIN + GAME_SPEED_BONUS * (MAX_GUESSES - used) / (MAX_GUESSES - 1))
        else:
            scores.append(0.0)
    return scores
