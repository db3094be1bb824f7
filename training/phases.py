"""Where a run is, for the one line that a signal outside training's steps ends it with (``runtime.preemption``): the
phase, what is on disk (nothing yet, the newest whole checkpoint, or the saved adapter) and the one command that
continues. Where nothing was trained the command is the same one again: the run left no lock and no checkpoint.
"""

from __future__ import annotations

import shlex
import signal
from pathlib import Path

from settings.config import SFT, Resolved
from training.output import newest_checkpoint


class Phases:
    """The entry script sets ``now`` as it goes, and ``saved`` once the adapter is whole in the output directory."""

    def __init__(self, resolved: Resolved, out: Path) -> None:
        self.resolved, self.out = resolved, out
        self.now = "loading the model"
        self.saved = False

    def _command(self, resume: bool) -> str:
        argv = list(self.resolved.argv)
        if resume and "--resume" not in argv:
            argv.append("--resume")
        return shlex.join(["python", self.resolved.stage.entry, *argv])

    def line(self, received: signal.Signals) -> str:
        where = f"{received.name} while {self.now}"
        if self.saved:
            if self.resolved.stage is SFT:
                return f"{where}: the adapter is saved in {self.out}; next: python grpo_train.py --adapter {self.out}"
            play = shlex.join(["python", "evaluate.py", "--adapter", str(self.out), "--out", str(self.out / "eval")])
            return f"{where}: the adapter is saved in {self.out}; to play the games after training: {play}"
        newest = newest_checkpoint(self.out) if self.out.is_dir() else None
        if newest is None:
            return f"{where}: nothing trained yet, nothing saved; to start again: {self._command(resume=False)}"
        return (
            f"{where}: {newest[0].name} in {self.out} is the newest whole checkpoint; to continue: "
            f"{self._command(resume=True)}"
        )
