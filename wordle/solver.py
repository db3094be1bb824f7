"""Candidates, information and a greedy maximum-entropy solver, all on the pattern matrix.

A history is a sequence of ``(GUESS, PATTERN)`` pairs, PATTERN being five G/Y/B marks.

Play every answer and print the mean, the distribution and the wall time::

    python -m wordle.solver
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from wordle.feedback import ALL_GREEN, N_PATTERNS, pattern_codes, pattern_matrix, pattern_to_code, score_guess
from wordle.words import MAX_GUESSES, allowed, allowed_index, answer_index, answers, encode, normalize_word

History = Sequence[tuple[str, str]]

# Entropy scores closer than this are ties (they differ only by float summation order).
_TIE = 1e-9


def _word(text: str) -> str:
    word = normalize_word(text)
    if word is None:
        raise ValueError(f"expected a five-letter ASCII word, got {text!r}")
    return word


def guess_row(guess: str) -> np.ndarray:
    """Codes of ``guess`` against every answer: its matrix row, or computed if it is not an allowed word."""
    word = _word(guess)
    row = allowed_index().get(word)
    if row is not None:
        return pattern_matrix()[row]
    return pattern_codes(encode([word]), encode(answers()))[0]


@dataclass(frozen=True)
class CandidateSet:
    """Words still possible: answers (as matrix columns) plus extra words outside the answer list."""

    idx: np.ndarray  # int64 columns into answers()
    extra: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.idx) + len(self.extra)

    def words(self) -> list[str]:
        ans = answers()
        return [ans[i] for i in self.idx] + list(self.extra)

    def __contains__(self, word: object) -> bool:
        w = normalize_word(word)
        if w is None:
            return False
        col = answer_index().get(w)
        return w in self.extra if col is None else bool(np.any(self.idx == col))

    def codes(self, guess: str) -> np.ndarray:
        """Pattern codes of ``guess`` against each candidate, answers first then extras."""
        base = guess_row(guess)[self.idx]
        if not self.extra:
            return base
        more = [pattern_to_code(score_guess(guess, w)) for w in self.extra]
        return np.concatenate([base, np.asarray(more, dtype=np.uint8)])


def is_consistent(word: str, history: History) -> bool:
    """Whether ``word`` could be the secret given every (guess, pattern) pair of ``history``."""
    return all(score_guess(g, word) == p.upper() for g, p in history)


def candidates(history: History = (), pool: Iterable[str] | None = None) -> CandidateSet:
    """The words of ``pool`` (default: the answers) consistent with ``history``.

    Answers in the pool are filtered through the pattern matrix; any other pool word is checked
    with :func:`score_guess`.
    """
    ans_index = answer_index()
    if pool is None:
        mask = np.ones(len(answers()), dtype=bool)
        extra: list[str] = []
    else:
        mask = np.zeros(len(answers()), dtype=bool)
        extra = []
        for text in pool:
            w = _word(text)
            col = ans_index.get(w)
            if col is None:
                if w not in extra:
                    extra.append(w)
            else:
                mask[col] = True
    for guess, pattern in history:
        mask &= guess_row(guess) == pattern_to_code(pattern)
    return CandidateSet(np.flatnonzero(mask), tuple(w for w in extra if is_consistent(w, history)))


def entropy_bits(codes: np.ndarray) -> float:
    """Entropy in bits of the empirical distribution of ``codes`` (uniform prior over candidates)."""
    n = len(codes)
    if n == 0:
        return 0.0
    counts = np.bincount(codes, minlength=N_PATTERNS)
    counts = counts[counts > 0]
    return float(math.log2(n) - (counts * np.log2(counts)).sum() / n)


def information(guess: str, cands: CandidateSet) -> tuple[float, float]:
    """Expected information of ``guess`` over ``cands``: ``(bits, bits / log2 |cands|)``.

    The normalised value is 0.0 when fewer than two candidates remain (nothing is left to learn).
    """
    bits = entropy_bits(cands.codes(guess))
    n = len(cands)
    return bits, (bits / math.log2(n) if n > 1 else 0.0)


# c * log2(c) for every count a pattern bucket can hold; entropy ranking only needs sum(c log c).
@functools.cache
def _clogc(n: int) -> np.ndarray:
    c = np.arange(n + 1, dtype=np.float64)
    return np.where(c > 0, c * np.log2(np.maximum(c, 1)), 0.0)


def best_guess(cands: CandidateSet) -> str:
    """The allowed word of maximum expected information over ``cands`` (answers-only sets).

    Ties go to a word that is still a candidate, then to the earlier word in the allowed list.
    With one or two candidates no guess beats guessing a candidate, so that is returned directly.
    """
    if len(cands) == 0:
        raise ValueError("no candidate is consistent with the history")
    if cands.extra:
        raise ValueError("best_guess plays over the answer list; the candidate set has extra words")
    ans = answers()
    if len(cands) <= 2:
        return ans[int(cands.idx[0])]
    sub = pattern_matrix()[:, cands.idx].astype(np.int64)  # (n_allowed, n_cands)
    sub += np.arange(len(sub), dtype=np.int64)[:, None] * N_PATTERNS
    counts = np.bincount(sub.ravel(), minlength=len(sub) * N_PATTERNS).reshape(len(sub), N_PATTERNS)
    # H = log2 n - sum(c log2 c) / n, so maximising H minimises sum(c log2 c).
    cost = _clogc(len(cands))[counts].sum(axis=1)
    best = np.flatnonzero(cost <= cost.min() + _TIE)
    allowed_words = allowed()
    in_cands = set(cands.idx.tolist())
    ans_index = answer_index()
    for row in best:
        if ans_index.get(allowed_words[row], -1) in in_cands:
            return allowed_words[row]
    return allowed_words[int(best[0])]


class Solver:
    """Greedy maximum-entropy play. Choices are memoised by history, so a full run over the
    answers walks a decision tree instead of re-ranking 12972 guesses at every turn."""

    def __init__(self) -> None:
        self._memo: dict[tuple[tuple[str, str], ...], str] = {}

    def next_guess(self, history: History = ()) -> str:
        key = tuple((_word(g), p.upper()) for g, p in history)
        if key not in self._memo:
            self._memo[key] = best_guess(candidates(key))
        return self._memo[key]

    def play(self, secret: str, max_guesses: int = MAX_GUESSES) -> list[tuple[str, str]]:
        """The full game against ``secret``: the list of (guess, pattern) pairs, ending in a win or at the limit."""
        secret = _word(secret)
        history: list[tuple[str, str]] = []
        while len(history) < max_guesses:
            guess = self.next_guess(history)
            history.append((guess, score_guess(guess, secret)))
            if guess == secret:
                break
        return history


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Play the greedy entropy solver against every answer.")
    parser.add_argument("--limit", type=int, default=None, help="play only the first N answers")
    args = parser.parse_args(argv)

    secrets = answers()[: args.limit]
    start = time.perf_counter()
    solver = Solver()
    lengths = []
    losses = 0
    for secret in secrets:
        game = solver.play(secret)
        won = game[-1][1] == "GGGGG"
        losses += not won
        lengths.append(len(game) if won else MAX_GUESSES + 1)
    wall = time.perf_counter() - start
    wins = [n for n in lengths if n <= MAX_GUESSES]
    dist = Counter(lengths)
    print(f"games: {len(secrets)}  wins: {len(wins)}  losses: {losses}")
    print(f"mean guesses (wins): {np.mean(wins):.4f}  total guesses: {sum(wins)}")
    print("distribution: " + "  ".join(f"{k}:{dist[k]}" for k in sorted(dist) if k <= MAX_GUESSES) + (f"  X:{losses}" if losses else ""))
    print(f"opener: {solver.next_guess(())}  wall time: {wall:.2f} s (includes loading the pattern matrix)")


if __name__ == "__main__":
    main()
