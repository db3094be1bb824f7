"""The embedded default model (``--model tiny``): built here, offline, and shipped in ``training/tiny_model``.

No machine of ours can reach a model hub, so the project makes its own small model:

- a **letter-level tokenizer**: every upper-case letter is its own token, so the model sees the
  letters inside words (a model with one token per word formats well but can never learn to
  play). The reply tags, the three feedback marks and the fixed prompt phrases are single
  tokens, so a prompt with five past guesses is 113 tokens;
- a **chat template** that drops the system message (constant rules text, a third of every
  prompt) and ends every turn with ``<|end|>``, the eos token;
- a **small Qwen2** (0.8M parameters) from config, so the trainer treats it exactly like a hub
  model, LoRA on ``q_proj``/``k_proj``/``v_proj``/``o_proj`` included;
- a **warm start** by supervised fine-tuning (TRL's ``SFTTrainer``, loss on the completion only)
  on the entropy solver's replies to game states of the training secrets only:
  ``<think>.R..E</think><guess>CRANE</guess>``, the think being the letters placed so far, so a
  reply is 15 tokens. Spelling drills (the solver's guesses, twelve to a reply) come first and
  stay mixed in: without them most of the model's guesses were non-words.

``python -m training.tiny --out training/tiny_model`` rebuilds the shipped artefact (about 6
minutes on 2 idle CPU cores; training stops early if a busy machine would push it past 9);
``--scale ci`` makes a throwaway one in seconds for tests.
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

from wordle import Solver, is_consistent, normalize_word, parse_completion, row_history
from wordle.feedback import cache_dir

logger = logging.getLogger(__name__)

TINY_DIR = Path(__file__).resolve().parent / "tiny_model"
# Bump when the recipe changes, so that a model cached by ensure_tiny() under an old recipe is rebuilt.
RECIPE_VERSION = 2
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
    """How big a build is. ``max_seconds`` only guards against a slow machine: training stops once
    the build has run that long (recorded in build_info.json); otherwise a build is deterministic
    in its seed."""

    train_rows: int  # game states (training.data.build_rows over the training secrets)
    spelling_steps: int  # phase 1: spelling drills alone
    steps: int  # phase 2: the game states' replies, with drills mixed in
    drill_fraction: float  # phase 2's drill rows per game row
    batch_size: int
    learning_rate: float
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    eval_rows: int
    max_seconds: float


SCALES: dict[str, Scale] = {
    "full": Scale(
        train_rows=2000,
        spelling_steps=300,
        steps=1800,
        drill_fraction=0.5,
        batch_size=32,
        learning_rate=3e-3,
        hidden_size=128,
        intermediate_size=384,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        eval_rows=200,
        max_seconds=480.0,
    ),
    "ci": Scale(
        train_rows=32,
        spelling_steps=2,
        steps=4,
        drill_fraction=0.5,
        batch_size=8,
        learning_rate=3e-3,
        hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        eval_rows=8,
        max_seconds=60.0,
    ),
}

# Words per spelling drill: a drill row costs about as much compute as a game row.
DRILL_WORDS = 12


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


def distill_rows(rows: Sequence[dict[str, Any]], solver: Solver) -> list[dict[str, Any]]:
    """Prompt-completion conversational rows: each game state with the solver's reply to it."""
    out = []
    for i, row in enumerate(rows):
        history = row_history(i, row["past_guess_history"])
        reply = reply_text(history, solver.next_guess(history))
        out.append({"prompt": row["prompt"], "completion": [{"role": "assistant", "content": reply}]})
    return out


