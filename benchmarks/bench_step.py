"""GRPO step time of this trainer against a bare TRL ``GRPOTrainer``, and where a step's time goes.

    python benchmarks/bench_step.py                  # cpu profile, the embedded tiny model
    python benchmarks/bench_step.py --steps 20 --repeats 3 -- --num_generations 8

Both trainers get the identical model files, rows, GRPOConfig, rewards and seed, so they sample
the same completions. The runs alternate (bare, ours, bare, ours, ...) so that machine noise
falls on both; each run's first step (compilation, caches, the pattern matrix) is left out.
Prints the median seconds per step of each, their ratio (target <= 1.05), completions per second,
and how our step time splits: generation (``model.generate``), the reward functions (target
<= 2%), and the rest (the loss's forward and backward passes, the optimizer, bookkeeping).
Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import functools
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import datasets
from transformers import AutoModelForCausalLM, TrainerCallback
from trl import GRPOTrainer, get_peft_config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rewards import get_reward_funcs
from training.config import resolve
from training.data import build_rows
from training.modeling import load_tokenizer, model_source
from training.trainer import WordleGRPOTrainer


class StepTimes(TrainerCallback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def timed(func, spent: list[float]):
    """``func`` with its wall time added to ``spent``; the name (the metric key) is kept."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    return wrapper


def run_once(trainer_cls, argv: list[str], source, rows, out: Path) -> tuple[list[float], float, float]:
    """Step times (first step left out), and the seconds spent in the rewards and in generation."""
    resolved = resolve([*argv, "--output_dir", str(out), "--save_strategy", "no", "--skip_eval", "true"])
    spent: list[float] = []
    generating: list[float] = []
    clock = StepTimes()
    trainer = trainer_cls(
        model=AutoModelForCausalLM.from_pretrained(source, dtype=resolved.model.dtype),
        reward_funcs=[timed(f, spent) for f in get_reward_funcs(resolved.script.rewards)],
        args=resolved.training,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=load_tokenizer(source, resolved),
        peft_config=get_peft_config(resolved.model),
        callbacks=[clock],
    )
    # TRL generates through the (PEFT-wrapped) model's own generate(): time it on the instance.
    trainer.model.generate = timed(trainer.model.generate, generating)
    trainer.train()
    first = len(spent) // len(clock.times) if clock.times else 0  # calls per step; drop the first step's
    return clock.times[1:], sum(spent[first:]), sum(generating[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--steps", type=int, default=10, help="steps per run (the first is not counted)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each trainer, alternating")
    parser.add_argument("overrides", nargs="*", help="grpo_train.py flags, after --")
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    argv = ["--profile", opts.profile, "--max_steps", str(opts.steps), "--disable_tqdm", "true", *opts.overrides]
    resolved = resolve(argv)
    source = model_source(resolved.model.model_name_or_path)
    rows = build_rows(max(64, opts.steps * resolved.training.generation_batch_size), seed=resolved.training.seed)
    results: dict[str, list[float]] = {"bare TRL GRPOTrainer": [], "WordleGRPOTrainer": []}
    reward_share: list[float] = []
    generation_share: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(opts.repeats):
            for name, cls in (("bare TRL GRPOTrainer", GRPOTrainer), ("WordleGRPOTrainer", WordleGRPOTrainer)):
                times, reward_s, generate_s = run_once(cls, argv, source, rows, Path(tmp) / f"{i}-{cls.__name__}")
                results[name].extend(times)
                if cls is WordleGRPOTrainer:
                    reward_share.append(reward_s / sum(times))
                    generation_share.append(generate_s / sum(times))

    t = resolved.training
    print(
        f"profile {opts.profile}: {resolved.model.model_name_or_path}, {t.generation_batch_size} completions/step "
        f"({t.num_generations} per prompt), max_completion_length {t.max_completion_length}, "
        f"{opts.repeats} x {opts.steps - 1} counted steps each"
    )
    for name, times in results.items():
        print(
            f"  {name:22s} median {statistics.median(times):.3f} s/step  (min {min(times):.3f}, max {max(times):.3f})"
        )
    ratio = statistics.median(results["WordleGRPOTrainer"]) / statistics.median(results["bare TRL GRPOTrainer"])
    print(f"  ratio ours / bare: {ratio:.3f} (target <= 1.05)")
    ours = statistics.median(results["WordleGRPOTrainer"])
    print(f"  completions/s (ours): {t.generation_batch_size / ours:.1f}")
    generation, rewards = statistics.mean(generation_share), statistics.mean(reward_share)
    print(
        f"  where our step time goes: generation {100 * generation:.1f}%, rewards {100 * rewards:.2f}% (target <= 2%), "
        f"loss forward/backward + optimizer + the rest {100 * (1 - generation - rewards):.1f}%"
    )


if __name__ == "__main__":
    main()
