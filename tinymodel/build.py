"""Building the embedded model: a small Qwen2, the wired guess bag and past-guess heads, supervised training, a
validation score; saved as a Llama (the heads make its attention wider than its hidden size).

``python -m tinymodel`` (or :func:`build`) rebuilds the shipped model in ``tinymodel/model`` (17 to 27
minutes on one CPU core, by the machine's speed; training stops early if a busy machine would push it
past the scale's ``max_seconds``, and build_info.json says so); ``--scale ci`` makes a throwaway one in
seconds for tests. What was tried before this recipe, and what each try measured, is in
docs/embedded-model.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import platform
import random
import shlex
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from evaluation.run import evaluate_model, select_secrets
from tinymodel import MODEL_DIR
from tinymodel.bag import add_past_guess_heads, as_llama, fit_guess_bag, wire_guess_bag
from tinymodel.data import encode, game_rows
from tinymodel.mkl import OWN, cpu_fields, mkl_path
from tinymodel.sft import WallClock, slowed_optimizer, train
from tinymodel.tokenizer import TAGGED_LETTERS, WORDS, build_tokenizer, past_guess_ids, prompt_only_ids, save_tokenizer
from wordle import Solver, train_secrets

logger = logging.getLogger(__name__)

# The past-guess heads' output, times layer 0's: grafted onto an earlier build, 0.01 kept its wins and traded
# them for fewer repeats above it (validation, 202 games: 58.4% won at 0.01, 56.4% at 0.03).
PAST_GUESS_STRENGTH = 0.01
# What SFT moves at Scale.wired_rate, with the bag's embedding rows (answers, marked letters, past guesses): layer
# 0's values, output and norm, which compute the bag's mean. Its queries and keys (uniform attention to start with)
# learn at the full rate, as do the reply's own tokens and the later layers that write the format: slowed too, one
# build seed of two failed the format on every reply (research log, e74).
WIRED_LAYERS = (
    "model.layers.0.self_attn.v_proj.",
    "model.layers.0.self_attn.o_proj.",
    "model.layers.0.input_layernorm.",
)
# Recorded in build_info.json with the CPU and MKL's path: besides the code and the seed, what decides the bytes, so
# that a rebuild that differs is told apart by these (an AMD EPYC built other weights until MKL took its AVX2 path
# there: research log, e107, e108).
BUILD_LIBRARIES = ("torch", "transformers", "accelerate", "datasets", "tokenizers", "numpy")


def cpu_name() -> str:
    """The CPU's model name with its family and model numbers (Linux's /proc/cpuinfo: a cloud CPU's name is often
    only "AMD EPYC"), else what :mod:`platform` knows."""
    fields = cpu_fields()
    name = fields.get("model name") or platform.processor() or platform.machine()
    if fields.get("cpu family") and fields.get("model"):
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big a build is. ``max_seconds`` only guards against a slow machine: training stops once
    the build has run that long (recorded in build_info.json); otherwise a build is deterministic
    in its seed."""

    steps: int  # one pass over steps * batch_size fresh game states
    batch_size: int
    learning_rate: float
    bag_steps: int  # fitting the guess bag (see fit_guess_bag), batches of bag_batch_size states
    bag_batch_size: int
    bag_learning_rate: float
    constraint_weight: float  # the bag's fixed constraint rows (tinymodel.bag.constraint_rows), in logits a constraint
    wired_rate: float  # SFT moves the wired path (the bag's rows, layer 0's values and norm) at this share of the rate
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    past_guess_heads: int  # added to every layer; in layer 0 they average the past-guess tokens alone
    past_guess_sft_steps: int  # with those heads, SFT stops after this many steps of its ``steps``-long schedule
    eval_games: int  # full games on the validation secrets after the build (at most all 202 of them)
    max_seconds: float


