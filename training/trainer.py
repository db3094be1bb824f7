"""TRL's GRPOTrainer with the run visible: step time and peak memory in every log, and a compact progress line.

Only logging is added; generation, loss and optimisation are TRL's own (``benchmarks/bench_step.py``
measures the difference against a bare GRPOTrainer).
"""

from __future__ import annotations

import time

from transformers import ProgressCallback, TrainerCallback
from trl import GRPOTrainer

from training.device import peak_memory_mb


class _StepClock(TrainerCallback):
    """Wall time of each optimizer step (generation, rewards, loss and update)."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.durations.append(time.perf_counter() - self._start)


class WordleGRPOTrainer(GRPOTrainer):
    """Adds ``step_time_s`` (mean over the steps since the last log) and ``peak_memory_mb`` to training logs,
    so that they reach the log history, the progress line and every ``report_to`` tracker alike."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._clock = _StepClock()
        self.add_callback(self._clock)
        self.remove_callback(ProgressCallback)
        if not self.args.disable_tqdm:
            self.add_callback(RunProgress())

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._clock.durations:
            logs["step_time_s"] = sum(self._clock.durations) / len(self._clock.durations)
            self._clock.durations.clear()
            logs["peak_memory_mb"], _ = peak_memory_mb()
        super().log(logs, start_time)


def format_log(logs: dict[str, float], step: int, max_steps: int) -> str | None:
    """One line per training log: the total reward, each reward by name, then length, time and memory."""
    if "reward" not in logs:
        return None
    parts = [f"step {step}/{max_steps}", f"reward {logs['reward']:.3f} ± {logs.get('reward_std', 0.0):.3f}"]
    rewards = [
        f"{key[len('rewards/') : -len('_reward/mean')]} {value:.3f}"
        for key, value in logs.items()
        if key.startswith("rewards/") and key.endswith("/mean") and value is not None
    ]
    parts.append(" ".join(rewards))
    if "completions/mean_length" in logs:
        parts.append(
            f"len {logs['completions/mean_length']:.1f} clipped {logs.get('completions/clipped_ratio', 0):.2f}"
        )
    if "step_time_s" in logs:
        parts.append(f"{logs['step_time_s']:.2f} s/step")
    if "peak_memory_mb" in logs:
        parts.append(f"peak {logs['peak_memory_mb']:.0f} MB {peak_memory_mb()[1]}")
    return " | ".join(parts)


class RunProgress(ProgressCallback):
    """transformers' progress bar, with each log written as one readable line instead of a raw dict."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or self.training_bar is None or logs is None:
            return
        line = format_log(logs, state.global_step, state.max_steps)
        if line is None:  # the end-of-training summary: keep transformers' own rendering
            super().on_log(args, state, control, logs=logs, **kwargs)
        else:
            self.training_bar.write(line)
