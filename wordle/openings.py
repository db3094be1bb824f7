"""Openings: the guesses a game starts from before the player's first turn.

A player that only ever met its own opening can follow it without reading the feedback; started
from guesses it did not choose, it has to read them. An opening is one of:

- ``own``: no guesses, the player opens (every game as it is usually played);
- ``answer`` / ``allowed``: a random answer word, or a random allowed word that is no answer, played
  first; ``answer:K`` / ``allowed:K`` plays K of them (``answer:2``: two random answers);
- ``words:CRANE,SLATE``: these guesses, in this order, in every game.

Drawn words are seeded per secret (``random.Random`` of the seed, the opening and the secret), so a
secret gets the same opening whichever other secrets are played with it, sharded or not, and a drawn
word is never the secret: the opening decides no game. Given words are played as written, and a game
whose opening holds its secret is over at that guess (won by the opening).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from wordle.feedback import score_guess
from wordle.game import History
from wordle.words import MAX_GUESSES, answers, is_allowed, non_answers, normalize_word

DRAWN = ("answer", "allowed")
SPELLING = "own, answer, allowed, answer:K, allowed:K or words:W1,W2,..."


@dataclass(frozen=True)
class Opening:
    kind: str = "own"
    count: int = 0  # drawn words per game
    words: tuple[str, ...] = ()  # the given words (kind "words")

    @classmethod
    def parse(cls, spec: str) -> Opening:
        """``own``, ``answer``, ``allowed``, ``answer:K``, ``allowed:K`` or ``words:W1,W2``; ValueError
        naming what is wrong otherwise."""
        kind, sep, arg = spec.strip().partition(":")
        kind = kind.lower()
        if kind == "own" and not sep:
            return cls()
        if kind in DRAWN:
            if not sep:
                return cls(kind, 1)
            if not arg.isdigit() or not 1 <= int(arg) < MAX_GUESSES:
                raise ValueError(f"opening {spec!r}: K must be a whole number from 1 to {MAX_GUESSES - 1}")
            return cls(kind, int(arg))
        if kind == "words" and arg:
            words = tuple(arg.split(","))
            for word in words:
                if normalize_word(word) is None or not is_allowed(word):
                    raise ValueError(f"opening {spec!r}: {word.strip()!r} is not an allowed word")
            if len(words) > MAX_GUESSES:
                raise ValueError(f"opening {spec!r}: {len(words)} guesses, more than a game's {MAX_GUESSES}")
            return cls("words", 0, tuple(normalize_word(w) for w in words))
        raise ValueError(f"unknown opening {spec!r}; valid: {SPELLING}")

    @property
    def spec(self) -> str:
        """The spelling :meth:`parse` reads back."""
        if self.kind == "own":
            return "own"
        if self.kind == "words":
            return "words:" + ",".join(self.words)
        return self.kind if self.count == 1 else f"{self.kind}:{self.count}"

    @property
    def label(self) -> str:
        """How a table heads the games: 'its own opening', 'a random answer played first', ..."""
        if self.kind == "own":
            return "its own opening"
        if self.kind == "words":
            return f"{', '.join(self.words)} played first"
        noun = "answer" if self.kind == "answer" else "allowed word (no answer)"
        if self.count == 1:
            return f"a random {noun} played first"
        plural = "answers" if self.kind == "answer" else "allowed words (no answers)"
        return f"{self.count} random {plural} played first"

    def start(self, secret: str, seed: int = 0) -> History:
        """The guesses ``secret``'s game starts from, with their feedback."""
        secret = normalize_word(secret) or secret
        if self.kind == "words":
            words = self.words[: self.words.index(secret) + 1] if secret in self.words else self.words
            return tuple((w, score_guess(w, secret)) for w in words)
        if self.kind == "own":
            return ()
        pool = answers() if self.kind == "answer" else non_answers()
        rng = random.Random(f"{seed}:{self.spec}:{secret}")
        words: list[str] = []
        while len(words) < self.count:
            word = rng.choice(pool)
            if word != secret and word not in words:
                words.append(word)
        return tuple((w, score_guess(w, secret)) for w in words)

    def starts(self, secrets: Sequence[str], seed: int = 0) -> list[History]:
        return [self.start(secret, seed) for secret in secrets]


OWN = Opening()
RANDOM_ANSWER = Opening("answer", 1)
