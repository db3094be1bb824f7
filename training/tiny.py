"""The embedded default model (``--model tiny``): built here, offline, and shipped in ``training/tiny_model``.

No machine of ours can reach a model hub, so the project makes its own small model:

- a **tokenizer that shows letters and picks words**: a prompt is spelled letter by letter, each
  letter with its feedback mark and its column as one token (``S(-)₁``, `` O(✓)₂``), so a past
  guess costs 12 tokens and every constraint it sets is one token. A guess of an answer is one token (an
  answer right before ``</guess>``), so the model chooses among words instead of spelling them,
  and cannot misspell one. Other words are spelled. The reply tags and fixed prompt phrases are
  single tokens too;
- a **chat template** that drops the system message (constant rules text) and ends every turn
  with ``<|end|>``, the eos token;
- a **small Qwen2** from config, so the trainer treats it exactly like a hub model, LoRA
  included;
- a **wired start**: a softmax regression from the prompt's tokens to the guessed answer (the
  *guess bag*, fitted in about two minutes) is written into the fresh model's layer 0 as uniform
  attention, so before any training its top answer already fits every feedback line in most
  states (:func:`_wire_guess_bag`);
- **supervised training** (a transformers ``Trainer``) on game states of the training secrets
  only, answered ``<think>.R..E</think><guess>CRANE</guess>`` (10 tokens; the think is the letters
  placed so far): the solver's opener on turn 1, afterwards the answer token scored against every
  still-possible answer at once (a soft target). It teaches the reply's format and refines the
  wired guess.

``python -m training.tiny --out training/tiny_model`` rebuilds the shipped artefact (21 minutes
on one CPU core; training stops early if a busy machine would push it past the scale's
``max_seconds``); ``--scale ci`` makes a throwaway one in seconds for tests. What was tried before
this recipe, and what each try measured, is in the README.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import logging
import os
import random
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import (
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from training.data import play_guesses, train_secrets
from wordle import (
    Solver,
    allowed,
    answers,
    candidates,
    render_prompt,
)
from wordle.feedback import cache_dir

logger = logging.getLogger(__name__)

TINY_DIR = Path(__file__).resolve().parent / "tiny_model"
# Bump when the recipe changes, so that a model cached by ensure_tiny() under an old recipe is rebuilt.
RECIPE_VERSION = 4
# The files that make a loadable model directory; ensure_tiny() trusts a directory holding all of them.
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)

UNK, PAD, EOS, USER, ASSISTANT = "<|unk|>", "<|pad|>", "<|end|>", "<|user|>", "<|assistant|>"
SPECIAL_TOKENS = (UNK, PAD, EOS, USER, ASSISTANT)
# Multi-character pieces that are one token each: the reply tags, the feedback marks and the fixed
# phrases of wordle.prompts.render_user_message. Anything else is spelled a character at a time,
# so a changed prompt still round-trips, only longer (a test pins the prompt lengths).
# A marked letter ("S(-)", and " S(-)" with the space before it) is one token: the feedback is attached
# to the letter it is about, and a past guess's line costs 12 tokens instead of 21.
MARKS = ("✓", "~", "-")
MARKED_LETTERS = tuple(
    f"{space}{chr(c)}({mark})" for space in ("", " ") for c in range(ord("A"), ord("Z") + 1) for mark in MARKS
)
# A normalizer tags each mark of a five-mark feedback line with its column ("S(-)₁ O(-)₂ ..."), so a
# marked letter's token says which letter, which mark and where. That makes a guess's fit to the
# feedback a sum over the prompt's tokens, which the guess bag (_fit_guess_bag) learns in two minutes.
# The decoder drops the tags again, so prompts still decode to themselves.
COLUMN_TAGS = "₁₂₃₄₅"
TAGGED_LETTERS = tuple(f"{letter}{tag}" for letter in MARKED_LETTERS for tag in COLUMN_TAGS)
PIECES = (
    "<think>",
    "</think>",
    "<guess>",
    "</guess>",
    "(✓)",
    "(~)",
    "(-)",
    *MARKED_LETTERS,
    "Guess ",
    " of ",
    ". Your guesses so far:",
    ". No guesses yet.",
    ": ",
)
# Every answer is also one token when it is guessed: the model picks a word in one step, as a choice
# among answers, and cannot misspell it. Its embedding starts as the guess bag's vector for it
# (_wire_guess_bag), and past guesses reach the prompt as marked letters. Other allowed words (the
# SOARE opener among them) are spelled a letter at a time.
WORDS = answers()
_WORD_SET = frozenset(WORDS)
# Printable ASCII (so A-Z are single tokens, and any reply a model writes in ASCII round-trips),
# the whitespace the renderer uses, and the marks of wordle.prompts' notations.
CHARACTERS = (*(chr(c) for c in range(32, 127)), "\n", "\t", "✓", "✔")

# The custom tokenizer class named in tokenizer_config.json's auto_map. It exists because AutoTokenizer
# swaps any tokenizer of a config with model_type "qwen2" for Qwen2Tokenizer, which rebuilds a byte-level
# BPE from our vocabulary and mangles every string (spaces and newlines vanish). An auto_map turns that
# swap off: without trust_remote_code transformers then loads the declared tokenizer_class
# (TokenizersBackend) from tokenizer.json as is, and with trust_remote_code it loads this class,
# which is TokenizersBackend under a name.
_TOKENIZER_MODULE = "tokenization_wordle_tiny"
_TOKENIZER_CLASS = "WordleTinyTokenizer"
_TOKENIZER_SOURCE = f'''"""The wordle-grpo tiny model's tokenizer: tokenizer.json loaded as it is (see training/tiny.py)."""

