"""Where the main job's wall time goes: ``python grpo_train.py --profile cpu``, run in this process (as
``python grpo_train.py`` runs it, by ``runpy``) with a timer around each of its parts.

    python benchmarks/bench_main_job.py                      # the main job itself (about 12 minutes)
    python benchmarks/bench_main_job.py -- --max_steps 200   # a shorter look; flags after -- go to grpo_train.py

The parts are the entry script's own sections (imports, tokenizer, model, rows, the evaluation before,
the trainer's construction, training, saving, the evaluation after, the adapter card), and inside
training TRL's: generation (``model.generate``), the reward functions, the rest of scoring the
completions (tokenising prompts, log-probabilities, advantages), the loss's forward pass, its
backward pass, the optimizer step, checkpoints, and the periodic game check when one is on. Each is
timed by wrapping the function that does it, so the shares add up to the wall time up to what no
wrapper covers (shown as "other"). Prints seconds, share and calls per part. Nothing here asserts
on time: run it alone, since a second busy core slows every part.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before the heavy imports, which are part of a user's wall time

import argparse
import contextlib
import functools
import runpy
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
from transformers import GenerationMixin
from trl import GRPOTrainer

from models import loading
from training import before_after, card, run
from training.rollout import GameCheck
from training.trainer import WordleGRPOTrainer

ENTRY = Path(__file__).resolve().parent.parent / "grpo_train.py"

IMPORTED = time.perf_counter()

SECONDS: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
_ACTIVE: list[str] = []  # the parts open now, outermost first: a nested part's time is its own


def _timed(label: str, func, within: str | None = None):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if within is not None and not (_ACTIVE and _ACTIVE[-1].startswith(within)):
            return func(*args, **kwargs)  # e.g. the evaluations' own generate calls: theirs
        start = time.perf_counter()
        _ACTIVE.append(label)
        try:
            return func(*args, **kwargs)
        finally:
            _ACTIVE.pop()
            spent = time.perf_counter() - start
            SECONDS[label] += spent
            CALLS[label] += 1
            if _ACTIVE:  # counted once: taken out of the part that encloses it
                SECONDS[_ACTIVE[-1]] -= spent

    return wrapper


def _wrap(owner, name: str, label: str, within: str | None = None) -> None:
    setattr(owner, name, _timed(label, getattr(owner, name), within))


# (owner, attribute, label[, timed only within the part whose label starts so]), outermost first; a
# part's time excludes the parts nested inside it.
# Wrapped where they are defined, before the entry script imports them.
PARTS = [
    (loading, "load_tokenizer", "tokenizer"),
    (loading, "load_model", "model"),
    (run, "dataset", "training rows"),
    (before_after, "evaluate_start", "evaluation before (the model's games, baselines)"),
    (WordleGRPOTrainer, "__init__", "trainer construction"),
    (run, "fit", "training: the rest (dataloader, logging, scheduler)"),
    (run, "save", "saving the adapter"),
    (before_after, "evaluate_end", "evaluation after (the model's games, plots)"),
    (card, "write_model_card", "adapter card"),
    (GRPOTrainer, "_generate_and_score_completions", "training: scoring (prompts, log-probs, advantages)"),
    (GenerationMixin, "generate", "training: generation", "training: scoring"),
    (GRPOTrainer, "_calculate_rewards", "training: rewards"),
    (GRPOTrainer, "compute_loss", "training: loss forward"),
    (torch.Tensor, "backward", "training: loss backward", "training: the rest"),
    (torch.optim.AdamW, "step", "training: optimizer step", "training: the rest"),
    (GRPOTrainer, "_save_checkpoint", "training: checkpoints"),
    (GameCheck, "__call__", "training: periodic game check"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--output_dir", help="where the run writes (default: a temporary directory)")
    cut = sys.argv.index("--") if "--" in sys.argv else len(sys.argv)
    args, rest = parser.parse_args(sys.argv[1:cut]), sys.argv[cut + 1 :]
    for part in PARTS:
        _wrap(*part)
    with contextlib.ExitStack() as stack:
        out = args.output_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="main-job-"))
        argv = ["--profile", "cpu", "--output_dir", out, *rest]
        sys.argv = [str(ENTRY), *argv]
        try:
            runpy.run_path(str(ENTRY), run_name="__main__")
            code = 0
        except SystemExit as exit_:
            code = exit_.code or 0
    total = time.perf_counter() - STARTED
    rows = [("python start and imports", IMPORTED - STARTED, 1), *((k, v, CALLS[k]) for k, v in SECONDS.items())]
    rows.append(("other", total - sum(v for _, v, _ in rows), 0))
    print(f"\npython grpo_train.py {' '.join(argv)}: {total:.1f} s wall ({total / 60:.1f} min), exit {code}")
    print(f"{'part':<58} {'seconds':>9} {'share':>7} {'calls':>7}")
    for label, seconds, calls in rows:
        print(f"{label:<58} {seconds:>9.1f} {seconds / total:>7.1%} {calls:>7}")
    return code


if __name__ == "__main__":
    sys.exit(main())
