"""During a run: the rollback advice, logged once when steps slow down or memory fills up.

The estimate before a run is ``models.memory``; this is what a run that outgrew it says.
"""

from __future__ import annotations

import logging
import time

from transformers import TrainerCallback

from models.memory import GIB
from runtime.device import memory_in_use, memory_limit
from settings.config import Resolved

logger = logging.getLogger(__name__)


class RollbackAdvisor(TrainerCallback):
    """Watches step time and memory, and logs the rollback once when a run falls into seed 002's trap.

    A step that takes ``slow_factor`` times the median of the first ``baseline_steps`` steps (after
    the first, which compiles and fills caches), or memory past ``memory_fraction`` of the device's,
    means swapping is near or here (seed 002: 226 s/iteration on MPS). The advice follows the seed's
    order, starting at the first rung the run has not taken: ``--max-completion 96``, then fewer
    generations, then a smaller batch, each with ``--resume``.
    """

    def __init__(
        self,
        *,
        max_completion_length: int,
        num_generations: int,
        per_device_train_batch_size: int,
        gradient_accumulation_steps: int,
        output_dir: str,
        limit_bytes: int | None,
        memory_bytes=None,
        clock=time.monotonic,
        baseline_steps: int = 5,
        slow_factor: float = 3.0,
        memory_fraction: float = 0.9,
    ) -> None:
        self.completion = max_completion_length
        self.generations = num_generations
        self.batch = per_device_train_batch_size
        self.accumulation = gradient_accumulation_steps
        self.output_dir = output_dir
        self.limit = limit_bytes
        self.memory_bytes = memory_bytes or (lambda: None)
        self.clock = clock
        self.baseline_steps = baseline_steps
        self.slow_factor = slow_factor
        self.memory_fraction = memory_fraction
        self.times: list[float] = []
        self.started: float | None = None
        self.advice: str | None = None  # what was logged, once

    @classmethod
    def for_run(cls, resolved: Resolved) -> RollbackAdvisor:
        t = resolved.training
        limit = memory_limit(resolved.script.device)
        supervised = not resolved.stage.generates  # a smaller micro-batch is its one rung
        return cls(
            max_completion_length=0 if supervised else t.max_completion_length,
            num_generations=0 if supervised else t.num_generations,
            per_device_train_batch_size=t.per_device_train_batch_size,
            gradient_accumulation_steps=t.gradient_accumulation_steps,
            output_dir=t.output_dir,
            limit_bytes=limit[0] if limit else None,
            memory_bytes=lambda: memory_in_use(resolved.script.device),
        )

    def rungs(self) -> list[str]:
        """The seed's rollback order, from the first rung this run has not already taken."""
        out = []
        if self.completion > 96:
            out.append("--max-completion 96")
        if self.generations > 2:
            out.append(f"--num_generations {max(2, self.generations // 2)}")
        if self.batch > 1:  # the same completions per step, in smaller micro-batches
            out.append(
                f"--per_device_train_batch_size {self.batch // 2} --gradient_accumulation_steps {self.accumulation * 2}"
            )
        return out

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        if self.started is None or self.advice is not None:
            return
        seconds = self.clock() - self.started
        self.times.append(seconds)
        reason = None
        baseline = sorted(self.times[1 : 1 + self.baseline_steps])
        if len(self.times) > 1 + self.baseline_steps:
            median = baseline[len(baseline) // 2]
            if seconds > self.slow_factor * median:
                reason = f"step {state.global_step} took {seconds:.0f} s, {seconds / median:.1f}x the first steps' {median:.1f} s"
        used = self.memory_bytes()
        if reason is None and used is not None and self.limit and used > self.memory_fraction * self.limit:
            reason = f"memory at {used / GIB:.1f} GiB of {self.limit / GIB:.1f} GiB"
        if reason is None:
            return
        rungs = self.rungs()
        if rungs:
            steps = "; then ".join(f"{r} --resume" for r in rungs)
            self.advice = f"{reason}: swapping or near the memory limit. Stop and roll back, in this order: {steps}"
        else:
            self.advice = f"{reason}: swapping or near the memory limit, and every rollback is already taken"
        logger.warning("%s (checkpoints in %s)", self.advice, self.output_dir)
