"""Constrained decoding: once a reply has opened ``<guess>``, only a listed word can follow.

Two forms of the same constraint:

- :class:`GuessConstraint` builds a transformers ``LogitsProcessor`` for ``model.generate``. It
  works for any tokenizer (the letter-level tiny one, BPE hub ones): every token's text is
  decoded once, and each step keeps only the tokens whose text extends the reply after
  ``<guess>`` along a path of a trie of ``WORD</guess>`` strings, per row. The words are every
  allowed word, or one row's own list (its game's remaining candidates).
- :func:`guess_regex` is the whole reply as a regex, for TRL's ``vllm_structured_outputs_regex``.

A constrained model is a different player from the model itself: results are reported as their
own row, never as the model's skill.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from transformers import LogitsProcessor

from wordle import allowed, normalize_word
from wordle.completion import GUESS_CLOSE, GUESS_OPEN, THINK_CLOSE, THINK_OPEN

_END = ""  # trie key of what ends at a node (token ids, or True for a complete target)
_MAX_CACHED_TRIES = 4096
_ALPHABET = frozenset(string.ascii_letters + GUESS_CLOSE)  # every character of every target


def guess_regex(words: Iterable[str] | None = None) -> str:
    """A regex for a whole reply ``<think>…</think><guess>WORD</guess>``, WORD one of ``words``
    (default: every allowed word). The think holds no ``<``, so it cannot hold a tag."""
    listed = allowed() if words is None else words
    normalized = sorted({_word(w) for w in listed})
    if not normalized:
        raise ValueError("guess_regex needs at least one word")
    return f"{THINK_OPEN}[^<]*{THINK_CLOSE}{GUESS_OPEN}({'|'.join(normalized)}){GUESS_CLOSE}"


def _word(text: str) -> str:
    word = normalize_word(text)
    if word is None:
        raise ValueError(f"expected a five-letter ASCII word, got {text!r}")
    return word


def _targets_trie(words: Iterable[str]) -> dict:
    """A character trie of ``WORD</guess>`` for each word, in upper and lower case (both parse)."""
    root: dict = {}
    for w in words:
        word = _word(w)
        for spelling in {word, word.lower()}:
            node = root
            for ch in spelling + GUESS_CLOSE:
                node = node.setdefault(ch, {})
            node[_END] = True
    return root


class GuessConstraint:
    """Precomputed per tokenizer: each token's decoded text, in a trie. :meth:`for_batch` makes the processor."""

    def __init__(self, tokenizer: Any, eos_token_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        self.eos = torch.tensor(sorted(set(eos_token_ids)), dtype=torch.long)
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))], skip_special_tokens=True)
        # Only tokens made of characters some target holds can ever be allowed.
        self.token_trie: dict = {}
        for token_id, text in enumerate(texts):
            if text and set(text) <= _ALPHABET:
                node = self.token_trie
                for ch in text:
                    node = node.setdefault(ch, {})
                node.setdefault(_END, []).append(token_id)
        self._tries: dict[tuple[str, ...] | None, dict] = {}
        self._allowed_ids: dict[tuple[int, str], torch.Tensor] = {}

    def trie(self, words: tuple[str, ...] | None) -> dict:
        """The target trie of ``words`` (None: every allowed word), cached: a batch repeats states."""
        if words not in self._tries:
            if len(self._tries) >= _MAX_CACHED_TRIES:
                self._tries.clear()
                self._allowed_ids.clear()
            self._tries[words] = _targets_trie(allowed() if words is None else words)
        return self._tries[words]

    def allowed_ids(self, trie: dict, written: str) -> torch.Tensor:
        """Token ids that keep ``written`` (the text after ``<guess>``) on a path of ``trie``;
        the eos ids once a target is complete, or when nothing fits (the reply then fails to parse)."""
        key = (id(trie), written)
        if key not in self._allowed_ids:
            node = trie
            for ch in written:
                node = node.get(ch)
                if node is None:
                    break
            if node is None or node.get(_END):
                ids = self.eos
            else:
                found: list[int] = []
                _walk(node, self.token_trie, found)
                ids = torch.tensor(sorted(found), dtype=torch.long) if found else self.eos
            self._allowed_ids[key] = ids
        return self._allowed_ids[key]

    def for_batch(self, prompt_len: int, words: Sequence[tuple[str, ...] | None]) -> GuessLogitsProcessor:
        """The processor for one ``generate`` call: row i may only write a word of ``words[i]``."""
        return GuessLogitsProcessor(self, prompt_len, [self.trie(w) for w in words])


def _walk(target: dict, tokens: dict, found: list[int]) -> None:
    """Every token whose text is a path from ``target`` (the two tries walked in step)."""
    found.extend(tokens.get(_END, ()))
    small, large = (target, tokens) if len(target) <= len(tokens) else (tokens, target)
    for ch in small:
        if ch != _END and ch in large:
            _walk(target[ch], tokens[ch], found)


class GuessLogitsProcessor(LogitsProcessor):
    """Masks, per row, every token that would leave the listed words once ``<guess>`` is open."""

    def __init__(self, constraint: GuessConstraint, prompt_len: int, tries: list[dict]) -> None:
        self.constraint, self.prompt_len, self.tries = constraint, prompt_len, tries

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        generated = input_ids[:, self.prompt_len :].tolist()
        texts = self.constraint.tokenizer.batch_decode(generated, skip_special_tokens=True)
        for row, text in enumerate(texts):
            opened = text.find(GUESS_OPEN)
            if opened < 0:
                continue
            ids = self.constraint.allowed_ids(self.tries[row], text[opened + len(GUESS_OPEN) :])
            keep = scores[row, ids.to(scores.device)].clone()
            scores[row] = float("-inf")
            scores[row, ids.to(scores.device)] = keep
        return scores
