"""The trainer's generation against plain ``model.generate`` with a KV cache: same batch, prompts, reply length
and precision. The issue's bar: at most 1.3x.

    python benchmarks/bench_generate.py                          # CPU: a 4-layer, 256-wide Qwen stand-in, fp32
    python benchmarks/bench_generate.py --dtype bfloat16
    python benchmarks/bench_generate.py --4bit                   # bitsandbytes NF4 (on CPU too)
    python benchmarks/bench_generate.py --shape 2048 36 11008 16 2 --batch 16 --tokens 256   # a 3B's shape (GPU)

The model is ``tinymodel.stand_in``'s: Qwen's real tokenizer and full 151,936-token vocabulary beside random
weights of ``--shape`` (hidden, layers, intermediate, heads, kv_heads), built offline. Every reply is held at
exactly ``--tokens`` tokens (``min_new_tokens``), so each way decodes the same number of steps. The prompts
are training rows' game states, rendered by the trainer's own chat template.

Ways, each timed ``--repeats`` times after one warm-up call (the median is printed):

- ``generate``: the base model, eval mode, ``model.generate`` with the trainer's sampling settings: the bar;
- ``generate, LoRA``: the PEFT model as the trainer holds it (unmerged LoRA on every projection), eval mode;
- ``TRL turn mode``: ``GRPOTrainer._generate_single_turn``, TRL's own HF path (``--rollout turn``), in train
  mode as during a step;
- ``game mode``: ``PolicyPlayer._generate``, a game turn's HF path (``--rollout game``), in train mode;
- the last two again with ``--merged_generation`` (``training.merged``): from a copy with the LoRA merged in, in
  the compute dtype (bf16 beside 4-bit weights). Its refresh, once per optimizer step, is timed apart.

For each: seconds per call, tokens per second, ms per decoding step, the ratio against ``generate``, and the
tokens each forward call after the first took (1.0: the KV cache is on) and the logits processors it built.
Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

import datasets
import torch
from trl import get_peft_config

from models.loading import load_model, load_tokenizer
from rewards import get_reward_funcs
from settings.config import resolve
from tinymodel.stand_in import QwenShape, build_qwen_dir
from training.data import build_rows
from training.merged import MergedCopy
from training.rollout import PolicyPlayer
from training.trainer import WordleGRPOTrainer

BAR = 1.3  # the issue's: the trainer's generation at most 1.3x plain generate


class Forwards:
    """Counts the forward calls of a model's decoder, and the tokens each took (a hook on each of ``modules``)."""

    def __init__(self, *modules: torch.nn.Module) -> None:
        self.widths: list[int] = []
        for module in modules:
            module.register_forward_pre_hook(self._seen, with_kwargs=True)

    def _seen(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        self.widths.append(int((ids if ids is not None else embeds).shape[1]))

    def after_first(self, since: int) -> float:
        """The mean tokens per forward call after the first of those since ``since``."""
        later = self.widths[since + 1 :]
        return statistics.mean(later) if later else float("nan")


def spy_processors(*models) -> list[str]:
    """The names of the logits processors (and warpers) the last generate call of any of ``models`` built."""
    seen: list[str] = []

    def spy(model) -> None:
        build = model._get_logits_processor

        def spied(*args, **kwargs):
            processors = build(*args, **kwargs)
            seen[:] = [
                type(p).__name__.removesuffix("LogitsProcessor").removesuffix("LogitsWarper") for p in processors
            ]
            return processors

        model._get_logits_processor = spied

    for model in models:
        spy(model)
    return seen


def timed(call, repeats: int, forwards: Forwards) -> tuple[float, float]:
    """The median seconds of ``call()`` over ``repeats`` (after one warm-up), and its tokens per forward."""
    call()
    seconds = []
    for _ in range(repeats):
        since = len(forwards.widths)
        start = time.perf_counter()
        call()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), forwards.after_first(since)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", type=int, nargs=5, default=[256, 4, 1024, 4, 2], metavar="N")
    parser.add_argument("--batch", type=int, default=8, help="replies per call")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per reply, exactly")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--4bit", dest="four_bit", action="store_true", help="load the base in 4-bit NF4")
    parser.add_argument("--profile", default=None, help="default: cuda where a GPU is, else cpu")
    parser.add_argument("--model", default=None, help="an existing model directory instead of a built stand-in")
    parser.add_argument("overrides", nargs="*", help="grpo_train.py flags, after --")
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    profile = opts.profile or ("cuda" if torch.cuda.is_available() else "cpu")

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = opts.model or str(build_qwen_dir(Path(tmp) / "model", QwenShape(*opts.shape)))
        argv = ["--profile", profile, "--model", model_dir, "--rollout", "turn", "--output_dir", f"{tmp}/out"]
        argv += ["--per_device_train_batch_size", str(opts.batch), "--num_generations", str(opts.batch)]
        argv += ["--max_completion_length", str(opts.tokens), "--dtype", opts.dtype]
        argv += ["--load_in_4bit", str(opts.four_bit).lower(), "--bf16", str(opts.dtype == "bfloat16").lower()]
        argv += ["--report_to", "none", "--disable_tqdm", "true", *opts.overrides]
        resolved = resolve(argv)
        args = resolved.training
        args.generation_kwargs = {**(args.generation_kwargs or {}), "min_new_tokens": opts.tokens}
        tokenizer = load_tokenizer(model_dir, resolved)
        model = load_model(model_dir, resolved)  # as grpo_train loads it: dtype, 4-bit, device
        rows = build_rows(opts.batch, seed=0)
        trainer = WordleGRPOTrainer(
            model=model,
            reward_funcs=get_reward_funcs(resolved.script.rewards),
            args=args,
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=get_peft_config(resolved.model),
        )
        prompt_ids = trainer._tokenize_prompts([row["prompt"] for row in rows])[0]
        device = trainer.accelerator.device
        width = max(map(len, prompt_ids))
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompt_ids], device=device)
        starts = torch.tensor([width - len(p) for p in prompt_ids], device=device)
        mask = (torch.arange(width, device=device) >= starts[:, None]).long()
        peft_model = trainer.model
        if args.activation_checkpointing:  # as Trainer.train switches it on, before the first step
            peft_model.activation_checkpointing_enable(
                activation_checkpointing_kwargs=args.activation_checkpointing_kwargs
            )
        base = peft_model.get_base_model()
        merged = MergedCopy(peft_model, peft_model.get_input_embeddings().weight.dtype)
        start = time.perf_counter()
        merged.refresh()
        refresh_ms = 1000 * (time.perf_counter() - start)
        forwards = Forwards(base.model, merged.model.model)
        processors = spy_processors(base, merged.model)
        config = trainer.generation_config

        def plain(model):
            def call():
                model.eval()
                with torch.no_grad():
                    model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)

            return call

        def turn_mode():
            peft_model.train()
            trainer._generate_single_turn(prompt_ids, None, {}, 1)

        player = PolicyPlayer(trainer)

        def game_mode():
            peft_model.train()
            player._generate(prompt_ids)

        checkpointing = base.is_gradient_checkpointing
        ways = {}  # name -> (median seconds, tokens per forward after the first, the call's logits processors)
        with peft_model.disable_adapter():
            ways["generate"] = (*timed(plain(peft_model), opts.repeats, forwards), list(processors))
        ways["generate, LoRA"] = (*timed(plain(peft_model), opts.repeats, forwards), list(processors))
        ways["TRL turn mode"] = (*timed(turn_mode, opts.repeats, forwards), list(processors))
        ways["game mode"] = (*timed(game_mode, opts.repeats, forwards), list(processors))
        trainer.merged = merged  # as --merged_generation sets it
        ways["TRL turn mode, merged copy"] = (*timed(turn_mode, opts.repeats, forwards), list(processors))
        ways["game mode, merged copy"] = (*timed(game_mode, opts.repeats, forwards), list(processors))

    precision = "4-bit NF4" if opts.four_bit else opts.dtype
    print(
        f"{profile} ({device}), Qwen stand-in {tuple(opts.shape)}, {precision}, {opts.batch} replies x "
        f"{opts.tokens} tokens, prompts {min(map(len, prompt_ids))}-{width} tokens, activation checkpointing "
        f"{'on' if checkpointing else 'off'}, median of {opts.repeats}"
    )
    bar = ways["generate"][0]
    print(
        "\n| way | s/call | tokens/s | ms/decoding step | x generate | tokens per forward after the first "
        "| logits processors and warpers |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, (seconds, per_forward, built) in ways.items():
        print(
            f"| {name} | {seconds:.3f} | {opts.batch * opts.tokens / seconds:.0f} | {1000 * seconds / opts.tokens:.1f} "
            f"| {seconds / bar:.2f} | {per_forward:.2f} | {', '.join(built) or 'none'} |"
        )
    print(f"\nthe merged copy's refresh, once per optimizer step: {refresh_ms:.1f} ms")
    print(f"bar: the trainer's generation at most {BAR}x generate")


if __name__ == "__main__":
    main()