SCALES: dict[str, Scale] = {
    "full": Scale(
        steps=900,
        batch_size=64,
        learning_rate=1e-3,  # 5e-4 left the replies' format unlearnt after 300 steps
        bag_steps=1500,
        bag_batch_size=256,  # 64 at 1e-2 left it underfit: 63% of two-guess states answered consistently
        bag_learning_rate=3e-2,
        # A ruled-out word first in 15% of four-guess validation states with learnt rows alone, none with these
        # (research log, e73); SFT kept what the bag reads only on the slowed path (e74). At 0.1 one build seed of two
        # failed the format on every reply; at 0.3, with an answer for the opener, 0.0-2.4% of replies at both (e75).
        constraint_weight=400.0,
        wired_rate=0.3,
        hidden_size=256,
        intermediate_size=768,
        num_layers=4,
        num_heads=8,
        num_kv_heads=8,  # the wiring copies values through: one key/value head per head
        past_guess_heads=8,  # the full width: 2 of the 8 taken from the mean did no better
        # Stopped with the rate at a fifth of its peak, where the start already reads the feedback from any opening.
        # Stopped sooner it is a weaker player that GRPO lifts but does not bring back: at step 450 (the rate at 0.59)
        # two builds started at 88% and 93% from their own opening on validation, and after 200 GRPO steps both
        # played worse in every setting than their own step-672 weights before any (research log, e106). It also
        # keeps the wider model within 30 minutes.
        past_guess_sft_steps=672,
        eval_games=300,
        max_seconds=2400.0,  # a guard against a slow or busy machine only: a build took 17 to 27 minutes (research log)
    ),
    "ci": Scale(
        steps=6,
        batch_size=8,
        learning_rate=3e-3,
        bag_steps=20,
        bag_batch_size=8,
        bag_learning_rate=1e-2,
        constraint_weight=400.0,
        wired_rate=0.3,
        hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=2,
        num_kv_heads=2,
        past_guess_heads=2,
        past_guess_sft_steps=4,
        eval_games=8,
        max_seconds=60.0,
    ),
}


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
        # Untied: tied, a think letter's output row is the row the later layers read the think by, so GRPO's steps
        # toward an answer lift the letters in its columns too, until one takes the guess; untied, none did in eight
        # GRPO runs (research log).
        tie_word_embeddings=False,
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
        suppress_tokens=prompt_only_ids(tokenizer),
    )
    return model


