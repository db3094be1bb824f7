"""Game state <-> text: the chat prompt a model sees, and the feedback notations datasets use.

Three notations of the same five marks are understood:

========  ===========  ===========  ===========
notation  right place  elsewhere    absent
========  ===========  ===========  ===========
seed      ``C(✓)``     ``C(~)``     ``C(-)``     the notation prompts are rendered in
course    ``C(✓)``     ``C(-)``     ``C(x)``     DeepLearning.AI / Predibase datasets
gyb       ``G``        ``Y``        ``B``        plain pattern strings, as in rewards
========  ===========  ===========  ===========

``-`` means *absent* in one and *elsewhere* in the other, so text whose marks are only ✓ and -
cannot be told apart: the parser then asks for an explicit ``notation`` rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from wordle.feedback import pattern_to_code, score_guess
from wordle.words import MAX_GUESSES, WORD_LENGTH, normalize_word

History = Sequence[tuple[str, str]]

NOTATIONS: dict[str, dict[str, str]] = {
    "seed": {"G": "✓", "Y": "~", "B": "-"},
    "course": {"G": "✓", "Y": "-", "B": "x"},
}
_CHECKS = "✓✔"  # U+2713 and the heavier U+2714 that some datasets carry

SYSTEM_PROMPT = (
    f"You are playing Wordle. Find the secret five-letter English word in at most {MAX_GUESSES} guesses.\n"
    "After each guess, every letter is marked: ✓ right letter in the right place, "
    "~ in the word but elsewhere, - not in the word "
    "(a repeated letter is marked ✓ or ~ only as often as the secret holds it).\n"
    "Reply with your reasoning, then one guess of a real five-letter word, exactly in this form:\n"
    "<think>your reasoning</think><guess>WORD</guess>"
)

# "C(✓)" with an optional comma or spaces after it; the mark is any single non-space character.
_MARK_RE = re.compile(r"([A-Za-z])\(\s*(\S)\s*\)")
_LINE_RE = re.compile(r"^\s*(?:Guess\s*\d+\s*[:.)-]?\s*)?([A-Za-z]{5})\s*(?::|->|→)\s*(.+?)\s*$", re.MULTILINE)


def format_feedback(guess: str, pattern: str, notation: str = "seed") -> str:
    """``("CRANE", "BGYBB")`` -> ``"C(-) R(✓) A(~) N(-) E(-)"`` in the given notation."""
    marks = NOTATIONS[notation]
    word = normalize_word(guess)
    if word is None:
        raise ValueError(f"cannot format feedback for {guess!r}: not a five-letter word")
    pattern_to_code(pattern)  # raises ValueError unless it is five G/Y/B marks
    return " ".join(f"{c}({marks[m]})" for c, m in zip(word, pattern.upper()))


def format_history(history: History) -> str:
    """One ``CRANE: C(-) R(✓) A(~) N(-) E(-)`` line per past guess."""
    return "\n".join(f"{normalize_word(g) or g}: {format_feedback(g, p)}" for g, p in history)


def _detect(marks: str) -> str:
    if "~" in marks:
        return "seed"
    if "x" in marks.lower():
        return "course"
    if "-" in marks:
        raise ValueError(
            f"feedback marks {marks!r} are ambiguous: '-' means absent in the seed notation and "
            "'elsewhere' in the course notation; pass notation='seed' or notation='course'"
        )
    return "seed"  # only ✓ marks: both notations agree


def parse_feedback(text: str, notation: str | None = None) -> tuple[str, str]:
    """Parse one guess's feedback into ``(GUESS, GYB pattern)``.

    Accepts ``"C(-) R(✓) A(~) N(-) E(-)"`` (commas allowed), with or without a ``"CRANE:"``
    prefix, in the seed or course notation (``notation=None`` detects it), or a plain
    ``"CRANE: BGYBB"`` / pattern-only ``"BGYBB"`` (then the guess is returned as ``""``).
    """
    if notation is not None and notation not in (*NOTATIONS, "gyb"):
        raise ValueError(f"unknown notation {notation!r}; valid: seed, course, gyb")
    text = text.strip()
    prefix, sep, rest = text.partition(":")
    body = rest.strip() if sep else text
    plain = body.upper()
    if len(plain) == WORD_LENGTH and all(c in "GYB" for c in plain) and notation in (None, "gyb"):
        return (normalize_word(prefix.strip()) or "") if sep else "", plain
    found = _MARK_RE.findall(body)
    leftover = _MARK_RE.sub("", body).replace(",", "").strip()
    if len(found) != WORD_LENGTH or leftover:
        raise ValueError(f"cannot parse feedback {text!r}: expected five marks like 'C(✓)'")
    letters = "".join(c for c, _ in found).upper()
    if sep and normalize_word(prefix.strip()) != letters:
        raise ValueError(f"feedback {text!r} names {prefix.strip()!r} but marks the letters {letters!r}")
    marks = "".join("✓" if m in _CHECKS else m for _, m in found)
    chosen = notation or _detect(marks)
    if chosen == "gyb":
        raise ValueError(f"feedback {text!r} is not a plain G/Y/B pattern")
    inverse = {v: k for k, v in NOTATIONS[chosen].items()}
    try:
        pattern = "".join(inverse[m if m != "X" else "x"] for m in marks)
    except KeyError as exc:
        raise ValueError(f"feedback {text!r} has mark {exc.args[0]!r}, not one of the {chosen} notation's") from None
    return letters, pattern


def parse_history(text: str, notation: str | None = "seed") -> list[tuple[str, str]]:
    """Every ``WORD: marks`` line of a rendered prompt (or any text), in order, as (GUESS, GYB) pairs."""
    return [parse_feedback(f"{word}: {body}", notation) for word, body in _LINE_RE.findall(text)]


def render_user_message(history: History) -> str:
    turn = len(history) + 1
    if not history:
        return f"Guess {turn} of {MAX_GUESSES}. No guesses yet."
    return f"Guess {turn} of {MAX_GUESSES}. Your guesses so far:\n{format_history(history)}"


def render_prompt(history: History = (), system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """The game state as chat messages: the rules and response format, then the history so far."""
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": render_user_message(history)},
    ]


def history_for(secret: str, guesses: Sequence[str]) -> list[tuple[str, str]]:
    """The (GUESS, PATTERN) history of playing ``guesses`` against ``secret``."""
    return [(normalize_word(g) or g, score_guess(g, secret)) for g in guesses]


def _where(row: int | str) -> str:
    return row if isinstance(row, str) else f"row {row}"


def row_history(row: int | str, history: Any) -> tuple[tuple[str, str], ...]:
    """Dataset row ``row``'s history as upper-case (GUESS, PATTERN) pairs; ValueError naming the row if malformed.

    ``row`` is an index, or how a user finds the row in a file ("line 3"). Shared by the rewards
    and the dataset loader, so both reject exactly the same rows."""
    if history is None:
        return ()
    if isinstance(history, (str, bytes)) or not isinstance(history, Sequence):
        raise ValueError(f"{_where(row)}: past_guess_history must be a list of [GUESS, PATTERN] pairs, got {history!r}")
    pairs = []
    for item in history:
        if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) != 2:
            raise ValueError(f"{_where(row)}: past_guess_history entry {item!r} is not a [GUESS, PATTERN] pair")
        guess, pattern = normalize_word(item[0]), item[1]
        if guess is None:
            raise ValueError(f"{_where(row)}: past_guess_history guess {item[0]!r} is not a five-letter word")
        try:
            pattern_to_code(pattern)
        except ValueError:
            raise ValueError(f"{_where(row)}: past_guess_history pattern {pattern!r} is not five G/Y/B marks") from None
        pairs.append((guess, pattern.upper()))
    return tuple(pairs)


def row_secret(row: int | str, secret: Any) -> str:
    """Dataset row ``row``'s secret, upper case; ValueError naming the row if it is not a five-letter word."""
    word = normalize_word(secret)
    if word is None:
        raise ValueError(f"{_where(row)}: secret {secret!r} is not a five-letter word")
    return word
