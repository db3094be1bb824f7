"""The word lists: 2315 possible secrets and 12972 accepted guesses.

The lists ship inside the package (``wordle/data``, MIT, see ``LICENSE.wordlists``) so that nothing
reads outside the installed package at run time. Words are handled in upper case everywhere.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

import numpy as np

WORD_LENGTH = 5
MAX_GUESSES = 6


def _read_list(name: str) -> tuple[str, ...]:
    text = resources.files("wordle").joinpath("data").joinpath(name).read_text(encoding="ascii")
    return tuple(line.strip().upper() for line in text.splitlines() if line.strip())


@functools.cache
def answers() -> tuple[str, ...]:
    """The 2315 words that can be secrets, in list order (alphabetical)."""
    return _read_list("wordle_answers.txt")


@functools.cache
def allowed() -> tuple[str, ...]:
    """The 12972 words accepted as guesses (a superset of :func:`answers`), in list order."""
    return _read_list("wordle_allowed.txt")


@functools.cache
def non_answers() -> tuple[str, ...]:
    """The allowed words that are not answers, in the allowed list's order."""
    answer_set = set(answers())
    return tuple(w for w in allowed() if w not in answer_set)


@functools.cache
def allowed_index() -> dict[str, int]:
    """Row of each allowed word in the pattern matrix."""
    return {w: i for i, w in enumerate(allowed())}


@functools.cache
def answer_index() -> dict[str, int]:
    """Column of each answer in the pattern matrix."""
    return {w: i for i, w in enumerate(answers())}


@functools.cache
def lists_fingerprint() -> str:
    """A digest of both lists; the pattern-matrix cache is keyed on it so an edited list never reuses it."""
    h = hashlib.sha256()
    for words in (allowed(), answers()):
        h.update("\n".join(words).encode())
        h.update(b"\0")
    return h.hexdigest()


def normalize_word(text: object) -> str | None:
    """``text`` upper-cased if it is exactly five ASCII letters, else None.

    Only ASCII counts: ``str.isalpha`` would accept Cyrillic look-alikes such as 'САRЕ', and the
    check comes before upper-casing because ``"STAFﬀ".upper()`` is the ASCII 'STAFFF'.
    """
    if not isinstance(text, str) or len(text) != WORD_LENGTH or not (text.isascii() and text.isalpha()):
        return None
    return text.upper()


def is_allowed(text: object) -> bool:
    """Whether ``text`` (any case) is a word Wordle accepts as a guess."""
    word = normalize_word(text)
    return word is not None and word in allowed_index()


def encode(words: tuple[str, ...] | list[str]) -> np.ndarray:
    """Five-letter upper-case words as a ``(n, 5)`` uint8 array of letters 0..25."""
    raw = np.frombuffer("".join(words).encode("ascii"), dtype=np.uint8)
    return (raw.reshape(len(words), WORD_LENGTH) - ord("A")).astype(np.uint8)


# --- the held-out split ----------------------------------------------------------------------

EVAL_SIZE = 300
# Changing the salt changes which secrets are held out, and so invalidates every reported result.
_SPLIT_SALT = b"wordle-grpo/eval-split/v1"


def _split_rank(word: str) -> bytes:
    return hashlib.blake2b(_SPLIT_SALT + word.encode(), digest_size=8).digest()


@functools.cache
def eval_secrets() -> tuple[str, ...]:
    """The fixed held-out secrets (300 answers picked by a salted hash), alphabetical.

    A hash rather than a seeded shuffle, so that the split does not depend on the list order or
    on any random generator's implementation. No training row ever uses one of these.
    """
    return tuple(sorted(sorted(answers(), key=_split_rank)[:EVAL_SIZE]))


# Parts of the training secrets, in list order: the embedded model's supervised start learns from "sft"
# (every other one), its GRPO plays "rl", and "val" (every fifth of the other half) is played by nothing
# but the checks that choose settings; the 300 held-out secrets only report the final figure.
TRAIN_PARTS = ("all", "sft", "rl", "val")


@functools.cache
def train_secrets(part: str = "all") -> tuple[str, ...]:
    """The training secrets of ``part``: "all" (every answer neither held out nor in "val"), "sft",
    "rl" or "val" ("sft" and "rl" together are "all"; the three are disjoint).

    Why halves: a model fitted on games of a secret learns which feedback leads to that word, so RL on
    the same secrets rewards recall, which held-out games cannot use. On the embedded model, GRPO on
    secrets its SFT saw left held-out play flat in 26 tries; on the half it did not see, it lifted it
    (docs/research-log.md). Why "val": settings chosen on the held-out secrets would overstate the
    final figure, so they are chosen on secrets that no training sees instead (issue 21)."""
    if part not in TRAIN_PARTS:
        raise ValueError(f"unknown part of the training secrets {part!r}; valid: {', '.join(TRAIN_PARTS)}")
    held_out = set(eval_secrets())
    every = tuple(w for w in answers() if w not in held_out)
    sft, val = every[::2], every[1::10]  # "sft" is the shipped model's SFT half: it must not move
    rl = tuple(w for w in every[1::2] if w not in set(val))
    return {"all": tuple(w for w in every if w not in set(val)), "sft": sft, "rl": rl, "val": val}[part]


def spread(words: tuple[str, ...], n: int | None = None) -> tuple[str, ...]:
    """``n`` of ``words``, evenly spread over the list (all of them by default), so that a short
    evaluation of an alphabetical list is not all words starting with A."""
    if n is None or n >= len(words):
        return words
    if n < 1:
        raise ValueError(f"games must be at least 1, got {n}")
    return tuple(words[i * len(words) // n] for i in range(n))
