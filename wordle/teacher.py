"""The supervised teacher: the guess a strong player makes in a state, and a think that says what the feedback has
established, every claim of it true of the state.

The teacher says only answers that are still possible, and picks among them by expected information (the greedy
entropy player over the candidates, ``Solver("candidates")``): from its own opening it wins 99.3% of the held-out
secrets in 3.60 guesses a win. Its reply is the canonical form that chat templates keep unchanged (Qwen's splits a
reply at ``</think>`` and writes it back in exactly this shape)::

    <think>
    In place: R at 2, E at 5.
    Elsewhere: A not 3; S not 1, 4.
    Not in the word: C N T O L.
    Exactly one E.
    14 answers fit, such as BRAVE, DRAPE, GRACE.
    GRAPE fits, and its feedback splits the 14 into 9 groups of at most 3.
    </think>

    <guess>GRAPE</guess>

Columns count from 1. Letters are spaced so that a tokenizer spends one token on each. A letter marked absent in one
column and present in another is no absent letter (the rewards' rule, ``rewards.functions._letter_knowledge``): it
says how many copies the word holds. The think has no ``<`` and makes no claim about turn numbers (the prompt has
them). Shorter levels (``LEVELS``) drop what costs tokens, for a smaller reply budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wordle.solver import CandidateSet, Solver, candidates
from wordle.words import spread

History = Sequence[tuple[str, str]]

THINK_OPEN, THINK_CLOSE = "<think>\n", "\n</think>\n\n"


@dataclass(frozen=True)
class Level:
    """How much a think says: a reply is written at the richest level that fits its budget (training.sft_data)."""

    named: int  # answers named among those that fit
    long: bool  # the guess line in words ("GRAPE fits, and its feedback splits ..."), else "GRAPE: 9 groups ..."
    counts: bool  # the line of letter counts
    placed_elsewhere: bool  # a letter already in place keeps its elsewhere columns (else only the unplaced ones)
    compact: bool  # "R2" for "R at 2", "not 1,4" for "not 1, 4"


LEVELS = (
    Level(named=3, long=True, counts=True, placed_elsewhere=True, compact=False),
    Level(named=1, long=False, counts=True, placed_elsewhere=True, compact=False),
    Level(named=0, long=False, counts=True, placed_elsewhere=False, compact=False),
    Level(named=0, long=False, counts=False, placed_elsewhere=False, compact=True),
)
WORDS = ("none", "one", "two", "three", "four", "five")


@dataclass(frozen=True)
class Knowledge:
    """What a history of feedback establishes about the secret, letter by letter."""

    placed: dict[int, str]  # column (0-based) -> the letter marked right there
    elsewhere: dict[str, tuple[int, ...]]  # a letter marked elsewhere -> the columns it is not in (0-based, sorted)
    absent: tuple[str, ...]  # letters only ever marked absent, in the order met
    at_least: dict[str, int]  # a letter seen twice or more in the word -> that many
    exactly: dict[str, int]  # a present letter whose copies are all known (a copy of it was marked absent)

    @classmethod
    def of(cls, history: History) -> Knowledge:
        placed: dict[int, str] = {}
        not_in: dict[str, set[int]] = {}
        marked_elsewhere: list[str] = []
        ever_present: set[str] = set()
        marked_absent: list[str] = []
        at_least: dict[str, int] = {}
        exactly: dict[str, int] = {}
        for guess, pattern in history:
            guess, pattern = guess.upper(), pattern.upper()
            shown: dict[str, int] = {}
            for i, (letter, mark) in enumerate(zip(guess, pattern, strict=True)):
                if mark == "G":
                    placed[i] = letter
                else:  # absent or elsewhere: either way, not in this column
                    not_in.setdefault(letter, set()).add(i)
                if mark in "GY":
                    ever_present.add(letter)
                    shown[letter] = shown.get(letter, 0) + 1
                if mark == "Y" and letter not in marked_elsewhere:
                    marked_elsewhere.append(letter)
                if mark == "B" and letter not in marked_absent:
                    marked_absent.append(letter)
            for letter, copies in shown.items():
                at_least[letter] = max(at_least.get(letter, 0), copies)
                if any(g == letter and m == "B" for g, m in zip(guess, pattern, strict=True)):
                    exactly[letter] = copies  # the guess held more copies than the word: every one it holds is shown
        return cls(
            placed=dict(sorted(placed.items())),
            elsewhere={letter: tuple(sorted(not_in[letter])) for letter in marked_elsewhere},
            absent=tuple(letter for letter in marked_absent if letter not in ever_present),
            at_least={k: v for k, v in at_least.items() if v > 1 and k not in exactly},
            exactly=exactly,
        )


def feedback_lines(knowledge: Knowledge, level: Level = LEVELS[0]) -> list[str]:
    """The lines that say what the feedback established (none before any feedback)."""
    sep = "," if level.compact else ", "
    lines = []
    if knowledge.placed:
        cells = [
            f"{letter}{col + 1}" if level.compact else f"{letter} at {col + 1}"
            for col, letter in knowledge.placed.items()
        ]
        lines.append("In place: " + (" " if level.compact else ", ").join(cells) + ".")
    placed = set(knowledge.placed.values())
    elsewhere = {k: v for k, v in knowledge.elsewhere.items() if level.placed_elsewhere or k not in placed}
    if elsewhere:
        cells = [f"{letter} not {sep.join(str(c + 1) for c in cols)}" for letter, cols in elsewhere.items()]
        lines.append("Elsewhere: " + "; ".join(cells) + ".")
    if knowledge.absent:
        lines.append("Not in the word: " + " ".join(knowledge.absent) + ".")
    if level.counts:
        said = [f"exactly {WORDS[n]} {letter}" for letter, n in knowledge.exactly.items()]
        said += [f"at least {WORDS[n]} {letter}" for letter, n in knowledge.at_least.items()]
        if said:
            text = "; ".join(said)
            lines.append(text[0].upper() + text[1:] + ".")
    return lines


def groups(guess: str, cands: CandidateSet) -> tuple[int, int]:
    """How the feedback of ``guess`` splits ``cands``: the number of groups, and the size of the largest."""
    codes = cands.codes([guess])[0]
    sizes = np.bincount(codes)
    return int(np.count_nonzero(sizes)), int(sizes.max())


def candidate_lines(guess: str, cands: CandidateSet, level: Level, first: bool) -> list[str]:
    """How many answers fit (a few named), and what ``guess`` does for them."""
    words = cands.words()
    n = len(words)
    if n == 1:
        return [f"Only {guess} fits."]
    if first:
        left = f"No feedback yet: all {n} answers fit."
    elif n <= level.named:
        left = f"{n} answers fit: {', '.join(words)}."
    elif level.named:
        others = tuple(w for w in words if w != guess)
        left = f"{n} answers fit, such as {', '.join(spread(others, level.named))}."
    else:
        left = f"{n} answers fit."
    k, largest = groups(guess, cands)
    if level.long:
        split = f"tells all {n} apart" if k == n else f"splits the {n} into {k} groups of at most {largest}"
        return [left, f"{guess} fits, and its feedback {split}."]
    return [left, f"{guess}: all {n} apart." if k == n else f"{guess}: {k} groups of at most {largest}."]


def think_text(history: History, guess: str, level: Level = LEVELS[0], cands: CandidateSet | None = None) -> str:
    """The think for answering ``history`` with ``guess``, at ``level``."""
    cands = candidates(history) if cands is None else cands
    lines = feedback_lines(Knowledge.of(history), level)
    return "\n".join([*lines, *candidate_lines(guess, cands, level, first=not history)])


def reply_text(think: str, guess: str) -> str:
    """The canonical reply: ``<think>\\n…\\n</think>\\n\\n<guess>WORD</guess>``."""
    return f"{THINK_OPEN}{think}{THINK_CLOSE}<guess>{guess}</guess>"


class Teacher:
    """The guess of most expected information among the answers still possible, memoised by history."""

    def __init__(self) -> None:
        self.solver = Solver("candidates")

    def guess(self, history: History) -> str:
        return self.solver.next_guess(history)

    def replies(self, history: History) -> tuple[str, list[str]]:
        """The teacher's guess and its reply at every level, richest first."""
        guess = self.guess(history)
        cands = candidates(history)
        return guess, [reply_text(think_text(history, guess, level, cands), guess) for level in LEVELS]
