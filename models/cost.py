"""Time before a run: ``sft_train.py --dry-run``'s ``expected_time``, from the supervised step's arithmetic and this
device's matrix-multiply rate, measured in a fraction of a second.

A step's arithmetic, per token of its rows: the decoder's weights twice forward and twice backward (the gradients of
the activations; a LoRA's own are small), twice more for the weights' own gradients in full fine-tuning, and twice
more where activation checkpointing runs the forward again; and the LM head six times over every position it scores
(each one on a CPU or MPS, the reply's alone with Triton). It is a lower bound: the step also waits on memory, on
small kernels and on the optimizer, which the measured factor below says for the one machine it was measured on.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from models.memory import (
    ASSUMED_PROMPT_TOKENS,
    Run,
    Shape,
    longest_prompt_tokens,
    run_settings,
)
from models.source import model_config
from runtime import device as devices
from runtime import distributed
from settings.config import Resolved
from settings.errors import ConfigError
from settings.summary import supervised_steps

# What real steps took over this bound on the 2-core development CPU (2026-12-07, benchmarks/bench_sft_step.py, four
# rows a micro-batch): 2.4x for a 108M stand-in (512 wide, 6.0 s a step), 12x for the tests' 10M one (64 wide, 3.2 s),
# whose products with Qwen's 151,936-way head are too narrow for a matmul's rate.
CPU_MEASURED = "a real step took 2.4x this bound for a 108M stand-in, 12x for a 10M one, on a 2-core CPU"


def step_flops(shape: Shape, run: Run, rows: int) -> float:
    """The arithmetic of one supervised step of ``rows`` rows (see the module docstring)."""
    tokens = rows * (run.prompt_tokens + run.completion_tokens)
    passes = 4 + (2 if run.lora_r is None else 0) + (2 if run.checkpointing else 0)
    scored = rows * run.completion_tokens if run.triton else tokens
    return passes * shape.linear_params() * tokens + 6 * shape.hidden * shape.vocab * scored


def matmul_rate(device: str, dtype: torch.dtype, seconds: float = 0.3) -> float:
    """FLOP/s of square matrix products on ``device`` in ``dtype``, measured for about ``seconds``."""
    target = "cuda" if device == "rocm" else device
    n = 1024 if target == "cpu" else 4096
    a, b = (torch.randn(n, n, dtype=dtype, device=target) for _ in range(2))

    def sync() -> None:
        if target in ("cuda", "mps"):
            getattr(torch, target).synchronize()

    a @ b  # warm up: kernels chosen, memory placed
    sync()
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b
        count += 1
        sync()
    return 2 * n**3 * count / (time.perf_counter() - started)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def expected_time(resolved: Resolved, source: str, tokenizer: Any = None, known: dict | None = None) -> dict[str, Any]:
    """The stage's steps and how long they take at least here (see the module docstring); where the device is absent,
    says so: a rate measured on another machine would say nothing."""
    device = resolved.script.device
    steps = supervised_steps(resolved)
    if not devices.has_device(device):
        return {"steps": steps, "unknown": f"{device} is absent here: run --dry-run on the machine that trains"}
    try:
        shape = Shape.from_config(known if known is not None else model_config(source, resolved.model.model_revision))
    except (ConfigError, KeyError, ValueError) as err:
        return {"steps": steps, "unknown": str(err)}
    prompt = ASSUMED_PROMPT_TOKENS if tokenizer is None else longest_prompt_tokens(tokenizer)
    run = run_settings(resolved, prompt)
    t = resolved.training
    rows = t.per_device_train_batch_size * t.gradient_accumulation_steps  # per process: they run side by side
    dtype = torch.float32 if resolved.model.dtype in (None, "auto", "float32") else getattr(torch, resolved.model.dtype)
    rate, flops = matmul_rate(device, dtype), step_flops(shape, run, rows)
    bound = flops / rate
    out = {
        "steps": steps,
        "at_least_per_step": f"{bound:.1f} s",
        "at_least": _hours(bound * steps),
        "assumes": f"the step's arithmetic ({flops:.2g} FLOP: {rows} rows of {prompt} + "
        f"{run.completion_tokens} tokens) at this {device}'s {dtype} matrix-product rate, measured now "
        f"({rate / 1e12:.2f} TFLOP/s); processes: {distributed.processes_record(t)['processes']}",
    }
    if device == "cpu":
        out["measured"] = CPU_MEASURED
    return out
