"""The supervised stage's step against a bare TRL SFTTrainer on the same rows, model and settings.

    python benchmarks/bench_sft_step.py                         # the stand-in of the tests, 2 x 64 wide
    python benchmarks/bench_sft_step.py --shape 256 4 1024 4 2 --batch 4

The project's trainer is ``training.sft.make_sft_trainer`` with the callbacks ``sft_train.py`` adds (the rollback
advisor, portable checkpoints, the process record); the bare one is ``SFTTrainer(model, args, train_dataset,
processing_class, peft_config)``. Each way trains ``--steps`` + 1 steps on a fresh copy of the model, in turns
(bare, project, bare, project, ...: ``--rounds``), and its optimizer steps are timed by a callback; the first step of
a run (caches, allocations) is left out. Prints the median seconds per step of each and their ratio. Asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import datasets
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import SFTTrainer, get_peft_config

from runtime import distributed
from settings.config import SFT, resolve
from tinymodel.stand_in import SMALL_QWEN, QwenShape, build_qwen_dir
from training.card import PortableCheckpoints
from training.rollback import RollbackAdvisor
from training.sft import make_sft_trainer
from training.sft_data import Budget, build_sft_rows


class Clock(TrainerCallback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self.started = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self.started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", nargs=5, type=int, default=list(SMALL_QWEN), metavar=("H", "L", "I", "HEADS", "KV"))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    a = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_qwen_dir(Path(tmp) / "model", QwenShape(*a.shape))
        argv = ["--profile", "cpu", "--model", str(model_dir), "--max_steps", str(a.steps + 1), "--save_steps", "1000"]
        argv += ["--per_device_train_batch_size", str(a.batch), "--gradient_accumulation_steps", "1"]
        argv += ["--output_dir", str(Path(tmp) / "out"), "--disable_tqdm", "true", "--report_to", "none"]
        resolved = resolve(argv, stage=SFT)
        distributed.setup(resolved.training)
        tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
        rows, _ = build_sft_rows(a.batch * (a.steps + 1), 0, tokenizer, Budget(resolved.reply_budget))
        data = datasets.Dataset.from_list(rows)

        def bare(model):
            return SFTTrainer(
                model=model,
                args=resolved.training,
                train_dataset=data,
                processing_class=tokenizer,
                peft_config=get_peft_config(resolved.model),
            )

        def project(model):
            callbacks = [
                distributed.RecordProcesses(),
                PortableCheckpoints(str(model_dir)),
                RollbackAdvisor.for_run(resolved),
            ]
            return make_sft_trainer(resolved, model, tokenizer, data, callbacks)

        times: dict[str, list[float]] = {"bare SFTTrainer": [], "sft_train.py's trainer": []}
        for _ in range(a.rounds):
            for name, make in zip(times, (bare, project), strict=True):
                trainer = make(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))
                clock = Clock()
                trainer.add_callback(clock)
                trainer.train()
                times[name] += clock.times[1:]
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"Qwen2 stand-in {'x'.join(map(str, a.shape))}, micro-batch {a.batch}, {a.rounds} x {a.steps} steps each\n")
    print("| trainer | s/step (median) |\n|---|---|")
    for name, median in medians.items():
        print(f"| {name} | {median:.3f} |")
    ratio = medians["sft_train.py's trainer"] / medians["bare SFTTrainer"]
    print(f"\nratio: {ratio:.3f}")


if __name__ == "__main__":
    main()
