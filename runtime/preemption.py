"""Preemption: SIGTERM (a cluster taking the machine back) or SIGINT (Ctrl-C), in every phase of a run.

While the model trains, the handler only asks (:class:`StopOnSignal`): the step under way finishes, a checkpoint is
saved, every process stops at the same step, and the run ends with one line that gives the ``--resume`` command. So
a save in progress is never cut short. Outside the steps (the model loading, the games before and after) a signal
ends the run at once with one line that says what is on disk and the command that continues (:func:`interruptible`);
a save defers it until the files are whole (:func:`deferred`). A second signal acts at once (what a kill -9 tears,
``--resume`` skips).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


class Interrupted(Exception):
    """A signal outside training's steps (loading, the games, saving): the run ends with one line, ``line``, and the
    exit code a shell expects for the signal."""

    def __init__(self, received: signal.Signals, line: str) -> None:
        super().__init__(line)
        self.signal = received
        self.code = 128 + received


@contextmanager
def interruptible(describe: Callable[[signal.Signals], str]) -> Iterator[None]:
    """Until the block ends, SIGTERM and SIGINT raise :class:`Interrupted` with ``describe(signal)``: what is on disk
    and the command that continues, said at the moment the signal came. Training's own handler (:class:`StopOnSignal`)
    takes over during the steps and hands back to this one after its first signal, so a second acts at once."""

    def stop(signum: int, frame: FrameType | None) -> None:
        received = signal.Signals(signum)
        raise Interrupted(received, describe(received))

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, stop) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def deferred() -> Iterator[list[signal.Signals]]:
    """A block that a first signal does not cut short (a save: a file half-written is worse than a late stop): the
    signal is kept in the list the block gets, for the caller to act on once it is done. A second acts at once."""
    received: list[signal.Signals] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    outer = {s: signal.getsignal(s) for s in SIGNALS}

    def keep(signum: int, frame: FrameType | None) -> None:
        received.append(signal.Signals(signum))
        for s, handler in outer.items():
            signal.signal(s, handler)

    for s in SIGNALS:
        signal.signal(s, keep)
    try:
        yield received
    finally:
        for s, handler in outer.items():
            signal.signal(s, handler)
