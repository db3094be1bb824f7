"""Building the embedded model: a small Qwen2, the wired guess bag and past-guess heads, supervised training, a
held-out score; saved as a Llama (the heads make its attention wider than its hidden size).

``python -m tinymodel`` (or :func:`build`) rebuilds the shipped model in ``tinymodel/model`` (20 to 30
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
import random
import shlex
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from evaluation.run import evaluate_model, select_secrets
from tinymodel import MODEL_DIR
from tinymodel.bag import add_past_guess_heads, as_llama, fit_guess_bag, point_past_guesses, wire_guess_bag
from tinymodel.data import encode, game_rows
from tinymodel.sft import WallClock, train
from tinymodel.tokenizer import WORDS, build_tokenizer, past_guess_ids, prompt_only_ids, save_tokenizer
from wordle import Solver, train_secrets

logger = logging.getLogger(__name__)

# Recorded in build_info.json: bump when the recipe changes.
# 6: recipe 5's training, and a generation config that suppresses prompt-only tokens.
# 7: the guess bag fitted on 4x the states at 3x the rate (its top answer still possible in 87% of
#    two-guess validation states instead of 63%: benchmarks/probe_guess_bag.py, docs/research-log.md e34).
# 8: (not shipped) practice histories that repeat a guess; docs/research-log.md e40.
# 9: recipe 7 and a past-guess token beside the spelled letters (tinymodel.tokenizer.PAST_GUESSES), its row
#    minus its answer's (centred), set at the wiring and again after SFT (tinymodel.bag.point_past_guesses):
#    validation repeats 18.8% -> 9.8%, and game-mode GRPO lifts it to 77% (docs/research-log.md, e44-e47).
#    ``--no_past_guesses`` still builds recipe 7, byte for byte; ``--past_guess_copies 2`` writes the token
#    twice (not shipped: validation repeats 3.3% after GRPO, but 68.3% won; e51).
# 10: recipe 9 and heads of their own in layer 0 that average the past-guess tokens alone
#    (tinymodel.bag.add_past_guess_heads), set before SFT so that SFT trains with them, and SFT stopped after
#    672 of its 900 steps; saved as a Llama, whose head width vLLM honours. Validation after the main job's
#    GRPO: 82.2% won, 17.9% inconsistent, 5.3% repeats (recipe 9: 75.7%, 21.0%, 7.2%; docs/research-log.md,
#    e55, e56, e58). ``--past_guess_heads 0`` builds recipe 9.
# 11: (not shipped) recipe 10 and the think's letters tagged with their column (docs/research-log.md, e58).
# 12: recipe 10's build, saved with a tokenizer that drops a past guess's spelled letters at play (SFT still reads
#    them; tinymodel.tokenizer.UNSPELLED). Validation after the main job's GRPO: 84.2% won, 17.2% inconsistent,
#    2.0% repeats (docs/research-log.md, e64). ``--spelled`` builds recipe 10.
RECIPE_VERSION = 12
SPELLED_RECIPE = 10
PAST_GUESS_RECIPE = 9
PLAIN_RECIPE = 7
# The past-guess heads' output, times layer 0's: e55's graft on recipe 9 kept its wins at 0.01 and traded
# them for fewer repeats above it (validation, 202 games: 58.4% won at 0.01, 56.4% at 0.03).
PAST_GUESS_STRENGTH = 0.01


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
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    past_guess_heads: int  # added to every layer; in layer 0 they average the past-guess tokens alone
    past_guess_sft_steps: int  # with those heads, SFT stops after this many steps of its ``steps``-long schedule
    eval_games: int  # full games on held-out secrets after the build
    max_seconds: float


SCALES: dict[str, Scale] = {
    "full": Scale(
        steps=900,
        batch_size=64,
        learning_rate=1e-3,  # 5e-4 left the replies' format unlearnt after 300 steps
        bag_steps=1500,
        bag_batch_size=256,  # 64 at 1e-2 left it underfit: 63% of two-guess states answered consistently
        bag_learning_rate=3e-2,
        hidden_size=256,
        intermediate_size=768,
        num_layers=4,
        num_heads=8,
        num_kv_heads=8,  # the wiring copies values through: one key/value head per head
        past_guess_heads=8,  # the full width: 2 of the 8 taken from the mean did no better (e55)
        # Stopped with the rate at a fifth of its peak: two builds stopped near there by the clock started GRPO at
        # 62% and 67% on the validation secrets and ended it at 82% and 79%; a 700-step schedule run to its end
        # started at 50.5% (docs/research-log.md, e58). It also keeps the wider model within 30 minutes.
        past_guess_sft_steps=672,
        eval_games=300,
        max_seconds=1800.0,
    ),
    "ci": Scale(
        steps=6,
        batch_size=8,
        learning_rate=3e-3,
        bag_steps=20,
        bag_batch_size=8,
        bag_learning_rate=1e-2,
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
        suppress_tokens=prompt_only_ids(tokenizer),
    )
    return model


def build(
    out_dir: str | Path,
    scale: str = "full",
    seed: int = 0,
    past_guesses: int = 1,
    past_guess_heads: int | None = None,
    unspelled: bool | None = None,
) -> Path:
    """Build the tiny model into ``out_dir`` (tokenizer, model, generation config, build_info.json).

    Every training row comes from game states of ``wordle.train_secrets("sft")``; the scores in
    build_info.json are measured on game states of the held-out ``eval_secrets()``. ``past_guesses`` is how
    many past-guess tokens follow a past answer guess: 0 builds recipe 7 instead of the shipped recipe 12
    (byte for byte: research log, e47), 2 the variant of e51. ``past_guess_heads`` is how many heads of their
    own the past-guess tokens get (the scale's by default); 0 builds recipe 9. ``unspelled`` (the default with
    those heads) saves the tokenizer that drops a past guess's spelled letters, after an SFT that read them:
    recipe 12; False builds recipe 10.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    spec = SCALES[scale]
    if past_guess_heads is None:
        past_guess_heads = spec.past_guess_heads if past_guesses else 0
    if past_guess_heads and not past_guesses:
        raise ValueError(f"{past_guess_heads} past-guess heads need the past-guess tokens (past_guesses=0)")
    if unspelled is None:
        unspelled = bool(past_guess_heads)
    if unspelled and not past_guess_heads:
        raise ValueError("unspelled prompts are recipe 12, recipe 10's build: they need the past-guess heads")
    kernels = torch.backends.cpu.get_cpu_capability()
    if kernels.startswith("AVX512") and scale == "full":
        # Only `python -m tinymodel` pins the kernels (tinymodel.BUILD_KERNELS): here torch has loaded already.
        logger.warning(
            "%s kernels: the weights will differ from the shipped ones (python -m tinymodel pins AVX2)", kernels
        )
    out_dir = Path(out_dir)
    started = time.monotonic()
    solver = Solver()
    rng = random.Random(seed)

    tokenizer = build_tokenizer(past_guesses=past_guesses)
    model = build_model(tokenizer, spec, seed)
    logger.info("tiny model (%s scale): vocabulary %d", scale, len(tokenizer))

    # One pass over fresh rows: data is cheap here, compute is not.
    rows = game_rows(spec.steps * spec.batch_size, rng, solver, train_secrets("sft"))
    logger.info("built %d game states in %.0f s", len(rows), time.monotonic() - started)

    encoded = encode(tokenizer, rows)
    word_ids = tokenizer.convert_tokens_to_ids(list(WORDS))
    past_ids = past_guess_ids(tokenizer)
    wire_guess_bag(
        model,
        fit_guess_bag(encoded, tokenizer, spec.bag_steps, spec.bag_batch_size, spec.bag_learning_rate, seed),
        word_ids,
        encoded,
        past_ids,
    )
    if past_guess_heads:
        model = add_past_guess_heads(model, tokenizer, past_guess_heads, PAST_GUESS_STRENGTH)
    logger.info("guess bag fitted and wired into layer 0 in %.0f s", time.monotonic() - started)

    clock = WallClock(started + spec.max_seconds)
    with tempfile.TemporaryDirectory(prefix="tiny-sft-") as scratch:
        stop_after = spec.past_guess_sft_steps if past_guess_heads else spec.steps
        steps, loss = train(
            model, tokenizer, encoded, spec.steps, spec.batch_size, spec.learning_rate, seed, clock, scratch, stop_after
        )
    point_past_guesses(model, word_ids, past_ids)  # SFT moved the answers' vectors
    if past_guess_heads:
        model = as_llama(model)
    if unspelled:
        # Recipe 12: SFT read every past guess spelled, and the model plays without the spelling. Layer 0's guess
        # is a mean over the prompt, and dropping five tokens a past guess that the marked letters say again gives
        # each constraint a larger share than SFT ever saw. Validation, after the main job's GRPO (seeds 0, 1):
        # 84.2%, 85.1% won, 2.0%, 2.3% repeats (recipe 10: 82.2%, 76.7%; 5.3%, 7.1%); on a second build the repeats
        # halve too but wins do not rise; an SFT that read unspelled prompts too ended at 71.3%, 73.8%
        # (docs/research-log.md, e64). The vocabulary is the same.
        tokenizer = build_tokenizer(past_guesses=past_guesses, spelled=False)
    n_params = sum(p.numel() for p in model.parameters())  # the saved model's: the added heads, o's zero biases
    logger.info("trained %d steps, mean loss %.3f; %d parameters", steps, loss, n_params)
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
        "recipe_version": _recipe(past_guesses, past_guess_heads, unspelled),
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
        "eval_secrets": "wordle.eval_secrets()",
        "eval": {k: round(v, 4) if isinstance(v, float) else v for k, v in scores.items()},
        "train_seconds": round(train_seconds, 1),
        "build_seconds": round(time.monotonic() - started, 1),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_kernels": kernels,
        "command": "python -m tinymodel "
        + shlex.join(
            [
                f"--out={out_dir}",
                f"--scale={scale}",
                f"--seed={seed}",
                *_past_guess_flags(past_guesses),
                *_past_guess_heads_flags(past_guesses, past_guess_heads, spec),
                *(["--spelled"] if past_guess_heads and not unspelled else []),
            ]
        ),
    }
    (out_dir / "build_info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return out_dir


def _recipe(past_guesses: int, past_guess_heads: int, unspelled: bool) -> int:
    """The recipe number build_info.json records for these build options."""
    if past_guess_heads:
        return RECIPE_VERSION if unspelled else SPELLED_RECIPE
    return PAST_GUESS_RECIPE if past_guesses else PLAIN_RECIPE


def _past_guess_flags(past_guesses: int) -> list[str]:
    """The CLI flags that build ``past_guesses`` (none for the shipped one token)."""
    return {0: ["--no_past_guesses"], 1: []}.get(past_guesses, [f"--past_guess_copies={past_guesses}"])


def _past_guess_heads_flags(past_guesses: int, past_guess_heads: int, spec: Scale) -> list[str]:
    """The CLI flag that builds ``past_guess_heads`` (none for the scale's own, or without past-guess tokens)."""
    return (
        [f"--past_guess_heads={past_guess_heads}"] if past_guesses and past_guess_heads != spec.past_guess_heads else []
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=MODEL_DIR, help="directory to write (default: %(default)s)")
    parser.add_argument("--scale", choices=list(SCALES), default="full")
    parser.add_argument("--seed", type=int, default=0)
    # Not BooleanOptionalAction: its negative form is spelled --no-past_guesses, and build_info.json and the docs
    # name --no_past_guesses.
    past = parser.add_mutually_exclusive_group()
    past.add_argument(
        "--past_guesses",
        action="store_true",
        default=True,
        help="a token for each past answer guess (recipe 9, shipped; the default)",
    )
    past.add_argument("--no_past_guesses", dest="past_guesses", action="store_false", help="build recipe 7")
    parser.add_argument(
        "--past_guess_copies", type=int, default=1, help="how many past-guess tokens follow each past answer guess"
    )
    parser.add_argument(
        "--past_guess_heads",
        type=int,
        default=None,
        help="heads of their own for the past-guess tokens (default: the scale's; 0 builds recipe 9)",
    )
    parser.add_argument(
        "--spelled",
        dest="unspelled",
        action="store_false",
        default=None,
        help="play with a past guess's letters spelled, as SFT reads them (recipe 10; by default they are dropped: 12)",
    )
    args = parser.parse_args(argv)
    if args.past_guess_copies < 1:
        parser.error(
            f"--past_guess_copies must be at least 1, got {args.past_guess_copies} (--no_past_guesses for none)"
        )
    if not args.past_guesses and args.past_guess_copies != 1:
        parser.error(
            f"--past_guess_copies {args.past_guess_copies} needs the past-guess tokens: drop --no_past_guesses"
        )
    if args.past_guess_heads is not None and args.past_guess_heads < 0:
        parser.error(f"--past_guess_heads must be 0 or more, got {args.past_guess_heads}")
    if not args.past_guesses and args.past_guess_heads:
        parser.error(f"--past_guess_heads {args.past_guess_heads} needs the past-guess tokens: drop --no_past_guesses")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = build(
        args.out,
        args.scale,
        args.seed,
        args.past_guess_copies if args.past_guesses else 0,
        args.past_guess_heads,
        args.unspelled,
    )
    info = json.loads((out / "build_info.json").read_text(encoding="utf-8"))
    print(json.dumps(info, indent=2))
    return 0
