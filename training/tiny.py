"""The embedded default model (``--model tiny``): built here, offline, and shipped in ``training/tiny_model``.

No machine of ours can reach a model hub, so the project makes its own small model:

- a **letter-level tokenizer**: every upper-case letter is its own token, so the model sees the
  letters inside words (a model with one token per word formats well but can never learn to
  play). The reply tags, the three feedback marks and the fixed prompt phrases are single
  tokens, so a prompt with five past guesses stays near 110 tokens;
- a **chat template** that drops the system message (constant rules text, a third of every
  prompt) and ends every turn with ``<|end|>``, the eos token;
- a **small Qwen2** (about 0.8M parameters) from config, so the trainer treats it exactly like a
  hub model, LoRA on ``q_proj``/``k_proj``/``v_proj``/``o_proj`` included;
- a **warm start** by supervised fine-tuning (TRL's ``SFTTrainer``) on replies distilled from the
  entropy solver over the training secrets only. The ``<think>`` holds a compact summary of the
  letters known so far (``.R..E +A -SOIT``: placed letters, letters elsewhere, absent letters),
  which the history determines, so replies stay short (about 25 tokens).

``python -m training.tiny --out training/tiny_model`` rebuilds the shipped artefact (about 7
minutes on 2 CPU cores); ``--scale ci`` makes a throwaway one in seconds for tests.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    TrainerCallback,
)

from wordle import Solver, is_consistent, parse_completion, row_history
from wordle.feedback import cache_dir

logger = logging.getLogger(__name__)

TINY_DIR = Path(__file__).resolve().parent / "tiny_model"
# Bump when the recipe changes, so that a model cached by ensure_tiny() under an old recipe is rebuilt.
RECIPE_VERSION = 1
# The files that make a loadable model directory; ensure_tiny() trusts a directory holding all of them.
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")

UNK, PAD, EOS, USER, ASSISTANT = "<|unk|>", "<|pad|>", "<|end|>", "<|user|>", "<|assistant|>"
SPECIAL_TOKENS = (UNK, PAD, EOS, USER, ASSISTANT)
# Multi-character pieces that are one token each: the reply tags, the feedback marks and the fixed
# phrases of wordle.prompts.render_user_message. Anything else is spelled a character at a time,
# so a changed prompt still round-trips, only longer (a test pins the prompt lengths).
PIECES = (
    "<think>",
    "</think>",
    "<guess>",
    "</guess>",
    "(✓)",
    "(~)",
    "(-)",
    "Guess ",
    " of ",
    ". Your guesses so far:",
    ". No guesses yet.",
    ": ",
)
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
    """How big a build is. ``max_seconds`` only guards against a slow machine: a build that
    reaches it stops training early (recorded in build_info.json), otherwise builds are
    deterministic in the seed."""

    train_rows: int
    eval_rows: int
    max_steps: int
    batch_size: int
    learning_rate: float
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    max_seconds: float
    spelling_steps: int = 0  # a first phase on bare <guess>WORD</guess> runs, so the model learns to spell words


SCALES: dict[str, Scale] = {
    "full": Scale(
        train_rows=4000,
        eval_rows=200,
        max_steps=1300,
        spelling_steps=600,
        batch_size=32,
        learning_rate=3e-3,
        hidden_size=128,
        intermediate_size=384,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        max_seconds=540.0,
    ),
    "ci": Scale(
        train_rows=48,
        eval_rows=8,
        max_steps=4,
        batch_size=8,
        learning_rate=3e-3,
        hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        max_seconds=60.0,
    ),
}


# --- tokenizer ------------------------------------------------------------------------------------


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The letter-level tokenizer, with the chat template and eos/pad/unk set.

    A word-level model over a fixed vocabulary: the pre-tokenizer cuts text into the longest piece
    of ``PIECES`` or else one character, and the decoder joins tokens back without separators, so
    every string of vocabulary characters decodes to itself. Other characters become ``<|unk|>``.
    """
    vocab = {token: i for i, token in enumerate((*SPECIAL_TOKENS, *PIECES, *CHARACTERS))}
    pieces = "|".join(re.escape(p) for p in sorted(PIECES, key=len, reverse=True))
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(f"{pieces}|[\\s\\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
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


# --- distilled replies ----------------------------------------------------------------------------


def think_text(history: Sequence[tuple[str, str]]) -> str:
    """What the history says about the letters: ``".R..E +A -SOIT"``.

    Five characters for the placed letters ('.' where none is known), then ``+`` and the letters
    known to be elsewhere (marked ~ and not placed), then ``-`` and the letters known absent
    (only ever marked -), each in order of first appearance; an empty group is left out.
    """
    placed = ["."] * 5
    elsewhere: list[str] = []
    marked_in: set[str] = set()
    greys: list[str] = []
    for guess, pattern in history:
        for i, (letter, mark) in enumerate(zip(guess, pattern.upper())):
            if mark == "G":
                placed[i] = letter
                marked_in.add(letter)
            elif mark == "Y":
                marked_in.add(letter)
                if letter not in elsewhere:
                    elsewhere.append(letter)
            elif letter not in greys:
                greys.append(letter)
    parts = ["".join(placed)]
    yellows = "".join(c for c in elsewhere if c not in placed)
    absent = "".join(c for c in greys if c not in marked_in)
    if yellows:
        parts.append("+" + yellows)
    if absent:
        parts.append("-" + absent)
    return " ".join(parts)


def reply_text(history: Sequence[tuple[str, str]], guess: str) -> str:
    return f"<think>{think_text(history)}</think><guess>{guess}</guess>"


def distill_rows(rows: Sequence[dict[str, Any]], solver: Solver) -> datasets.Dataset:
    """Prompt-completion conversational rows: each game state with the solver's reply to it."""
    out = []
    for i, row in enumerate(rows):
        history = row_history(i, row["past_guess_history"])
        reply = reply_text(history, solver.next_guess(history))
        out.append({"prompt": row["prompt"], "completion": [{"role": "assistant", "content": reply}]})
    return datasets.Dataset.from_list(out)


# --- evaluation -----------------------------------------------------------------------------------


@torch.no_grad()
def generate_replies(
    model: PreTrainedModel,
    tokenizer: Any,
    prompts: Sequence[list[dict[str, str]]],
    sample: bool = False,
    batch_size: int = 64,
) -> list[str]:
    """Replies to chat prompts, greedy or sampled at temperature 1 as GRPO samples them, decoded as
    the GRPO trainer decodes them (special tokens dropped). Sampling draws from torch's global RNG."""
    model.eval()
    replies: list[str] = []
    for start in range(0, len(prompts), batch_size):
        texts = tokenizer.apply_chat_template(
            list(prompts[start : start + batch_size]), add_generation_prompt=True, tokenize=False
        )
        # Left padding, so that every row's prompt ends where generation starts.
        batch = tokenizer(texts, padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt")
        output = model.generate(**batch, do_sample=sample, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=48)
        new_tokens = output[:, batch["input_ids"].shape[1] :]
        replies.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    return replies


def evaluate(
    model: PreTrainedModel, tokenizer: Any, rows: Sequence[dict[str, Any]], solver: Solver
) -> dict[str, float]:
    """Greedy play on game states: the mean format_reward, and how often the guess is the solver's,
    is consistent with the history, and how often the think is exactly :func:`think_text`; and
    the mean format_reward of replies sampled at temperature 1, as GRPO's rollouts are."""
    from rewards import format_reward  # the reward is the evaluation

    prompts = [row["prompt"] for row in rows]
    replies = generate_replies(model, tokenizer, prompts)
    torch.manual_seed(0)
    sampled = generate_replies(model, tokenizer, prompts, sample=True)
    histories = [row_history(i, row["past_guess_history"]) for i, row in enumerate(rows)]
    guesses = [parse_completion(r) for r in replies]
    n = len(rows)
    return {
        "format_reward": sum(format_reward(replies)) / n,
        "format_reward_sampled": sum(format_reward(sampled)) / n,
        "solver_agreement": sum(g == solver.next_guess(h) for g, h in zip(guesses, histories)) / n,
        "consistent": sum(
            g is not None and g.isalpha() and len(g) == 5 and is_consistent(g, h) for g, h in zip(guesses, histories)
        )
        / n,
        "think_exact": sum(r.startswith(f"<think>{think_text(h)}</think>") for r, h in zip(replies, histories)) / n,
        "rows": n,
    }


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


def build(out_dir: str | Path, scale: str = "full", seed: int = 0) -> Path:
    """Build the tiny model into ``out_dir`` (tokenizer, model, generation config, build_info.json).

    The training states come from ``training.data.train_secrets()`` only; the format score in
    build_info.json is measured on states from the held-out ``eval_secrets()``.
    """
    from trl import SFTConfig, SFTTrainer

    from training.data import build_rows, eval_secrets, train_secrets

    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    spec = SCALES[scale]
    out_dir = Path(out_dir)
    started = time.monotonic()
    solver = Solver()

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, spec, seed)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("tiny model (%s scale): %d parameters, vocabulary %d", scale, n_params, len(tokenizer))

    train = distill_rows(build_rows(spec.train_rows, seed, train_secrets(), solver=solver), solver)
    logger.info("distilled %d distinct training states in %.0f s", len(train), time.monotonic() - started)

    # Letter-level spelling is the hard part for a model this small: most non-words in its replies are
    # near-misses of real ones. A first phase on runs of the solver's guesses alone teaches the
    # lexicon (format_reward 0.68 -> 0.89 on held-out states in the probes).
    words = sorted({c[0]["content"].split("<guess>")[1][:5] for c in train["completion"]})
    rng = random.Random(seed)
    spelling = datasets.Dataset.from_list(
        [
            {"text": "".join(f"<guess>{w}</guess>" for w in rng.sample(words, min(12, len(words))))}
            for _ in range(spec.spelling_steps * spec.batch_size)
        ]
    )

    with tempfile.TemporaryDirectory(prefix="tiny-sft-") as scratch:
        if spec.spelling_steps:
            SFTTrainer(
                model=model,
                args=SFTConfig(
                    output_dir=scratch,
                    max_steps=spec.spelling_steps,
                    per_device_train_batch_size=spec.batch_size,
                    learning_rate=spec.learning_rate,
                    lr_scheduler_type="cosine",
                    warmup_steps=min(100, spec.spelling_steps // 10),
                    weight_decay=0.01,
                    activation_checkpointing=False,
                    bf16=False,
                    fp16=False,
                    use_cpu=True,
                    seed=seed,
                    save_strategy="no",
                    report_to="none",
                    disable_tqdm=True,
                    dataloader_num_workers=0,
                    logging_steps=max(1, spec.spelling_steps // 10),
                ),
                train_dataset=spelling,
                processing_class=tokenizer,
            ).train()
            logger.info("spelling phase: %d steps over %d words", spec.spelling_steps, len(words))
        config = SFTConfig(
            output_dir=scratch,
            max_steps=spec.max_steps,
            per_device_train_batch_size=spec.batch_size,
            learning_rate=spec.learning_rate,
            lr_scheduler_type="cosine",
            warmup_steps=min(100, spec.max_steps // 10),
            weight_decay=0.01,
            max_length=tokenizer.model_max_length,
            completion_only_loss=True,
            activation_checkpointing=False,  # TRL's default is on; nothing to save at this size
            train_sampling_strategy="group_by_length",  # prompts run from 8 to ~110 tokens: batch like with like
            bf16=False,
            fp16=False,
            use_cpu=True,
            seed=seed,
            data_seed=seed,
            save_strategy="no",
            report_to="none",
            logging_steps=max(1, spec.max_steps // 20),
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        clock = _WallClock(started + spec.max_seconds)
        trainer = SFTTrainer(
            model=model, args=config, train_dataset=train, processing_class=tokenizer, callbacks=[clock]
        )
        result = trainer.train()
        steps = trainer.state.global_step
    if clock.stopped_early:
        logger.warning(
            "training stopped at step %d of %d: the %.0f s budget ran out", steps, spec.max_steps, spec.max_seconds
        )
    train_seconds = time.monotonic() - started

    eval_rows = build_rows(spec.eval_rows, seed, eval_secrets(), solver=solver)
    scores = evaluate(model, tokenizer, eval_rows, solver)
    logger.info("held-out greedy play: %s", scores)

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
        "train_rows": spec.train_rows,
        "train_states": len(train),
        "spelling_steps": spec.spelling_steps,
        "steps": steps,
        "max_steps": spec.max_steps,
        "stopped_early": clock.stopped_early,
        "final_train_loss": round(result.training_loss, 4),
        "eval_secrets": "training.data.eval_secrets()",
        "eval": {k: round(v, 4) if isinstance(v, float) else v for k, v in scores.items()},
        "train_seconds": round(train_seconds, 1),
        "build_seconds": round(time.monotonic() - started, 1),
        "torch": torch.__version__,
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
    logger.warning("%s is missing its model files; building the tiny model into %s (a few minutes)", TINY_DIR, target)
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
