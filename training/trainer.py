"""TRL's GRPOTrainer with the run visible: step time and peak memory in every log, and a compact progress line.

Only logging is added; generation, loss and optimisation are TRL's own (``benchmarks/bench_step.py``
measures the difference against a bare GRPOTrainer).
"""

from __future__ import annotations

from transformers import ProgressCallback
from trl import GRPOTrainer

from training.device import memory_source, peak_memory_mb


class WordleGRPOTrainer(GRPOTrainer):
    """Adds ``peak_memory_mb`` to training logs, so that it reaches the log history, the progress line
    and every ``report_to`` tracker alike (TRL already logs ``step_time``, rewards, lengths and clipping)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.remove_callback(ProgressCallback)
        if not self.args.disable_tqdm:
            self.add_callback(RunProgress())

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            logs["peak_memory_mb"] = peak_memory_mb()
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
    if "step_time" in logs:  # TRL's: generation, rewards, loss and backward, without the optimizer update
        parts.append(f"{logs['step_time']:.2f} s/step")
    if "peak_memory_mb" in logs:
        parts.append(f"peak {logs['peak_memory_mb']:.0f} MB {memory_source()}")
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