from transformers import TokenizersBackend


class {_TOKENIZER_CLASS}(TokenizersBackend):
    pass
'''

# System messages are dropped: the tiny model is trained on one task, and the rules text would be a
# third of every prompt. The {% generation %} markers let SFT's assistant_only_loss find the reply.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{- '" + USER + "' + message['content'] + '" + EOS + "' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '" + ASSISTANT + "' -}}"
    "{%- generation -%}{{- message['content'] + '" + EOS + "' -}}{%- endgeneration -%}"
    "{%- elif message['role'] != 'system' -%}"
    "{{- raise_exception('the tiny model chat template knows only system, user and assistant messages') -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '" + ASSISTANT + "' -}}{%- endif -%}"
)


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big a build is. ``max_seconds`` only guards against a slow machine: training stops once
    the build has run that long (recorded in build_info.json); otherwise a build is deterministic
    in its seed."""

    steps: int  # one pass over steps * batch_size fresh game states
    batch_size: int
    learning_rate: float
    bag_steps: int  # fitting the guess bag (see _fit_guess_bag), batches of batch_size states
    bag_learning_rate: float
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    eval_games: int  # full games on held-out secrets after the build
    max_seconds: float


SCALES: dict[str, Scale] = {
    "full": Scale(
        steps=900,
        batch_size=64,
        learning_rate=1e-3,  # 5e-4 left the replies' format unlearnt after 300 steps
        bag_steps=1500,
        bag_learning_rate=1e-2,
        hidden_size=256,
        intermediate_size=768,
        num_layers=4,
        num_heads=8,
        num_kv_heads=8,  # the wiring copies values through: one key/value head per head
        eval_games=300,
        max_seconds=1800.0,
    ),
    "ci": Scale(
        steps=6,
        batch_size=8,
        learning_rate=3e-3,
        bag_steps=20,
        bag_learning_rate=1e-2,
        hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=2,
        num_kv_heads=2,
        eval_games=8,
        max_seconds=60.0,
    ),
}


# --- tokenizer ------------------------------------------------------------------------------------


def build_tokenizer(column_tags: bool = True) -> PreTrainedTokenizerFast:
    """The letter-level tokenizer, with the chat template and eos/pad/unk set.

    A word-level model over a fixed vocabulary: the pre-tokenizer cuts text into the longest piece
    of ``PIECES`` or else one character, and the decoder joins tokens back without separators, so
    every string of vocabulary characters decodes to itself. Other characters become ``<|unk|>``.
    ``column_tags`` adds the column-tagged marked letters (see ``COLUMN_TAGS``) after every other token;
    ``column_tags=False`` is the untagged tokenizer of recipe 3, kept for comparisons.
    """
    tagged = TAGGED_LETTERS if column_tags else ()
    vocab = {token: i for i, token in enumerate((*SPECIAL_TOKENS, *PIECES, *CHARACTERS, *WORDS, *tagged))}
    pieces = "|".join(re.escape(p) for p in sorted((*PIECES, *tagged), key=len, reverse=True))
    # An answer is one token only as a guess, right before "</guess>": in a prompt's history it is spelled,
    # so the model reads its letters next to their marks and is not primed to repeat the word.
    words = "(?:" + "|".join(WORDS) + f")(?={re.escape('</guess>')})"
    pieces = f"{words}|{pieces}"
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(f"{pieces}|[\\s\\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    if column_tags:
        backend.normalizer = _column_tagger()
        backend.decoder = decoders.Sequence([decoders.Replace(Regex(f"[{COLUMN_TAGS}]"), ""), decoders.Fuse()])
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token=UNK,
        pad_token=PAD,
        eos_token=EOS,
        additional_special_tokens=[USER, ASSISTANT],
        clean_up_tokenization_spaces=False,
        model_max_length=512,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _column_tagger() -> normalizers.Normalizer:
    """Tags the mark of column k of every five-mark feedback line with ``COLUMN_TAGS[k]``.

    The rules run column by column. A mark is in column k when exactly 4 - k marked letters follow it
    before the line ends (later columns are still untagged then) and the letter before it follows
    ": " (column 1) or a mark tagged k - 1, so only whole lines of five are tagged."""
    marks = "".join(MARKS)
    rules = []
    for k, tag in enumerate(COLUMN_TAGS):
        before = ": " if k == 0 else f"[{marks}]\\){COLUMN_TAGS[k - 1]} "
        after = f"(?: [A-Z]\\([{marks}]\\)){{{4 - k}}}(?:\\n|\\z)"
        rules += [
            normalizers.Replace(Regex(f"(?<={before}[A-Z])\\({re.escape(m)}\\)(?={after})"), f"({m}){tag}")
            for m in MARKS
        ]
    return normalizers.Sequence(rules)


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: Path) -> None:
    """``save_pretrained``, plus the auto_map that keeps AutoTokenizer from swapping in Qwen2Tokenizer."""
    tokenizer.save_pretrained(out_dir)
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["auto_map"] = {"AutoTokenizer": [None, f"{_TOKENIZER_MODULE}.{_TOKENIZER_CLASS}"]}
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out_dir / f"{_TOKENIZER_MODULE}.py").write_text(_TOKENIZER_SOURCE, encoding="utf-8")


# --- model ----------------------------------------------------------------------------------------


def build_model(tokenizer: PreTrainedTokenizerFast, scale: Scale, seed: int) -> Qwen2ForCausalLM:
    """A freshly initialised small Qwen2 for ``tokenizer``, in float32."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=scale.hidden_size,
        intermediate_size=scale.intermediate_size,
        num_hidden_layers=scale.num_layers,
        num_attention_heads=scale.num_heads,
        num_key_value_heads=scale.num_kv_heads,
        max_position_embeddings=tokenizer.model_max_length,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=48,
        do_sample=False,
    )
    return model


# --- the guess bag, wired into layer 0 ---------------------------------------------------------------


def _guess_states(encoded: datasets.Dataset) -> list[tuple[int, list[int], list[int]]]:
    """Every row whose reply guesses an answer token: its index, its token ids up to and including
    ``<guess>``, and its candidate answers' ids. The columns are read once: indexing a datasets
    column row by row re-reads it each time (3 s per 5000 rows, measured)."""
    columns = encoded.to_dict()
    return [
        (i, ids[:pos], cands)
        for i, (ids, pos, cands) in enumerate(zip(columns["input_ids"], columns["word_pos"], columns["candidates"]))
        if pos > 0
    ]


def _fit_guess_bag(
    encoded: datasets.Dataset, tokenizer: PreTrainedTokenizerFast, spec: Scale, seed: int
) -> torch.Tensor:
    """A softmax regression for the guessed answer: its logits are the mean, over the tokens before it,
    of one learned row per token, fitted to the soft target of :class:`_SoftTargetTrainer`.

    With column-tagged marks every Wordle constraint is one such row (an absent S lowers every word
    with an S; a green R in column 2 raises every word with R there), so the bag composes any number
    of feedback lines, which a transformer trained from scratch did not learn to do at this compute
    (README, tries). Returns the (vocabulary x answers) matrix, answers in ``WORDS`` order.
    """
    generator = torch.Generator().manual_seed(seed)
    states = _guess_states(encoded)
    prefixes = [prefix for _, prefix, _ in states]
    word_ids = tokenizer.convert_tokens_to_ids(list(WORDS))
    column = {token: j for j, token in enumerate(word_ids)}
    targets = [[column[c] for c in cands] for _, _, cands in states]
    bag = torch.nn.EmbeddingBag(len(tokenizer), len(word_ids), mode="mean")
    torch.nn.init.zeros_(bag.weight)
    temperature = torch.nn.Parameter(torch.tensor(10.0))
    optimizer = torch.optim.Adam([bag.weight, temperature], lr=spec.bag_learning_rate)
    for step in range(spec.bag_steps):
        batch = torch.randint(len(states), (spec.batch_size,), generator=generator).tolist()
        flat = torch.tensor([t for i in batch for t in prefixes[i]])
        offsets = torch.tensor([0, *itertools.accumulate(len(prefixes[i]) for i in batch)][:-1])
        logp = (temperature * bag(flat, offsets)).log_softmax(-1)
        loss = -torch.stack([logp[k, targets[i]].mean() for k, i in enumerate(batch)]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    logger.info("guess bag: %d steps, last loss %.3f", spec.bag_steps, loss.item() if spec.bag_steps else float("nan"))
    return (temperature * bag.weight).detach()


@torch.no_grad()
def _wire_guess_bag(
    model: Qwen2ForCausalLM, matrix: torch.Tensor, word_ids: list[int], encoded: datasets.Dataset
) -> None:
    """Make layer 0 compute the bag's mean before any training, so that SFT starts from a model that
    already composes feedback lines (measured: the untrained wired model's top answer fits every
    line in 93% of one-guess states and 67% of two-guess ones; benchmarks/probe_guess_bag.py).

    - embeddings: an SVD of ``matrix`` (rank hidden - 1) gives each token a row and each answer an
      output vector; the last coordinate is slack that gives every token row the same norm, so
      layer 0's RMSNorm scales them all alike instead of reweighting them;
    - layer 0: queries and keys zero (uniform attention over the prefix, so its output is the mean),
      values and output projections the identity;
    - later layers and every MLP start at a tenth of their output scale, close to the identity, so
      they add the reply's format without drowning the wired path;
    - the final norm is scaled so that the answers' logits have the bag's spread (least squares on
      256 training states).
    """
    config = model.config
    if config.num_key_value_heads != config.num_attention_heads:
        raise ValueError("wiring the guess bag needs one key/value head per attention head")
    d = config.hidden_size
    rank = d - 1
    embeddings = model.get_input_embeddings().weight
    row_norm = float(embeddings.std()) * d**0.5  # the init's typical row norm
    u, s, vh = torch.linalg.svd(matrix, full_matrices=False)
    rows = torch.zeros_like(embeddings)
    rows[:, :rank] = u[:, :rank] * s[:rank].sqrt()
    rows[:, rank] = (rows.norm(dim=1).max() ** 2 * 1.0201 - rows.pow(2).sum(1)).sqrt()
    words = vh[:rank].T * s[:rank].sqrt()
    rows *= row_norm / rows.norm(dim=1).max()
    rows[word_ids] = 0
    rows[word_ids, :rank] = words * row_norm / words.norm(dim=1).mean()
    embeddings.copy_(rows)
    for i, layer in enumerate(model.model.layers):
        attention = layer.self_attn
        if i == 0:
            for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
                projection.weight.zero_()
                projection.bias.zero_()
            attention.v_proj.weight[:rank, :rank] = torch.eye(rank)
            attention.o_proj.weight.copy_(torch.eye(d))
        else:
            attention.o_proj.weight.mul_(0.1)
        layer.mlp.down_proj.weight.mul_(0.1)
    model_logits, bag_logits = [], []
    for _, prefix, _ in _guess_states(encoded)[:256]:
        z = model(torch.tensor([prefix])).logits[0, -1, word_ids]
        b = matrix[prefix].mean(0)
        model_logits.append(z - z.mean())
        bag_logits.append(b - b.mean())
    z, b = torch.cat(model_logits), torch.cat(bag_logits)
    model.model.norm.weight.mul_(float((z * b).sum() / (z * z).sum()))


# --- training rows --------------------------------------------------------------------------------


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


def practice_history(secret: str, rng: random.Random, solver: Solver) -> list[tuple[str, str]]:
    """A history the model will meet: mostly its own kind of play (the solver's opener, then
    still-possible answers), with solver and random-word guesses mixed in so that it also reads
    states it would not have made. Stops before a guess that would win."""

    def choose(history: list[tuple[str, str]]) -> str:
        draw = rng.random()
        if not history:
            return solver.next_guess(history) if draw < 0.8 else rng.choice(allowed())
        if draw < 0.7:
            return rng.choice(candidates(history).words())
        if draw < 0.85 and len(history) == 1:  # memoised; later solver choices cost milliseconds each
            return solver.next_guess(history)
        return rng.choice(allowed())

    return play_guesses(secret, rng.choices(range(len(TURN_WEIGHTS)), TURN_WEIGHTS)[0], choose)


def game_rows(n_rows: int, rng: random.Random, solver: Solver, secrets: Sequence[str]) -> list[dict[str, Any]]:
    """Prompt-completion rows: a game state of a training secret, answered with the solver's opener
    on turn 1 and afterwards with a *random* still-possible answer; ``candidates`` lists every
    answer the guess could have been (the opener alone on turn 1), for the soft target of :func:`_train`.

    A random candidate rather than the solver's choice: the solver's later guesses (the most
    informative of 12972 words, often impossible ones) are a function this model cannot learn (it
    matched them on 29% of turn-2 states and almost never later), while "some word that fits" is,
    and every such guess can win. Sampling then spreads over the candidates, which is what gives
    GRPO different rewards within a group to learn from.
    """
    rows = []
    for _ in range(n_rows):
        history = practice_history(rng.choice(secrets), rng, solver)
        targets = [solver.next_guess(history)] if not history else candidates(history).words()
        rows.append(
            {
                "prompt": render_prompt(history),
                "completion": [{"role": "assistant", "content": reply_text(history, rng.choice(targets))}],
                "candidates": targets,
            }
        )
    return rows


# --- build ----------------------------------------------------------------------------------------


class _WallClock(TrainerCallback):
    """Stops training once ``deadline`` (a time.monotonic() value) has passed."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.stopped_early = False

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() > self.deadline:
            self.stopped_early = True
            control.should_training_stop = True
        return control


def _encode(tokenizer: PreTrainedTokenizerFast, rows: Sequence[dict[str, Any]]) -> datasets.Dataset:
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
        if 0 < at < len(r_ids) and tokenizer.convert_ids_to_tokens(r_ids[at]) in _WORD_SET:
            word_pos = len(p_ids) + at
            labels[word_pos] = -100  # scored against every candidate instead
            cands = tokenizer.convert_tokens_to_ids(list(row["candidates"]))
        encoded["input_ids"].append(list(p_ids) + list(r_ids))
        encoded["labels"].append(labels)
        encoded["word_pos"].append(word_pos)
        encoded["candidates"].append(cands)
    return datasets.Dataset.from_dict(encoded)


def _collate(features: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
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


class _SoftTargetTrainer(Trainer):
    """Cross-entropy on the reply's tokens, except that the guessed answer is scored against the
    uniform distribution over *all* candidate answers of the state rather than the one sampled:
    every row then teaches the whole set of words that fit (no previous guess among them), where a
    sampled target teaches one, noisily. Measured: see the README's table of tries."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        word_pos, cands, labels = inputs.pop("word_pos"), inputs.pop("candidates"), inputs.pop("labels")
        outputs = model(**inputs)
        logp = outputs.logits[:, :-1].float().log_softmax(-1)
        targets = labels[:, 1:]
        mask = targets != -100
        token_nll = -logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)[mask]
        rows = (word_pos > 0).nonzero().squeeze(-1)
        word_logp = logp[rows, word_pos[rows] - 1]  # the distribution the answer token is drawn from
        listed = cands[rows]
        valid = listed >= 0
        soft = -(word_logp.gather(-1, listed.clamp(min=0)) * valid).sum(-1) / valid.sum(-1).clamp(min=1)
        loss = (token_nll.sum() + soft.sum()) / (mask.sum() + len(rows)).clamp(min=1)
        return (loss, outputs) if return_outputs else loss


def _train(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    encoded: datasets.Dataset,
    steps: int,
    spec: Scale,
    seed: int,
    clock: _WallClock,
    scratch: str,
) -> tuple[int, float]:
    """``steps`` steps of supervised training on the replies (see :class:`_SoftTargetTrainer`);
    returns the steps taken and the mean training loss."""
    config = TrainingArguments(
        output_dir=scratch,
        max_steps=steps,
        per_device_train_batch_size=spec.batch_size,
        learning_rate=spec.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=min(100, steps // 10),
        weight_decay=0.01,
        train_sampling_strategy="group_by_length",  # prompts run from 8 to 68 tokens: batch like with like
        remove_unused_columns=False,
        use_cpu=True,
        seed=seed,
        data_seed=seed,
        save_strategy="no",
        report_to="none",
        logging_steps=max(1, steps // 10),
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = _SoftTargetTrainer(
        model=model,
        args=config,
        train_dataset=encoded,
        data_collator=functools.partial(_collate, pad_id=tokenizer.pad_token_id),
        callbacks=[clock],
    )
    result = trainer.train()
    return trainer.state.global_step, result.training_loss


def build(out_dir: str | Path, scale: str = "full", seed: int = 0) -> Path:
    """Build the tiny model into ``out_dir`` (tokenizer, model, generation config, build_info.json).

    Every training row comes from game states of ``training.data.train_secrets()``; the scores in
    build_info.json are measured on game states of the held-out ``eval_secrets()``.
    """
    from evaluation.run import evaluate_model, select_secrets

    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    spec = SCALES[scale]
    out_dir = Path(out_dir)
    started = time.monotonic()
    solver = Solver()
    rng = random.Random(seed)

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, spec, seed)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("tiny model (%s scale): %d parameters, vocabulary %d", scale, n_params, len(tokenizer))

    # One pass over fresh rows: data is cheap here, compute is not.
    rows = game_rows(spec.steps * spec.batch_size, rng, solver, train_secrets())
    logger.info("built %d game states in %.0f s", len(rows), time.monotonic() - started)

    encoded = _encode(tokenizer, rows)
    word_ids = tokenizer.convert_tokens_to_ids(list(WORDS))
    _wire_guess_bag(model, _fit_guess_bag(encoded, tokenizer, spec, seed), word_ids, encoded)
    logger.info("guess bag fitted and wired into layer 0 in %.0f s", time.monotonic() - started)

    clock = _WallClock(started + spec.max_seconds)
    with tempfile.TemporaryDirectory(prefix="tiny-sft-") as scratch:
        steps, loss = _train(model, tokenizer, encoded, spec.steps, spec, seed, clock, scratch)
    logger.info("trained %d steps, mean loss %.3f", steps, loss)
    if clock.stopped_early:
        logger.warning("training stopped early: the build's %.0f s budget ran out", spec.max_seconds)
    train_seconds = time.monotonic() - started

    model.eval()
    (result,) = evaluate_model(model, tokenizer, select_secrets(spec.eval_games))
    m = result.metrics
    scores = {"games": m["games"], "mean_guesses_won": m["mean_guesses_won"]["mean"]} | {
        key: m[key]["rate"] for key in ("win_rate", "format_failure_rate", "nonword_rate", "inconsistent_rate")
    }
    logger.info("held-out games: %s", scores)

    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    save_tokenizer(tokenizer, out_dir)
    info = {
        "recipe_version": RECIPE_VERSION,
        "scale": scale,
        "seed": seed,
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "train_secrets": "training.data.train_secrets()",
        "train_states": len(rows),
        "steps": steps,
        "max_steps": spec.steps,
        "stopped_early": clock.stopped_early,
        "mean_train_loss": round(loss, 4),
        "eval_secrets": "training.data.eval_secrets()",
        "eval": {k: round(v, 4) if isinstance(v, float) else v for k, v in scores.items()},
        "train_seconds": round(train_seconds, 1),
        "build_seconds": round(time.monotonic() - started, 1),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "command": "python -m training.tiny " + shlex.join([f"--out={out_dir}", f"--scale={scale}", f"--seed={seed}"]),
    }
    (out_dir / "build_info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return out_dir


def _is_model_dir(path: Path) -> bool:
    return all((path / name).is_file() for name in MODEL_FILES)


def ensure_tiny() -> Path:
    """The tiny model's directory: the shipped ``TINY_DIR``, or else a copy built once into the cache.

    The cache is ``$WORDLE_GRPO_CACHE_DIR`` or the user cache directory (as for the pattern matrix).
    """
    if _is_model_dir(TINY_DIR):
        return TINY_DIR
    target = cache_dir() / f"tiny_model-v{RECIPE_VERSION}"
    if _is_model_dir(target):
        return target
    logger.warning(
        "%s is missing its model files; building the tiny model into %s (about 20 minutes)", TINY_DIR, target
    )
    # Build beside the target and rename, so an interrupted build never leaves a half-written model.
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".tiny-build-") as scratch:
        built = build(Path(scratch) / "model")
        os.replace(built, target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=TINY_DIR, help="directory to write (default: %(default)s)")
    parser.add_argument("--scale", choices=list(SCALES), default="full")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = build(args.out, args.scale, args.seed)
    info = json.loads((out / "build_info.json").read_text(encoding="utf-8"))
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
