"""One command for a GPU check: a few steps of the cuda profile on a 3B stand-in, three ways, as one table.

    python benchmarks/bench_gpu.py                           # on an NVIDIA GPU: Qwen2.5-3B's shape, --profile cuda
    python benchmarks/bench_gpu.py --steps 5 --out gpu.md
    python benchmarks/bench_gpu.py --profile cpu --shape 64 2 128 4 2 --steps 2 -- --max_completion_length 16

No download: the model is ``tinymodel.stand_in``'s, Qwen's real tokenizer beside random weights of ``--shape``
(default Qwen2.5-3B-Instruct's), drawn on the GPU. Random weights never end a reply, so every reply runs to
``max_completion_length``: the worst case. Each way is ``grpo_train.py --profile P --model STAND-IN --rollout turn
--max_steps N --skip_eval true`` in its own process:

- ``4-bit HF``: 4-bit NF4 QLoRA, generation with transformers' ``generate`` (the cuda profile as it ships);
- ``4-bit HF, merged copy``: the same, generating from a bf16 copy with the LoRA merged in (``--merged_generation``);
- ``unquantized HF``: ``--load_in_4bit false`` (bf16 LoRA under the cuda profile);
- ``vLLM colocated``: ``--config configs/vllm/colocate.yaml --load_in_4bit false``, where vLLM is installed.

For each it prints (and writes to ``--out`` as Markdown) the seconds per step and where they went (the trainer's
``time/generation``, ``time/scoring`` and ``time/update``, means over the steps after the first, which warms up),
generated tokens per second of generation, the peak memory the run logged against the dry run's estimate, and the
GPU's utilisation (nvidia-smi, every 0.5 s while the run held GPU memory). A way that fails is a row with its
error line. Nothing here asserts on time: the table is the result.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import torch
import yaml

from tinymodel.stand_in import QWEN_3B, QwenShape, build_qwen_dir

ROOT = Path(__file__).resolve().parent.parent
WAYS = {
    "4-bit HF": ["--load_in_4bit", "true"],
    "4-bit HF, merged copy": ["--load_in_4bit", "true", "--merged_generation", "true"],
    "unquantized HF": ["--load_in_4bit", "false"],
    "vLLM colocated": ["--config", "configs/vllm/colocate.yaml", "--load_in_4bit", "false"],
}


class Utilisation:
    """nvidia-smi's GPU utilisation every 0.5 s, kept while the GPU holds more than ``held_mib`` beyond what it
    held at the start (the run's model is loaded); empty where there is no nvidia-smi."""

    def __init__(self, held_mib: int = 512) -> None:
        self.samples: list[int] = []
        self.held_mib = held_mib
        self._process: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        if shutil.which("nvidia-smi"):
            query = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
            self._process = subprocess.Popen([*query, "-lms", "500"], stdout=subprocess.PIPE, text=True)
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()
        return self

    def _read(self) -> None:
        baseline = None
        for line in self._process.stdout:
            try:
                busy, used = (int(x) for x in line.split(",")[:2])  # the first GPU's
            except ValueError:
                continue
            baseline = used if baseline is None else baseline
            if used - baseline > self.held_mib:
                self.samples.append(busy)

    def __exit__(self, *exc) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait()

    def mean(self) -> str:
        return f"{statistics.mean(self.samples):.0f}%" if self.samples else "n/a"


@dataclass
class Row:
    way: str
    precision: str = ""
    steps: list[dict] | None = None  # the logs of the steps after the first
    first_step_s: float = 0.0
    completions: int = 0  # per step
    peak_mib: float = 0.0
    estimate_gib: float = 0.0
    busy: str = "n/a"
    error: str = ""

    def markdown(self) -> str:
        if self.error:
            return "| " + " | ".join([self.way, self.precision, self.error, *[""] * 7]) + " |"
        mean = {
            k: statistics.mean(s[k] for s in self.steps) for k in ("time/generation", "time/scoring", "time/update")
        }
        step = sum(mean.values())
        tokens = statistics.mean(s["completions/mean_length"] for s in self.steps) * self.completions
        return (
            f"| {self.way} | {self.precision} | {step:.2f} | {mean['time/generation']:.2f} | "
            f"{mean['time/scoring']:.2f} | {mean['time/update']:.2f} | {self.first_step_s:.1f} | "
            f"{tokens / mean['time/generation']:.0f} | {self.peak_mib / 1024:.2f} / {self.estimate_gib:.2f} | "
            f"{self.busy} |"
        )


HEADER = (
    "| way | precision | s/step | generation | scoring | update | first step (s) | generated tokens/s "
    "| peak / estimate (GiB) | GPU busy |\n|---|---|---|---|---|---|---|---|---|---|"
)


def run_way(way: str, model: Path, work: Path, opts) -> Row:
    out = work / way.replace(" ", "-")
    args = [sys.executable, str(ROOT / "grpo_train.py"), "--profile", opts.profile, "--model", str(model)]
    args += ["--rollout", "turn", "--max_steps", str(opts.steps), "--save_steps", str(opts.steps), "--logging_steps"]
    args += ["1", "--skip_eval", "true", "--report_to", "none", "--output_dir", str(out), *WAYS[way], *opts.extra]
    row = Row(way)
    dry = subprocess.run([*args, "--dry-run"], check=False, capture_output=True, text=True, cwd=ROOT)
    if dry.returncode:
        row.error = (dry.stderr.strip().splitlines() or ["the dry run failed"])[-1]
        return row
    plan = yaml.safe_load(dry.stdout)
    quantized = plan["quantization"]
    row.precision = plan["precision"]
    if isinstance(quantized, dict):
        nested = " + double quantisation" if quantized["double_quant"] else ""
        row.precision += f", {quantized['bits']}-bit {quantized['type']}{nested}"
    row.completions = plan["rollout"]["completions_per_step"]
    row.estimate_gib = plan["memory_estimate"].get("peak_gib", float("nan"))
    with Utilisation() as busy:
        done = subprocess.run(args, check=False, capture_output=True, text=True, cwd=ROOT)
    row.busy = busy.mean()
    if done.returncode:
        row.error = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return row
    history = json.loads((out / f"checkpoint-{opts.steps}" / "trainer_state.json").read_text())["log_history"]
    logs = [h for h in history if "time/generation" in h]
    first, rest = logs[0], logs[1:] or logs[:1]
    row.first_step_s = sum(first[f"time/{p}"] for p in ("generation", "scoring", "update"))
    row.steps = rest
    row.peak_mib = max(h["peak_memory_mb"] for h in logs)
    return row


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cuda")
    parser.add_argument("--shape", type=int, nargs=5, default=list(QWEN_3B), metavar="N", help="H L I HEADS KV")
    parser.add_argument("--steps", type=int, default=3, help="steps per way; the first warms up and is shown apart")
    parser.add_argument("--ways", nargs="+", choices=list(WAYS), default=list(WAYS))
    parser.add_argument("--out", default="bench_gpu.md", help="where the Markdown table goes")
    parser.add_argument("extra", nargs="*", help="grpo_train.py flags for every way, after --")
    opts = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        built = time.perf_counter()
        model = build_qwen_dir(Path(tmp) / "model", QwenShape(*opts.shape), device=device)
        built = time.perf_counter() - built
        rows = []
        for way in opts.ways:
            if way == "vLLM colocated" and importlib.util.find_spec("vllm") is None:
                rows.append(Row(way, error="vLLM is not installed here (pip install -e '.[vllm]')"))
                continue
            rows.append(run_way(way, model, Path(tmp), opts))
            print(rows[-1].markdown(), file=sys.stderr, flush=True)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU (CPU)"
    heading = (
        f"{gpu}; torch {torch.__version__}; --profile {opts.profile}, Qwen stand-in {tuple(opts.shape)} (drawn on "
        f"{device} in {built:.0f} s), {opts.steps} steps a way, extra flags: {' '.join(opts.extra) or 'none'}; "
        f"{time.perf_counter() - started:.0f} s in all"
    )
    table = "\n".join([heading, "", HEADER, *(row.markdown() for row in rows)])
    Path(opts.out).write_text(table + "\n")
    print(table)
    return table


if __name__ == "__main__":
    main()