def build(out_dir: str | Path, scale: str = "full", seed: int = 0) -> Path:
    """Build the tiny model into ``out_dir`` (tokenizer, model, generation config, build_info.json).

    Every training row comes from game states of ``wordle.train_secrets("sft")``, from any opening
    (:func:`tinymodel.data.practice_history`), in the prompts play shows; the scores in build_info.json are
    measured on the validation secrets (``train_secrets("val")``), never on the held-out ones. ``seed``
    draws the initial weights, the rows and their order: builds at other seeds show how much of a result is
    the recipe's.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    spec = SCALES[scale]
    kernels, mkl = torch.backends.cpu.get_cpu_capability(), mkl_path()
    # Only `python -m tinymodel` pins the kernels (tinymodel.BUILD_KERNELS) and answers MKL's maker check
    # (tinymodel.mkl): called from Python, torch has loaded already.
    if kernels.startswith("AVX512") and scale == "full":
        logger.warning(
            "%s kernels: the weights will differ from the shipped ones (python -m tinymodel pins AVX2)", kernels
        )
    if mkl == OWN and scale == "full":
        logger.warning("MKL's own path on this CPU: the weights will differ from the shipped ones (see tinymodel.mkl)")
    out_dir = Path(out_dir)
    started = time.monotonic()
    solver = Solver()
    rng = random.Random(seed)

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, spec, seed)
    logger.info("tiny model (%s scale): vocabulary %d", scale, len(tokenizer))

    # One pass over fresh rows: data is cheap here, compute is not.
    rows = game_rows(spec.steps * spec.batch_size, rng, solver, train_secrets("sft"))
    logger.info("built %d game states in %.0f s", len(rows), time.monotonic() - started)

    encoded = encode(tokenizer, rows)
    word_ids = tokenizer.convert_tokens_to_ids(list(WORDS))
    bag = fit_guess_bag(
        encoded,
        tokenizer,
        spec.bag_steps,
        spec.bag_batch_size,
        spec.bag_learning_rate,
        seed,
        constraint_weight=spec.constraint_weight,
    )
    wire_guess_bag(model, bag, word_ids, encoded)
    model = add_past_guess_heads(model, tokenizer, spec.past_guess_heads, PAST_GUESS_STRENGTH)
    optimizer = slowed_optimizer(
        model,
        spec.learning_rate,
        WIRED_LAYERS,
        [*word_ids, *tokenizer.convert_tokens_to_ids(list(TAGGED_LETTERS)), *past_guess_ids(tokenizer)],
        spec.wired_rate,
    )
    logger.info("guess bag fitted and wired into layer 0 in %.0f s", time.monotonic() - started)

    clock = WallClock(started + spec.max_seconds)
    with tempfile.TemporaryDirectory(prefix="tiny-sft-") as scratch:
        steps, loss = train(
            model,
            tokenizer,
            encoded,
            spec.steps,
            spec.batch_size,
            spec.learning_rate,
            seed,
            clock,
            scratch,
            spec.past_guess_sft_steps,
            optimizer,
        )
    model = as_llama(model)
    n_params = sum(p.numel() for p in model.parameters())  # the saved model's: the added heads, o's zero biases
    logger.info("trained %d steps, mean loss %.3f; %d parameters", steps, loss, n_params)
    if clock.stopped_early:
        logger.warning("training stopped early: the build's %.0f s budget ran out", spec.max_seconds)
    train_seconds = time.monotonic() - started

    model.eval()
    (result,) = evaluate_model(model, tokenizer, select_secrets(spec.eval_games, split="val"))
    m = result.metrics
    scores = {"games": m["games"], "mean_guesses_won": m["mean_guesses_won"]["mean"]} | {
        key: m[key]["rate"] for key in ("win_rate", "format_failure_rate", "nonword_rate", "inconsistent_rate")
    }
    logger.info("validation games: %s", scores)

    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    save_tokenizer(tokenizer, out_dir)
    info = {
        "scale": scale,
        "seed": seed,
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "train_secrets": 'wordle.train_secrets("sft")',
        "train_states": len(rows),
        "steps": steps,
        "max_steps": spec.steps,
        "stopped_early": clock.stopped_early,
        "mean_train_loss": round(loss, 4),
        "eval_secrets": 'wordle.train_secrets("val")',
        "eval": {k: round(v, 4) if isinstance(v, float) else v for k, v in scores.items()},
        "train_seconds": round(train_seconds, 1),
        "build_seconds": round(time.monotonic() - started, 1),
        "libraries": {name: metadata.version(name) for name in BUILD_LIBRARIES},
        "cpu": cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "cpu_kernels": kernels,
        "mkl_path": mkl,
        "command": "python -m tinymodel " + shlex.join([f"--out={out_dir}", f"--scale={scale}", f"--seed={seed}"]),
    }
    (out_dir / "build_info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return out_dir


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tinymodel", description=" ".join(__doc__.split("\n\n", 1)[0].split())
    )
    parser.add_argument("--out", type=Path, default=MODEL_DIR, help="directory to write (default: %(default)s)")
    parser.add_argument(
        "--scale",
        choices=list(SCALES),
        default="full",
        help="full: the shipped model's size and steps; ci: a throwaway model in seconds, for tests (default: full)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="the build seed: initial weights, rows and their order (default: 0)"
    )
    args = parser.parse_args(argv)
    # One thread, as the shipped weights were built (build_info.json's torch_threads): a thread count splits
    # torch's sums differently, and 672 steps amplify float differences (as they do the kernels'). The model's
    # matrices are small enough that a second thread gains little.
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = build(args.out, args.scale, args.seed)
    info = json.loads((out / "build_info.json").read_text(encoding="utf-8"))
    print(json.dumps(info, indent=2))
    return 0