def drill_rows(words: Sequence[str], n_rows: int, rng: random.Random) -> list[dict[str, Any]]:
    """Spelling drills: a user turn with no text, answered by ``DRILL_WORDS`` guesses in a row
    (``<guess>CLINT</guess><guess>SOARE</guess>…``), drawn with replacement from ``words``.

    Letter-level spelling is what a model this small fails at: trained on the game states alone,
    most of its guesses on held-out states were non-words mixing the letters of several solver
    guesses (format_reward 0.68-0.79 greedy, about 0.6 sampled, over eight probes). Drilling the
    solver's own guesses, frequent ones most, first alone and then mixed in, raised it to 0.981
    greedy and 0.918 sampled (the shipped build), and the model still picks among 100+ different words.
    """
    return [
        {
            "prompt": [{"role": "user", "content": ""}],
            "completion": [
                {
                    "role": "assistant",
                    "content": "".join(f"<guess>{w}</guess>" for w in rng.choices(words, k=DRILL_WORDS)),
                }
            ],
        }
        for _ in range(n_rows)
    ]


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
    # The whole distribution at temperature 1, as GRPO samples it (GenerationConfig's default top_k is 50).
    sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
    replies: list[str] = []
    for start in range(0, len(prompts), batch_size):
        texts = tokenizer.apply_chat_template(
            list(prompts[start : start + batch_size]), add_generation_prompt=True, tokenize=False
        )
        # Left padding, so that every row's prompt ends where generation starts.
        batch = tokenizer(texts, padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt")
        output = model.generate(**batch, **sampling)  # max_new_tokens: the model's generation_config
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
    guesses = [normalize_word(parse_completion(r)) for r in replies]
    n = len(rows)
    return {
        "format_reward": sum(format_reward(replies)) / n,
        "format_reward_sampled": sum(format_reward(sampled)) / n,
        "solver_agreement": sum(g == solver.next_guess(h) for g, h in zip(guesses, histories)) / n,
        "consistent": sum(g is not None and is_consistent(g, h) for g, h in zip(guesses, histories)) / n,
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


def _train(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    rows: list[dict[str, Any]],
    steps: int,
    spec: Scale,
    seed: int,
    clock: _WallClock,
    scratch: str,
) -> tuple[int, float]:
    """``steps`` steps of TRL's SFT on prompt-completion rows, loss on the completion only; returns
    the steps taken and the mean training loss."""
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(
        output_dir=scratch,
        max_steps=steps,
        per_device_train_batch_size=spec.batch_size,
        learning_rate=spec.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=min(100, steps // 10),
        weight_decay=0.01,
        max_length=tokenizer.model_max_length,
        completion_only_loss=True,
        activation_checkpointing=False,  # TRL's default is on; nothing to save at this size
        train_sampling_strategy="group_by_length",  # prompts run from 8 to 113 tokens: batch like with like
        bf16=False,
        fp16=False,
        use_cpu=True,
        seed=seed,
        data_seed=seed,
        save_strategy="no",
        report_to="none",
        logging_steps=max(1, steps // 10),
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    dataset = datasets.Dataset.from_list(rows)
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer, callbacks=[clock])
    result = trainer.train()
    return trainer.state.global_step, result.training_loss


def build(out_dir: str | Path, scale: str = "full", seed: int = 0) -> Path:
    """Build the tiny model into ``out_dir`` (tokenizer, model, generation config, build_info.json).

    Every training row comes from game states of ``training.data.train_secrets()``; the scores in
    build_info.json are measured on game states of the held-out ``eval_secrets()``.
    """
    from training.data import build_rows, eval_secrets, train_secrets

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

    game = distill_rows(build_rows(spec.train_rows, seed, train_secrets(), solver=solver), solver)
    guesses = [parse_completion(row["completion"]) for row in game]
    logger.info(
        "distilled the solver's replies to %d training states (%d different guesses) in %.0f s",
        len(game),
        len(set(guesses)),
        time.monotonic() - started,
    )
    drills = drill_rows(guesses, spec.spelling_steps * spec.batch_size, rng)
    mixed = game + drill_rows(guesses, round(len(game) * spec.drill_fraction), rng)

    clock = _WallClock(started + spec.max_seconds)
    with tempfile.TemporaryDirectory(prefix="tiny-sft-") as scratch:
        spelling_steps, spelling_loss = _train(
            model, tokenizer, drills, spec.spelling_steps, spec, seed, clock, scratch
        )
        logger.info("spelling phase: %d steps, mean loss %.3f", spelling_steps, spelling_loss)
        steps, loss = _train(model, tokenizer, mixed, spec.steps, spec, seed, clock, scratch)
        logger.info("game phase: %d steps, mean loss %.3f", steps, loss)
    if clock.stopped_early:
        logger.warning("training stopped early: the build's %.0f s budget ran out", spec.max_seconds)
    train_seconds = time.monotonic() - started

    eval_rows = build_rows(spec.eval_rows, seed, eval_secrets(), solver=solver)
    scores = evaluate(model, tokenizer, eval_rows, solver)
    logger.info("held-out play: %s", scores)

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
        "train_states": len(game),
        "solver_guesses": len(set(guesses)),
        "spelling_drills": len(drills),
        "mixed_drills": len(mixed) - len(game),
        "spelling_steps": spelling_steps,
        "steps": steps,
        "max_steps": [spec.spelling_steps, spec.steps],
        "stopped_early": clock.stopped_early,
        "mean_train_loss": [round(spelling_loss, 4), round(loss, 4)],
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
