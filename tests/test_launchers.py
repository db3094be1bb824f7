"""The launch recipes of docs/several-gpus.md, run as a user runs them: 2 CPU processes with the embedded model.

DeepSpeed ZeRO-2 under torchrun with the evaluation and --merge (in turn mode and in game mode), ZeRO-3 under accelerate launch with the
shipped config, each resumed from its checkpoint; and a launcher stopped by SIGTERM or SIGINT takes both
workers with it, frees the output directory and leaves a checkpoint that --resume continues. Slow: each
launch takes 20-40 s here, and DeepSpeed's first run on a machine compiles its CPU communication op
(about 90 s, then cached).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TURN_MODE
from safetensors.torch import load_file

from runtime import distributed

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
RUN = ["--profile", "cpu", "--save_steps", "1", "--train_rows", "64", *TURN_MODE]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2"]


def launch(launcher: list[str], argv: list[str]) -> str:
    proc = subprocess.run(
        [*launcher, "grpo_train.py", *argv], cwd=ROOT, env=ENV, capture_output=True, text=True, check=False, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def resumed_from(checkpoint: Path, log: str) -> bool:
    return f"resumingfrom{checkpoint}" in "".join(log.split())  # rich wraps long lines, paths too


def trained_by_both(checkpoint: Path, step: int, stage: int) -> None:
    """Each process wrote its own shard of DeepSpeed's state, and the run recorded two processes."""
    shards = {p.name for p in (checkpoint / f"global_step{step}").iterdir()}
    for rank in (0, 1):
        assert f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" in shards, shards
        if stage == 3:  # the weights are sharded too
            assert f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt" in shards, shards
    assert json.loads((checkpoint / distributed.PROCESSES_FILE).read_text()) == {"processes": 2, "effective_batch": 16}
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["global_step"] == step
    assert [e["step"] for e in state["log_history"] if "reward" in e] == list(range(1, step + 1))


@pytest.fixture(scope="module")
def zero2(tmp_path_factory) -> tuple[Path, str]:
    pytest.importorskip("deepspeed")
    out = tmp_path_factory.mktemp("zero2") / "out"
    deepspeed = ["--deepspeed", "configs/deepspeed/zero2.json"]
    log = launch(
        TORCHRUN,
        [*RUN, *deepspeed, "--max_steps", "2", "--eval_games", "6", "--merge", "true", "--output_dir", str(out)],
    )
    return out, log


def test_zero2_trains_on_two_processes_with_the_evaluation_and_merge(zero2):
    out, log = zero2
    trained_by_both(out / "checkpoint-2", 2, stage=2)
    assert log.count("resolved configuration:") == 1  # the main process alone logs
    assert (out / "eval" / "after.json").is_file() and (out / "merged" / "config.json").is_file()


def test_zero2_resumes_from_its_checkpoint(zero2):
    out, _ = zero2
    deepspeed = ["--deepspeed", "configs/deepspeed/zero2.json"]
    log = launch(
        TORCHRUN, [*RUN, *deepspeed, "--max_steps", "3", "--skip_eval", "true", "--resume", "--output_dir", str(out)]
    )
    assert resumed_from(out / "checkpoint-2", log)
    trained_by_both(out / "checkpoint-3", 3, stage=2)


def test_zero2_in_game_mode_trains_evaluates_merges_and_resumes(tmp_path):
    # Game mode, the cpu profile's default: each process's games end at different turns.
    pytest.importorskip("deepspeed")
    out, game = (
        tmp_path / "out",
        ["--profile", "cpu", "--save_steps", "1", "--deepspeed", "configs/deepspeed/zero2.json"],
    )
    log = launch(
        TORCHRUN, [*game, "--max_steps", "2", "--eval_games", "4", "--merge", "true", "--output_dir", str(out)]
    )
    assert log.count("Before and after training:") == 2 and (out / "merged" / "config.json").is_file()
    log = launch(TORCHRUN, [*game, "--max_steps", "3", "--skip_eval", "true", "--resume", "--output_dir", str(out)])
    assert resumed_from(out / "checkpoint-2", log)
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "game/win_rate" in e] == [1, 2, 3]


def test_zero3_under_accelerate_launch_trains_saves_a_whole_adapter_and_resumes(tmp_path):
    pytest.importorskip("deepspeed")
    out = tmp_path / "out"
    accelerate = [*ACCELERATE, "--config_file", "configs/accelerate/zero3.yaml"]
    launch(accelerate, [*RUN, "--max_steps", "2", "--skip_eval", "true", "--output_dir", str(out)])
    trained_by_both(out / "checkpoint-2", 2, stage=3)
    adapter = load_file(out / "adapter_model.safetensors")  # gathered from both shards, not one process's part
    assert adapter and all(t.numel() > 0 for t in adapter.values())
    assert adapter["base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"].shape == (16, 768)
    launch(accelerate, [*RUN, "--max_steps", "3", "--skip_eval", "true", "--resume", "--output_dir", str(out)])
    trained_by_both(out / "checkpoint-3", 3, stage=3)


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return status.is_file() and "State:\tZ" not in status.read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the workers' pids from /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_launcher_stops_both_workers_and_the_run_resumes(sig, tmp_path):
    out = tmp_path / "out"
    argv = [*RUN, "--skip_eval", "true", "--output_dir", str(out)]
    with open(tmp_path / "log", "w") as log:
        launcher = subprocess.Popen(
            [*TORCHRUN, "grpo_train.py", *argv, "--max_steps", "400"], cwd=ROOT, env=ENV, stdout=log, stderr=log
        )
        deadline = time.monotonic() + 600
        while not (out / "checkpoint-2" / "trainer_state.json").is_file():
            assert launcher.poll() is None and time.monotonic() < deadline, (tmp_path / "log").read_text()[-3000:]
            time.sleep(0.2)
        workers = children(launcher.pid)
        assert len(workers) == 2
        launcher.send_signal(sig)
        assert launcher.wait(timeout=60) != 0
    deadline = time.monotonic() + 30  # the workers were sent SIGTERM by the launcher
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(w) for w in workers)
    assert distributed.OutputLock(out).holder() is None  # the lock died with the main worker
    newest = max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if (p / "trainer_state.json").is_file())
    log = launch(TORCHRUN, [*argv, "--max_steps", str(newest + 1), "--resume"])
    assert resumed_from(out / f"checkpoint-{newest}", log)
    state = json.loads((out / f"checkpoint-{newest + 1}" / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "reward" in e] == list(range(1, newest + 2))
