"""Preemption: SIGTERM (a cluster taking the machine back) or SIGINT (Ctrl-C) while GRPO trains.

The handler only asks: the step under way finishes, a checkpoint is saved, every process stops at the same
step, and the run ends with one line that gives the ``--resume`` command. So a save in progress is never cut
short. A second signal acts at once, as if no handler were there (what a kill -9 tears, ``--resume`` skips).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

from transformers import TrainerCallback

from runtime import distributed

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopOnSignal(TrainerCallback):
    """A callback that stops training at the end of the step in which a signal came. ``signal``: the one received."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self._previous: dict[int, object] = {}

    def listen(self) -> None:
        """Hold SIGTERM and SIGINT until :meth:`restore` (in the main thread: Python takes signals there alone)."""
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._ask) for s in SIGNALS}

    def _ask(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signal.Signals(signum)
        self.restore()

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def on_step_end(self, args, state, control, **kwargs):
        # A collective: a launcher signals every process, not always in the same step.
        asked = int(distributed.max_over_processes(0 if self.signal is None else int(self.signal)))
        if asked:
            self.signal = signal.Signals(asked)
            control.should_save = True
            control.should_training_stop = True
        return control
