"""Several processes (``torchrun``, ``accelerate launch``): who writes, who logs, who plays which games.

Every process runs the same script. Only the main one writes files and logs INFO; the others wait
at a barrier where they would read what it wrote. Games are sharded: each process plays every
N-th secret and the main one gathers them, so N processes evaluate N times faster. One process is
rank 0 of 1, and then every helper here costs nothing.

The process group is transformers': :func:`setup` asks the training arguments for their device,
which starts it (gloo on CPU, NCCL on NVIDIA GPUs); accelerate's ``PartialState`` then shares it,
and so does DeepSpeed. :func:`launch_problem` names, before anything loads, a launch that would run
other than asked (docs/several-gpus.md has the recipes that work).
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from transformers import TrainerCallback, TrainingArguments

from training.arguments import ScriptArguments

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


# What an accelerate launch tells the processes it starts.
ACCELERATE_CPU, ACCELERATE_FSDP, ACCELERATE_DEEPSPEED = (
    "ACCELERATE_USE_CPU",
    "ACCELERATE_USE_FSDP",
    "ACCELERATE_USE_DEEPSPEED",
)
ACCELERATE_DS_FILE, ACCELERATE_DS_STAGE = "ACCELERATE_DEEPSPEED_CONFIG_FILE", "ACCELERATE_DEEPSPEED_ZERO_STAGE"
# Set in each process by torchrun and accelerate's GPU launchers (WORLD_SIZE), or by mpirun.
WORLD_SIZE_VARS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
# With sharded weights every forward pass is a collective, but each process plays its own share of
# games for as many turns as they last, so the processes would wait on each other: (whether the run
# plays such games, which, how to turn them off).
SHARDED_GAMES = (
    (lambda s: not s.skip_eval, "the games before and after training", "pass --skip_eval true"),
    (lambda s: s.game_eval_steps > 0, "the held-out check's games", "pass --game_eval_steps 0"),
    (lambda s: s.rollout == "game", "--rollout game's games", "use --rollout turn"),
)


def launch_problem(
    script: ScriptArguments, train_kw: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> str | None:
    """Why this launch would not run as asked, in one line for the user; None when it would.

    Checked before anything loads: a launch that silently runs one process, FSDP where accelerate
    would quietly train unsharded, a DeepSpeed setting that would fail minutes later, and games that
    sharded weights cannot play. ``environ`` is what ``accelerate launch`` passed (default: this
    process's environment).
    """
    env = os.environ if environ is None else environ
    if _true(env.get(ACCELERATE_CPU)) and "MASTER_ADDR" in env and not any(v in env for v in WORLD_SIZE_VARS):
        return (
            "accelerate launch --cpu --num_processes N starts one process (several CPU processes need mpirun): "
            "use torchrun --nproc_per_node N, or accelerate launch --multi_gpu"
        )
    fsdp = _true(train_kw.get("fsdp")) or _true(env.get(ACCELERATE_FSDP))
    if fsdp and script.device in ("cpu", "mps"):
        return (
            f"FSDP needs GPUs: on {script.device} accelerate would train unsharded, as plain DDP; to shard on CPU, "
            "use DeepSpeed (--deepspeed configs/deepspeed/zero3.json)"
        )
    stage = 0
    if train_kw.get("deepspeed") or _true(env.get(ACCELERATE_DEEPSPEED)):
        if importlib.util.find_spec("deepspeed") is None:
            return 'DeepSpeed is not installed: pip install -e ".[deepspeed]" (on CPU-only torch: --no-build-isolation)'
        if not script.dry_run and not any(v in env for v in WORLD_SIZE_VARS):
            # Without a launcher's variables DeepSpeed looks for MPI when training starts, and fails there.
            return (
                "DeepSpeed needs a launcher, also for one process: torchrun --nproc_per_node N grpo_train.py ..., "
                "or accelerate launch --config_file configs/accelerate/zero2.yaml"
            )
        stage = _zero_stage(train_kw.get("deepspeed"), env)
        if isinstance(stage, str):
            return stage
    sharded = "DeepSpeed ZeRO-3" if stage == 3 else "FSDP" if fsdp else None
    if sharded is None:
        return None
    for plays, games, fix in SHARDED_GAMES:
        if plays(script):
            return (
                f"{sharded} cannot play {games} (each process plays its own, and every forward pass of sharded "
                f"weights waits for all): {fix}, or use ZeRO-2"
            )
    if stage == 3 and script.merge:
        return (
            "DeepSpeed ZeRO-3 cannot --merge while training (the main process alone would load a sharded model): "
            "merge afterwards with python grpo_train.py, the same --output_dir and --merge"
        )
    return None


def _true(value: Any) -> bool:
    """A flag's value as the command line or an environment variable gives it ("true", "1", True)."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "false", "0", "no", "none")
    return bool(value)


def _zero_stage(deepspeed: Any, env: Mapping[str, str]) -> int | str:
    """The ZeRO stage of ``--deepspeed`` (a file or a dict) or of accelerate's DeepSpeed config, or a
    one-line error when its file cannot be read."""
    config = deepspeed or env.get(ACCELERATE_DS_FILE)
    if not config:
        stage = env.get(ACCELERATE_DS_STAGE, "0")
        return int(stage) if stage.isdigit() else 0
    if isinstance(config, str):
        path = Path(config)
        if not path.is_file():
            return f"DeepSpeed config {config} does not exist (configs/deepspeed/ has zero2.json and zero3.json)"
        try:
            config = json.loads(path.read_text())
        except ValueError as exc:
            return f"DeepSpeed config {config} is not valid JSON: {exc}"
    if not isinstance(config, dict):
        return f"DeepSpeed config {deepspeed} must be a JSON object of DeepSpeed settings"
    zero = config.get("zero_optimization")
    stage = str(zero.get("stage", 0)) if isinstance(zero, dict) else "0"
    return int(stage) if stage.isdigit() else 0


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
