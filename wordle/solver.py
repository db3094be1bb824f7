"""Candidates, information and a greedy maximum-entropy solver, all on the pattern matrix.

A history is a sequence of ``(GUESS, PATTERN)`` pairs, PATTERN being five G/Y/B marks.

``python benchmarks/bench_solver.py`` plays every answer and prints the mean, the distribution
and the wall time.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from wordle.feedback import N_PATTERNS, pattern_codes, pattern_matrix, pattern_to_code, score_guess
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

    def codes(self, guesses: Sequence[str]) -> np.ndarray:
        """Pattern codes of each guess against each candidate, ``(k, n)``: answers first, then extras."""
        rows = [allowed_index().get(g) for g in guesses]
        if None in rows:  # a guess outside the allowed list: score it against the answers
            base = np.stack([guess_row(g) for g in guesses])
        else:
            base = pattern_matrix().take(rows, axis=0)
        if len(self.idx) < base.shape[1]:  # idx is sorted and unique, so full length means every answer
            base = base.take(self.idx, axis=1)
        if not self.extra:
            return base
        more = [[pattern_to_code(score_guess(g, w)) for w in self.extra] for g in guesses]
        return np.concatenate([base, np.asarray(more, dtype=np.uint8)], axis=1)


def is_consistent(word: str, history: History) -> bool:
    """Whether ``word`` could be the secret given every (guess, pattern) pair of ``history``."""
    return all(score_guess(g, word) == p.upper() for g, p in history)


def candidates(history: History = (), pool: Iterable[str] | None = None, extra: Iterable[str] = ()) -> CandidateSet:
    """The words of a pool consistent with ``history``.

    The pool is ``pool`` if given, else the answers, plus the words of ``extra`` (a secret from
    outside the answer list, say). Answers are filtered through the pattern matrix; any other
    word is checked with :func:`score_guess`.
    """
    ans_index = answer_index()
    mask = np.zeros(len(answers()), dtype=bool) if pool is not None else np.ones(len(answers()), dtype=bool)
    others: list[str] = []
    for text in (*(pool or ()), *extra):
        w = _word(text)
        col = ans_index.get(w)
        if col is not None:
            mask[col] = True
        elif w not in others:
            others.append(w)
    for guess, pattern in history:
        mask &= guess_row(guess) == pattern_to_code(pattern)
    return CandidateSet(np.flatnonzero(mask), tuple(w for w in others if is_consistent(w, history)))


@functools.cache
def _clogc(size: int) -> np.ndarray:
    """c * log2(c) for c in [0, size)."""
    c = np.arange(size, dtype=np.float64)
    return c * np.log2(np.maximum(c, 1.0))


def entropy_bits(codes: np.ndarray) -> np.ndarray:
    """Entropy in bits of each row of a ``(k, n)`` array of pattern codes (uniform over the n columns).

    One bincount serves a chunk of rows: row r's codes are offset into their own block of 243 buckets.
    H = log2 n - sum(c log2 c) / n over the bucket counts c. Chunks of 1024 rows bound the int64
    temporaries: every allowed guess over 1000 candidates at once held 300 MB, the peak of a whole
    training run of the embedded model.
    """
    codes = np.atleast_2d(codes)
    k, n = codes.shape
    if n == 0:
        return np.zeros(k)
    if k > _CHUNK:
        return np.concatenate([entropy_bits(codes[i : i + _CHUNK]) for i in range(0, k, _CHUNK)])
    flat = np.add(codes, np.arange(0, k * N_PATTERNS, N_PATTERNS, dtype=np.intp)[:, None])
    counts = np.bincount(flat.ravel(), minlength=k * N_PATTERNS).reshape(k, N_PATTERNS)
    # Tables come in powers of two, so a handful serves every candidate-set size.
    return math.log2(n) - _clogc(1 << n.bit_length())[counts].sum(axis=1) / n


_CHUNK = 1024


@functools.cache
def opening_information() -> np.ndarray:
    """Expected information in bits of every allowed guess over all the answers (a game's first turn).

    A constant of the word lists, computed once per process: the opening state is the most common
    state in training data, and the most expensive one.
    """
    bits = entropy_bits(pattern_matrix())
    bits.setflags(write=False)
    return bits


def _is_everything(cands: CandidateSet) -> bool:
    return not cands.extra and len(cands.idx) == len(answers())


def information_many(guesses: Sequence[str], cands: CandidateSet) -> np.ndarray:
    """Expected information in bits of each guess over ``cands``, in one vectorised pass."""
    if _is_everything(cands):
        rows = [allowed_index().get(g) for g in guesses]
        if None not in rows:
            return opening_information()[rows]
    return entropy_bits(cands.codes(guesses))


def information(guess: str, cands: CandidateSet) -> tuple[float, float]:
    """Expected information of ``guess`` over ``cands``: ``(bits, bits / log2 |cands|)``.

    The normalised value is 0.0 when fewer than two candidates remain (nothing is left to learn).
    """
    bits = float(information_many([guess], cands)[0])
    n = len(cands)
    return bits, (bits / math.log2(n) if n > 1 else 0.0)


# The words a greedy maximum-entropy player may guess: every allowed word (the solver), every answer, or only the
# answers still possible. A player that can only say answers (the embedded model, whose answers are one token each)
# is measured against the last two.
POOLS = ("allowed", "answers", "candidates")


@functools.cache
def _answer_rows() -> np.ndarray:
    """The pattern matrix's rows of the answers, in answer order."""
    index = allowed_index()
    return np.array([index[w] for w in answers()])


def best_guess(cands: CandidateSet, pool: str = "allowed") -> str:
    """The word of ``pool`` (see ``POOLS``) of maximum expected information over ``cands`` (answers-only sets).

    Ties go to a word that is still a candidate, then to the earlier word in the allowed list.
    With one or two candidates no guess beats guessing a candidate, so that is returned directly.
    """
    if pool not in POOLS:
        raise ValueError(f"unknown pool {pool!r}; valid: {', '.join(POOLS)}")
    if len(cands) == 0:
        raise ValueError("no candidate is consistent with the history")
    if cands.extra:
        raise ValueError("best_guess plays over the answer list; the candidate set has extra words")
    ans = answers()
    if len(cands) <= 2:
        return ans[int(cands.idx[0])]
    rows = {"allowed": None, "answers": _answer_rows(), "candidates": _answer_rows()[cands.idx]}[pool]
    if _is_everything(cands):
        bits = opening_information() if rows is None else opening_information()[rows]
    else:
        matrix = pattern_matrix() if rows is None else pattern_matrix()[rows]
        bits = entropy_bits(matrix[:, cands.idx])
    best = np.flatnonzero(bits >= bits.max() - _TIE)
    best_words = [allowed()[r] for r in (best if rows is None else rows[best])]
    in_cands = set(cands.idx.tolist())
    ans_index = answer_index()
    return next((w for w in best_words if ans_index.get(w, -1) in in_cands), best_words[0])


class Solver:
    """Greedy maximum-entropy play over the words of ``pool`` (``POOLS``; every allowed word by default). Choices
    are memoised by history, so a full run over the answers walks a decision tree instead of re-ranking 12972
    guesses at every turn."""

    def __init__(self, pool: str = "allowed") -> None:
        if pool not in POOLS:
            raise ValueError(f"unknown pool {pool!r}; valid: {', '.join(POOLS)}")
        self.pool = pool
        self._memo: dict[tuple[tuple[str, str], ...], str] = {}

    def next_guess(self, history: History = ()) -> str:
        key = tuple((_word(g), p.upper()) for g, p in history)
        if key not in self._memo:
            self._memo[key] = best_guess(candidates(key), self.pool)
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
