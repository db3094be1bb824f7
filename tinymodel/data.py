"""The embedded model's supervised rows: game states of the training secrets and of stand-in secrets (allowed words
that are not answers), and the replies it learns.

Every reply is ``<think>.R..E</think><guess>WORD</guess>``: the opener (:func:`opener`) on turn 1, afterwards a
random still-possible answer, with every candidate listed for the soft target of
:class:`tinymodel.sft.SoftTargetTrainer`.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from typing import Any

import datasets
import torch
from transformers import PreTrainedTokenizerFast

from tinymodel.tokenizer import WORD_SET
from wordle import Solver, allowed, answers, candidates, information_many, non_answers, render_prompt
from wordle.game import play_guesses


def think_text(history: Sequence[tuple[str, str]]) -> str:
    """The letters placed so far: ``".R..E"``, one character per position, '.' where none is known.

    Short (5 tokens) and learnable by a model this small. A fuller summary (letters elsewhere,
    letters absent: ``".R..E +A -SOIT"``) was tried: the model wrote it right on 20% of held-out
    states, and its own wrong summaries then misled its guesses.
    """
    placed = ["."] * 5
    for guess, pattern in history:
        for i, (letter, mark) in enumerate(zip(guess, pattern.upper())):
            if mark == "G":
                placed[i] = letter
    return "".join(placed)


def reply_text(history: Sequence[tuple[str, str]], guess: str) -> str:
    return f"<think>{think_text(history)}</think><guess>{guess}</guess>"


# Past guesses per state: the decisions of turns 2-4 are where games are won, so they dominate.
TURN_WEIGHTS = (0.08, 0.32, 0.30, 0.18, 0.08, 0.04)


@functools.cache
def opener() -> str:
    """The model's first guess: the answer of most expected information over all the answers (RAISE, 5.878 bits).

    Why an answer: every answer is one token, which the model cannot misspell. The solver's SOARE (5.886 bits) is
    no answer, so it was spelled a letter at a time, and one build seed of two misspelled it on every game.
    """
    return answers()[int(information_many(answers(), candidates()).argmax())]


def practice_history(secret: str, rng: random.Random, solver: Solver) -> list[tuple[str, str]]:
    """A history the model will meet, from any opening: the model's own opener in 40% of histories, a
    random answer or a random allowed word in 30% each, so that it learns to read a feedback line in general
    and not the 243 lines of one opener; then mostly still-possible answers (its own kind of play), with
    solver, random-answer and random-word guesses mixed in so that it also reads states it would not have
    made. Stops before a guess that would win."""

    def choose(history: list[tuple[str, str]]) -> str:
        draw = rng.random()
        if not history:
            if draw < 0.4:
                return opener()
            return rng.choice(answers()) if draw < 0.7 else rng.choice(allowed())
        still = candidates(history).words()  # none left once a stand-in secret has ruled every answer out
        if draw < 0.65 and still:
            return rng.choice(still)
        if draw < 0.75 and still and len(history) == 1 and history[0][0] == opener():
            return solver.next_guess(history)  # memoised after the opener; elsewhere 30 ms a state
        return rng.choice(answers()) if draw < 0.875 else rng.choice(allowed())

    return play_guesses(secret, rng.choices(range(len(TURN_WEIGHTS)), TURN_WEIGHTS)[0], choose)


# Share of states played against a stand-in secret: an allowed word that is not an answer. Games of the
# training secrets alone teach which feedback leads to those words: the model then answers a state of an unseen
# secret with a training secret the feedback rules out (71-75% of its contradicting answers were: docs/research-log.md).
# A stand-in's feedback rules answers in and out in combinations no answer's does, and the target is still every
# answer that fits, so what pays is reading the feedback. No answer outside ``secrets`` is ever the secret.
STAND_IN_SHARE = 0.5


def game_rows(n_rows: int, rng: random.Random, solver: Solver, secrets: Sequence[str]) -> list[dict[str, Any]]:
    """Prompt-completion rows: a game state of a training secret or a stand-in, answered with :func:`opener`
    on turn 1 and afterwards with a *random* still-possible answer; ``candidates`` lists every
    answer the guess could have been (the opener alone on turn 1), for the soft target of :func:`tinymodel.sft.train`.

    A random candidate rather than the solver's choice: the solver's later guesses (the most
    informative of 12972 words, often impossible ones) are a function this model cannot learn (it
    matched them on 29% of turn-2 states and almost never later), while "some word that fits" is,
    and every such guess can win. Sampling then spreads over the candidates, which is what gives
    GRPO different rewards within a group to learn from.
    """
    rows = []
    while len(rows) < n_rows:
        secret = rng.choice(secrets) if rng.random() >= STAND_IN_SHARE else rng.choice(non_answers())
        history = practice_history(secret, rng, solver)
        targets = [opener()] if not history else candidates(history).words()
        if not targets:
            continue  # a stand-in secret's feedback that no answer fits: nothing to learn
        rows.append(
            {
                "prompt": render_prompt(history),
                "completion": [{"role": "assistant", "content": reply_text(history, rng.choice(targets))}],
                "candidates": targets,
            }
        )
    return rows


def encode(tokenizer: PreTrainedTokenizerFast, rows: Sequence[dict[str, Any]]) -> datasets.Dataset:
    """Token ids of prompt + reply, labels on the reply only, and for a reply whose guess is one answer
    token: that token's position and the ids of every candidate answer (the soft target)."""
    prompts = tokenizer.apply_chat_template([r["prompt"] for r in rows], add_generation_prompt=True, tokenize=False)
    replies = [r["completion"][0]["content"] + tokenizer.eos_token for r in rows]
    prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    reply_ids = tokenizer(replies, add_special_tokens=False)["input_ids"]
    guess_open = tokenizer.convert_tokens_to_ids("<guess>")
    encoded: dict[str, list] = {"input_ids": [], "labels": [], "word_pos": [], "candidates": []}
    for row, p_ids, r_ids in zip(rows, prompt_ids, reply_ids):
        labels = [-100] * len(p_ids) + list(r_ids)
        word_pos, cands = -1, []
        at = r_ids.index(guess_open) + 1 if guess_open in r_ids else -1
        if 0 < at < len(r_ids) and tokenizer.convert_ids_to_tokens(r_ids[at]) in WORD_SET:
            word_pos = len(p_ids) + at
            labels[word_pos] = -100  # scored against every candidate instead
            cands = tokenizer.convert_tokens_to_ids(list(row["candidates"]))
        encoded["input_ids"].append(list(p_ids) + list(r_ids))
        encoded["labels"].append(labels)
        encoded["word_pos"].append(word_pos)
        encoded["candidates"].append(cands)
    return datasets.Dataset.from_dict(encoded)


def collate(features: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(f["input_ids"]) for f in features)
    k = max(1, max(len(f["candidates"]) for f in features))

    def pad(values: list, length: int, fill: int) -> list:
        return list(values) + [fill] * (length - len(values))

    return {
        "input_ids": torch.tensor([pad(f["input_ids"], width, pad_id) for f in features]),
        "attention_mask": torch.tensor([pad([1] * len(f["input_ids"]), width, 0) for f in features]),
        "labels": torch.tensor([pad(f["labels"], width, -100) for f in features]),
        "word_pos": torch.tensor([f["word_pos"] for f in features]),
        "candidates": torch.tensor([pad(f["candidates"], k, -1) for f in features]),
    }
