"""A run that goes wrong says so, at the step it happens: a loss or gradient norm that is not finite, or a policy that
collapsed (from a healthy first step, most replies failing the format for several logged steps in a row).

Either is a warning naming the step, what happened and the likely cause. A collapse is also logged as
``health/collapsed_at`` (every tracker plots it), said by the final summary and the adapter's card, and, with
``--stop_on_collapse`` (on by default; it acts only after a healthy start), stops the run: the checkpoints saved after
the last healthy step are set aside as ``collapsed-checkpoint-N`` (``--resume`` takes the last healthy one), and the
run ends with one line.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

FORMAT = "rewards/format_reward/mean"
HEALTHY = 0.5  # a step's share of well-formed replies (its format reward's mean) at or above this is healthy
PATIENCE = 3  # logged steps in a row below it make a collapse


class Health(TrainerCallback):
    """Watches every training log. ``collapsed_at``: the first step of the collapse, once there is one;
    ``last_healthy``: the last healthy logged step before it."""

    def __init__(self, learning_rate: float, stop_on_collapse: bool = True) -> None:
        self.learning_rate, self.stop_on_collapse = learning_rate, stop_on_collapse
        self.start: float | None = None  # the first logged step's format
        self.streak: list[int] = []  # the logged steps below HEALTHY since the last healthy one
        self.last_healthy = 0
        self.collapsed_at: int | None = None
        self.non_finite: list[str] = []  # what was said, once each

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs:
            return control
        step = state.global_step
        for name in ("loss", "grad_norm"):
            value = logs.get(name)
            if value is not None and not math.isfinite(value) and name not in self.non_finite:
                self.non_finite.append(name)
                logger.warning(
                    "step %d: the %s is %s; likely causes: the learning rate (%g) is too high, or fp16 overflowed "
                    "(bf16 or fp32 does not); the weights may be NaN from here on",
                    step,
                    name.replace("_", " "),
                    value,
                    self.learning_rate,
                )
        share = logs.get(FORMAT)
        if share is None or self.collapsed_at is not None:
            return control
        if self.start is None:
            self.start = share
        if share >= HEALTHY:
            self.streak, self.last_healthy = [], step
            return control
        self.streak.append(step)
        if self.start >= HEALTHY and len(self.streak) >= PATIENCE:
            self.collapsed_at = self.streak[0]
            logger.warning("%s", self.describe())
            if self.stop_on_collapse and state.is_world_process_zero:
                control.should_training_stop = True
                control.should_save = False  # the collapsed weights are no checkpoint to keep
            elif not self.stop_on_collapse:
                logger.warning("--stop_on_collapse false: training goes on")
        return control

    def describe(self) -> str:
        return (
            f"the policy collapsed at step {self.collapsed_at}: from a healthy start (format {self.start:.3f} at the "
            f"first step), most replies failed the format for {len(self.streak)} logged steps in a row (below "
            f"{HEALTHY}); likely cause: the learning rate ({self.learning_rate:g}) is too high for this model"
        )


def set_aside(out: Path, after: int) -> list[str]:
    """Rename the checkpoints saved after step ``after`` to ``collapsed-checkpoint-N``: ``--resume`` then goes on from
    the last healthy one, and nothing is deleted. Returns their new names."""
    moved = []
    for folder in sorted(out.glob("checkpoint-*")):
        step = folder.name.split("-")[-1]
        if step.isdigit() and int(step) > after:
            target = folder.with_name(f"collapsed-{folder.name}")
            folder.rename(target)
            moved.append(target.name)
    return moved
