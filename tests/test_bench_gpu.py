"""benchmarks/bench_gpu.py's CPU run, on a small stand-in: every way trains for real and its row holds the figures."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_gpu"] = module  # its dataclass resolves its annotations through its module
    spec.loader.exec_module(module)
    return module


def cells(table: str, way: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(f"| {way} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_gpu_check_runs_on_the_cpu_and_every_figure_is_filled(tmp_path):
    bench = load_bench()
    out = tmp_path / "table.md"
    argv = ["--profile", "cpu", "--shape", "64", "2", "128", "4", "2", "--steps", "2", "--out", str(out), "--"]
    argv += ["--max_completion_length", "16", "--num_generations", "2", "--per_device_train_batch_size", "2"]
    table = bench.main(argv)
    assert out.read_text().strip() == table.strip()
    assert "no GPU (CPU)" in table and "Qwen stand-in (64, 2, 128, 4, 2)" in table
    ways = (("4-bit HF", "fp32, 4-bit nf4"), ("4-bit HF, merged copy", "fp32, 4-bit nf4"), ("unquantized HF", "fp32"))
    for way, precision in ways:
        _, shown, step, generation, scoring, update, first, tokens, memory, busy = cells(table, way)
        assert shown == precision
        # the split is the step: its parts add up to the s/step shown (each rounded to 0.01)
        assert abs(float(step) - (float(generation) + float(scoring) + float(update))) <= 0.02
        assert float(generation) > 0 and float(update) > 0 and float(first) > 0
        assert float(tokens) > 0
        peak, estimate = (float(x) for x in memory.split(" / "))
        assert peak > 0 and estimate > 0
        assert busy == "n/a"  # no nvidia-smi here
    vllm = cells(table, "vLLM colocated")
    if importlib.util.find_spec("vllm") is None:
        assert vllm[2] == "vLLM is not installed here (pip install -e '.[vllm]')"
    else:
        assert re.fullmatch(r"\d+\.\d\d", vllm[2]), vllm
