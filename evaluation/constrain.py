"""Constrained decoding: the whole reply is ``<think>…</think><guess>WORD</guess>``, WORD a listed word.

Two forms of the same grammar:

- :func:`wordle.completion.guess_regex` is the reply as a regex, for TRL's ``vllm_structured_outputs_regex``.
- :class:`GuessConstraint` builds a transformers ``LogitsProcessor`` for ``model.generate`` that
  follows it token by token, for any tokenizer (letter-level, byte-level BPE, SentencePiece): the
  reply opens with ``<think>``; the think is free text without ``<``, so it holds no tag; a ``<``
  starts ``</think><guess>``, then a listed word in upper case (every allowed word, or one row's own
  list: its game's remaining candidates), ``</guess>`` and eos. The think closes in time: once the tokens left only just hold
  ``</think><guess>``, the longest listed word and ``</guess>`` + eos, each in its fewest tokens,
  free text is masked; and no token may leave fewer tokens than the reply still needs. So every
  constrained reply parses as a listed word, whatever the weights, for any ``max_new_tokens`` that
  holds ``<think></think><guess>WORD</guess>`` + eos with the longest allowed word (a smaller one is
  an error).

Per tokenizer, each token's text is decoded once, as it reads inside a reply (SentencePiece writes a
leading space as "▁" and drops it at the start of a decode, so "▁C" reads "C" alone and " C" after
text): the free-text tokens are one boolean vector, and the tokens made only of the tail's
characters go into a trie. Per word list, the grammar after the think is a character DAG (the
words' trie, then one shared ``</guess>``); walking it in step with the token trie gives each
state's tokens and, bottom up, the fewest tokens that finish the reply from each state.

A constrained model is a different player from the model itself: results are reported as their
own row, never as the model's skill.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor

from wordle.completion import GUESS_CLOSE, GUESS_OPEN, THINK_CLOSE, THINK_OPEN, listed_words

_MAX_CACHED_GRAMMARS = 4096  # word lists: a run meets many candidate lists, most of them short
_ANCHOR = ">"  # a plain one-token text in every tokenizer met so far
# The whitespace the reply reader accepts between "</think>" and "<guess>" (str.lstrip's, in ASCII).
_BETWEEN = " \t\n\r"
_TAIL_ALPHABET = frozenset(string.ascii_letters + THINK_CLOSE + GUESS_OPEN + GUESS_CLOSE + _BETWEEN)


class _State:
    """A state of the grammar: the character -> state edges, and the fewest tokens (eos included)
    that finish the reply from here, with the tokens that lead on."""

    __slots__ = ("cost", "moves", "next", "table")

    def __init__(self, next: dict[str, _State] | None = None, cost: float | None = None) -> None:
        self.next = {} if next is None else next
        self.cost = cost
        self.moves: list[tuple[list[int], _State]] | None = None  # (token ids, the state they lead to)
        self.table: tuple[torch.Tensor, torch.Tensor] | None = None  # moves as (ids, costs), once visited


def _chain(text: str, end: _State) -> _State:
    """States spelling ``text``, then ``end``."""
    for ch in reversed(text):
        end = _State({ch: end})
    return end


class _Tokens:
    """A trie of token texts: ``ids`` are the tokens whose text ends here."""

    __slots__ = ("ids", "next")

    def __init__(self) -> None:
        self.next: dict[str, _Tokens] = {}
        self.ids: list[int] = []


class ReplyBudgetError(ValueError):
    """max_new_tokens cannot hold the shortest complete reply with the longest listed word."""


class GuessConstraint:
    """Precomputed per tokenizer: each token's text. :meth:`for_batch` makes the processor."""

    def __init__(self, tokenizer: Any, eos_token_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        # Every decode here starts behind one plain token whose text is then cut off: a token reads as
        # it does inside a reply, and a reply as its tokens read one after another.
        self.anchor = tokenizer.encode(_ANCHOR, add_special_tokens=False)[:1]
        self.anchor_text = tokenizer.decode(self.anchor)
        texts = self.decode([[i] for i in range(len(tokenizer))])
        # Special tokens decode to nothing: they are never free text.
        self.free = torch.tensor([bool(t) and "<" not in t for t in texts])
        self.tokens = _Tokens()  # the tokens that can be part of "</think><guess>WORD</guess>"
        self.opening: list[tuple[int, str]] = []  # the tokens holding a "<": only they can close the think
        # spelling[k]: the tokens that go on from the first k characters of "<think>": they write a
        # prefix of the rest, or all of it and more.
        self.spelling: list[list[tuple[int, str]]] = [[] for _ in THINK_OPEN]
        for token_id, text in enumerate(texts):
            if not text:
                continue
            if set(text) <= _TAIL_ALPHABET:
                node = self.tokens
                for ch in text:
                    child = node.next.get(ch)
                    if child is None:
                        child = node.next[ch] = _Tokens()
                    node = child
                node.ids.append(token_id)
            if "<" in text:
                self.opening.append((token_id, text))
            if text[0] in THINK_OPEN:
                for k in range(len(THINK_OPEN)):
                    if text.startswith(THINK_OPEN[k:]) or THINK_OPEN.startswith(text, k):
                        self.spelling[k].append((token_id, text))
        ended = _State(cost=0)
        self.done = _State(cost=1)  # "</guess>" written: only eos may follow
        self.done.moves = [(sorted(set(eos_token_ids)), ended)]
        self.guess_close = _chain(GUESS_CLOSE, self.done)  # shared by every word list
        self._grammars: dict[tuple[str, ...] | None, Grammar] = {}
        self._word_tokens = {word: self.fewest_tokens(word) for word in listed_words(None)}
        # Every word list (a game's candidates too) is some allowed words: a budget that holds an empty
        # think and the longest allowed word holds a reply for any list.
        self.longest_reply = self.fewest_tokens(THINK_OPEN) + self.close_at(listed_words(None))

    def decode(self, rows: Sequence[Sequence[int]]) -> list[str]:
        """Each row of token ids as text that follows other text (special tokens decode to nothing)."""
        texts = self.tokenizer.batch_decode([[*self.anchor, *row] for row in rows], skip_special_tokens=True)
        return [text.removeprefix(self.anchor_text) for text in texts]

    def grammar(self, words: tuple[str, ...] | None) -> Grammar:
        """The grammar of ``words`` (None: every allowed word), cached: a batch repeats states."""
        if words not in self._grammars:
            if len(self._grammars) >= _MAX_CACHED_GRAMMARS:
                self._grammars.clear()
            self._grammars[words] = Grammar(self, listed_words(words))
        return self._grammars[words]

    def fewest_tokens(self, text: str) -> float:
        """The fewest tokens that write ``text`` (of the characters in the trie), inf if none can."""
        best = [math.inf] * len(text) + [0]
        for start in reversed(range(len(text))):
            node = self.tokens
            for end in range(start, len(text)):
                node = node.next.get(text[end])
                if node is None:
                    break
                if node.ids:
                    best[start] = min(best[start], 1 + best[end + 1])
        return best[0]

    def close_at(self, words: list[str]) -> float:
        """Tokens that hold "</think><guess>", the longest of ``words`` and "</guess>", each in its fewest
        tokens, + eos: from here on the think may write no more free text, so any word still fits."""
        longest = max(self._word_tokens.get(word) or self.fewest_tokens(word) for word in words)
        return self.fewest_tokens(THINK_CLOSE + GUESS_OPEN) + longest + self.fewest_tokens(GUESS_CLOSE) + 1

    def check_budget(self, max_new_tokens: int) -> None:
        """ReplyBudgetError unless ``max_new_tokens`` holds the longest constrained reply."""
        if max_new_tokens < self.longest_reply:
            raise ReplyBudgetError(
                f"--max_new_tokens {max_new_tokens} is too few for constrained replies: "
                f'"<think></think><guess>WORD</guess>" + eos takes up to {self.longest_reply:g} tokens'
            )

    def for_batch(
        self, prompt_len: int, words: Sequence[tuple[str, ...] | None], max_new_tokens: int
    ) -> GuessLogitsProcessor:
        """The processor for one ``generate`` call: row i writes a word of ``words[i]``."""
        self.check_budget(max_new_tokens)
        return GuessLogitsProcessor(self, prompt_len, [self.grammar(w) for w in words], max_new_tokens)


class Grammar:
    """The reply grammar for one word list, its states' costs, and when the think must close."""

    def __init__(self, constraint: GuessConstraint, words: list[str]) -> None:
        self.constraint = constraint
        root = _State()
        for word in words:
            state = root
            for ch in word[:-1]:
                state = state.next.get(ch) or state.next.setdefault(ch, _State())
            state.next[word[-1]] = constraint.guess_close
        # "</think>", any whitespace (a state that loops on it: "\n\n" is the form chat templates keep), "<guess>".
        between = _State()
        between.next = {ch: between for ch in _BETWEEN} | {GUESS_OPEN[0]: _chain(GUESS_OPEN[1:], root)}
        self.tail = _chain(THINK_CLOSE, between)
        self.think = _State()  # free text loops here, outside the DAG (see allowed)
        self.start = _chain(THINK_OPEN, self.think)
        self._opened = {}  # the states inside "<think>": how many of its characters are written
        state = self.start
        for k, ch in enumerate(THINK_OPEN):
            self._opened[state] = k
            state = state.next[ch]
        self._settle(self.start)
        self.close_at = constraint.close_at(words)

    def walk(self, state: _State | None, text: str) -> _State | None:
        """The state after writing ``text`` from ``state``, or None where the grammar forbids it."""
        at = 0
        while state is not None and at < len(text):
            if state is self.think:
                at = text.find("<", at)
                if at < 0:
                    return state
                state = self.tail
            state = state.next.get(text[at])
            at += 1
        return state

    def _settle(self, state: _State) -> float:
        """The state's cost, after its moves' (the grammar is a DAG once the think's free text and the whitespace
        after it are set apart: a move back to a state being settled costs more than any way out of it)."""
        if state.cost is None:
            state.cost = math.inf  # while its moves are settled: a loop back here is no way out
            if state is self.think:
                candidates = self.constraint.opening
            elif state in self._opened:
                candidates = self.constraint.spelling[self._opened[state]]
            else:
                candidates = None
            if candidates is None:
                state.moves = _token_moves(state, self.constraint.tokens)
            else:
                state.moves = [([i], land) for i, text in candidates if (land := self.walk(state, text)) is not None]
            state.cost = 1 + min((self._settle(land) for _, land in state.moves), default=math.inf)
        return state.cost

    def allowed(self, text: str, left: int) -> tuple[bool, torch.Tensor]:
        """After the reply ``text``, with ``left`` tokens left to generate: whether free text may come
        next, and the ids of the other tokens that may."""
        state = self.walk(self.start, text)
        if state is None:
            raise RuntimeError(
                f"the constrained reply {text!r} left the grammar: do this tokenizer's tokens decode "
                "differently in a sequence than alone?"
            )
        if state.table is None:
            ids = [i for group, _ in state.moves for i in group]
            costs = [land.cost for group, land in state.moves for _ in group]
            state.table = torch.tensor(ids, dtype=torch.long), torch.tensor(costs, dtype=torch.float)
        ids, costs = state.table
        return state is self.think and left - 1 >= self.close_at, ids[costs <= left - 1]


def _token_moves(state: _State, tokens: _Tokens) -> list[tuple[list[int], _State]]:
    """Every token whose text is a path from ``state``, grouped by the state it reaches (the grammar
    and the token trie walked in step)."""
    moves = []
    stack = [(state, tokens)]
    while stack:
        state, tokens = stack.pop()
        if tokens.ids:
            moves.append((tokens.ids, state))
        small, large = (state.next, tokens.next) if len(state.next) <= len(tokens.next) else (tokens.next, state.next)
        stack.extend((state.next[ch], tokens.next[ch]) for ch in small if ch in large)
    return moves


class GuessLogitsProcessor(LogitsProcessor):
    """Masks, per row, every token the row's grammar does not allow next."""

    def __init__(
        self, constraint: GuessConstraint, prompt_len: int, grammars: list[Grammar], max_new_tokens: int
    ) -> None:
        self.constraint, self.prompt_len, self.grammars = constraint, prompt_len, grammars
        self.max_new_tokens = max_new_tokens

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        left = self.max_new_tokens - (input_ids.shape[1] - self.prompt_len)
        texts = self.constraint.decode(input_ids[:, self.prompt_len :].tolist())
        free_rows, rows, cols = [], [], []
        for row, (grammar, text) in enumerate(zip(self.grammars, texts, strict=True)):
            free, ids = grammar.allowed(text, left)
            if free:
                free_rows.append(row)
            rows.append(torch.full_like(ids, row))
            cols.append(ids)
        keep = torch.zeros_like(scores, dtype=torch.bool)
        free = self.constraint.free
        keep[free_rows, : len(free)] = free.to(scores.device)
        keep[torch.cat(rows).to(scores.device), torch.cat(cols).to(scores.device)] = True
        return scores.masked_fill_(~keep, float("-inf"))
