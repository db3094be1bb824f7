"""Reading a model's reply: ``<think>…</think><guess>WORD</guess>`` and nothing else.

The parser is strict on purpose. A reply parses only when it is, in order: optional whitespace,
one ``<think>…</think>``, optional whitespace, one ``<guess>WORD</guess>``, optional whitespace.
Neither the think text nor WORD may contain a tag, so a second ``<guess>``, a guess hidden
inside ``<think>``, or text after ``</guess>`` all fail to parse. It runs in linear time with
string searches (no backtracking regex), so a 100 kB reply costs microseconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from wordle.words import allowed, normalize_word

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
GUESS_OPEN, GUESS_CLOSE = "<guess>", "</guess>"

# Any spelling of the four tags, whatever the case or inner spaces: "< GUESS >" inside the think
# text is still an attempt at a second guess.
_TAG_RE = re.compile(r"<\s*/?\s*(?:think|guess)\s*>", re.IGNORECASE)


def completion_text(completion: Any) -> str:
    """The text of a completion: a plain string, or the content of a chat-format message list.

    TRL passes conversational completions as ``[{"role": "assistant", "content": ...}]``;
    content may itself be a list of ``{"type": "text", "text": ...}`` parts. Anything else is
    treated as empty text, which parses to nothing.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        parts = []
        for message in completion:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, (list, tuple)):
                parts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        return "".join(parts)
    return ""


def parse_completion(text: Any) -> str | None:
    """The guess of a well-formed reply, stripped of surrounding whitespace, else None.

    The guess is returned as written (any case, any characters); whether it is a five-letter
    word is for the caller to judge.
    """
    text = completion_text(text).strip()
    if not text.startswith(THINK_OPEN) or not text.endswith(GUESS_CLOSE):
        return None
    think_end = text.find(THINK_CLOSE, len(THINK_OPEN))
    if think_end < 0:
        return None
    think = text[len(THINK_OPEN) : think_end]
    rest = text[think_end + len(THINK_CLOSE) :].lstrip()
    if not rest.startswith(GUESS_OPEN):
        return None
    word = rest[len(GUESS_OPEN) : -len(GUESS_CLOSE)]
    # A tag in either part means repeated or nested tags (e.g. "<guess>A</guess><guess>B</guess>"
    # leaves "A</guess><guess>B" as the word).
    if len(rest) < len(GUESS_OPEN) + len(GUESS_CLOSE):
        return None
    if ("<" in think and _TAG_RE.search(think)) or ("<" in word and _TAG_RE.search(word)):
        return None
    return word.strip()


def guess_regex(words: Iterable[str] | None = None) -> str:
    """A regex for a whole reply ``<think>…</think><guess>WORD</guess>``, WORD one of ``words``
    (default: every allowed word) in upper case. The think holds no ``<``, so it cannot hold a tag; whitespace may
    come between the think and the guess, as the reader takes it (the canonical form has two newlines there)."""
    return f"{THINK_OPEN}[^<]*{THINK_CLOSE}[ \\t\\n\\r]*{GUESS_OPEN}({'|'.join(listed_words(words))}){GUESS_CLOSE}"


def listed_words(words: Iterable[str] | None) -> list[str]:
    """The listed words, upper case (as the prompt shows them), sorted, once each."""
    listed = allowed() if words is None else words
    normalized = set()
    for text in listed:
        word = normalize_word(text)
        if word is None:
            raise ValueError(f"expected a five-letter ASCII word, got {text!r}")
        normalized.add(word)
    if not normalized:
        raise ValueError("constrained decoding needs at least one word")
    return sorted(normalized)
