"""Several processes (``torchrun``, ``accelerate launch``): who writes, who logs, who plays which games.

Every process runs the same script. Only the main one writes files and logs INFO; the others wait
at a barrier where they would read what it wrote. Games are sharded: each process plays every
N-th secret and the main one gathers them, so N processes evaluate N times faster. One process is
rank 0 of 1, and then every helper here costs nothing.

The process group is transformers': :func:`setup` asks the training arguments for their device,
which starts it (gloo on CPU, NCCL on NVIDIA GPUs); accelerate's ``PartialState`` then shares it,
and so does DeepSpeed. How a launch is checked before
anything loads is ``settings.launch``.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from transformers import TrainerCallback, TrainingArguments

T = TypeVar("T")

LOCK_FILE = ".wordle_grpo.lock"
PROCESSES_FILE = "wordle_grpo_processes.json"  # in each checkpoint: how many processes trained it

logger = logging.getLogger(__name__)


def setup(args: TrainingArguments) -> PartialState:
    """Start the process group (if launched as several processes) and quiet every process but the main one."""
    _ = args.device  # transformers initialises the distributed state on first use
    if uses_deepspeed(args):
        _adopt_process_group()
    state = PartialState()
    if not state.is_main_process:
        logging.getLogger().setLevel(logging.WARNING)
    # Start level. A process that set up slower (DeepSpeed compiles or loads its CPU communication op
    # here, at its own pace in each process) would otherwise check the output directory's lock after
    # the main process, one setup() later, had taken it, and refuse its own run.
    state.wait_for_everyone()
    return state


def uses_deepspeed(args: TrainingArguments) -> bool:
    """``--deepspeed CONFIG``, or ``accelerate launch`` with a DeepSpeed config (which sets the plugin)."""
    return bool(args.deepspeed) or getattr(args, "deepspeed_plugin", None) is not None


def _adopt_process_group() -> None:
    """Hand DeepSpeed the process group transformers started.

    On CPU (``use_cpu``) transformers starts a plain gloo group and leaves DeepSpeed's own
    communication uninitialised until the Trainer prepares the model. ZeRO-3 partitions the model
    while it loads, before that, and DeepSpeed then takes this process for a world of one: the
    "train_batch_size 16 != 8 * 1 * 1" assertion. Adopting the group first gives it the real size.
    """
    import deepspeed  # an optional dependency (pip install ".[deepspeed]"), needed only here

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend=torch.distributed.get_backend(), verbose=False)


def is_main() -> bool:
    return PartialState().is_main_process


def barrier() -> None:
    PartialState().wait_for_everyone()


def shard(items: Sequence[T]) -> list[T]:
    """This process's share: every N-th item, starting at its rank."""
    state = PartialState()
    return list(items[state.process_index :: state.num_processes])


def unshard(mine: list[T]) -> list[T]:
    """Every process's share, back in the order :func:`shard` split them from (on every process)."""
    state = PartialState()
    if state.num_processes == 1:
        return mine
    parts = gather_object([mine])  # one list per process, in rank order
    out: list[T] = []
    for i in range(max(len(p) for p in parts)):
        out.extend(p[i] for p in parts if i < len(p))
    return out


def max_over_processes(value: float) -> float:
    """The largest ``value`` of any process (each must call this at the same point)."""
    return max_each_over_processes([value])[0]


def max_each_over_processes(values: Sequence[float]) -> list[float]:
    """Position by position, the largest of every process's ``values`` (each must call this at the same
    point, with as many values)."""
    state = PartialState()
    if state.num_processes == 1:
        return list(values)
    tensor = torch.tensor(list(values), dtype=torch.float64, device=state.device)
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
    return tensor.tolist()


class OutputLock:
    """An exclusive lock on an output directory, held by the main process for the whole run.

    ``flock`` is released by the kernel when its holder dies, even by ``kill -9``, so a stale lock
    file never blocks a later run; a live one (workers that outlived their launcher included) does.
    """

    def __init__(self, out: Path) -> None:
        self.path = out / LOCK_FILE
        self._file: Any = None

    def holder(self) -> int | None:
        """The pid of a live run holding the lock, or None when it is free (without taking it)."""
        if not self.path.is_file():
            return None
        with open(self.path, "a+") as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                probe.seek(0)
                text = probe.read().strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(probe, fcntl.LOCK_UN)
        return None

    def acquire(self) -> bool:
        """Take the lock; False if a live run holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115  held open for the run: closing it releases the lock
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle
        return True

    def release(self) -> None:
        """Unlock, and remove the lock file, which would otherwise be uploaded with the adapter. Removed
        while still held, so that no run can take it between the unlock and the removal."""
        if self._file is not None:
            self.path.unlink(missing_ok=True)
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


class RecordProcesses(TrainerCallback):
    """Writes the number of processes and the effective batch into each checkpoint, so that a
    resume on another number of processes can say that its batch changed."""

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            path = Path(args.output_dir) / f"checkpoint-{state.global_step}" / PROCESSES_FILE
            if path.parent.is_dir():
                path.write_text(json.dumps(processes_record(args)) + "\n")
        return control


def effective_batch(args: TrainingArguments, processes: int) -> int:
    """Completions per optimizer step over every process."""
    return args.per_device_train_batch_size * args.gradient_accumulation_steps * processes


def processes_record(args: TrainingArguments) -> dict[str, int]:
    world = max(args.world_size, 1)
    return {"processes": world, "effective_batch": effective_batch(args, world)}


def resume_warning(checkpoint: Path, args: TrainingArguments) -> str | None:
    """A warning when ``checkpoint`` was trained on another number of processes than this run has."""
    path = checkpoint / PROCESSES_FILE
    if not path.is_file():
        return None
    saved, now = json.loads(path.read_text()), processes_record(args)
    if saved["processes"] == now["processes"]:
        return None
    return (
        f"{checkpoint.name} was trained on {saved['processes']} processes (effective batch {saved['effective_batch']}); "
        f"resuming on {now['processes']} changes it to {now['effective_batch']} completions per step"
    )
