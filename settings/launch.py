"""How the run was launched (torchrun, accelerate launch, mpirun) and sharded (DeepSpeed, FSDP), read
before anything loads: one line for a launch that would run other than asked, or fail minutes later
(docs/several-gpus.md has the recipes that work).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from settings.arguments import RunArguments

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
    (lambda s: not getattr(s, "skip_eval", True), "the games before and after training", "pass --skip_eval true"),
    (lambda s: s.game_eval_steps > 0, "the held-out check's games", "pass --game_eval_steps 0"),
    (lambda s: getattr(s, "rollout", None) and s.rollout.plays_games, "--rollout game's games", "use --rollout turn"),
)


def launch_problem(
    script: RunArguments, train_kw: Mapping[str, Any], environ: Mapping[str, str] | None = None
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
    if getattr(script, "merged_generation", False):
        return (
            f"{sharded} shards the weights, and --merged_generation copies them whole on each process: "
            "drop --merged_generation, or use ZeRO-2"
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
