"""Several processes: a real 2-process gloo run under torchrun, and the helpers it rests on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TURN_MODE

import evaluation.run
import grpo_train
from evaluation.report import read_json
from runtime import distributed

ROOT = Path(__file__).resolve().parent.parent
RUN = [
    "--profile",
    "cpu",
    "--max_steps",
    "2",
    "--save_steps",
    "1",
    "--eval_games",
    "6",
    "--train_rows",
    "64",
    *TURN_MODE,
]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def run(argv: list[str], processes: int = 1) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    command = [*launcher, "grpo_train.py", *argv] if processes > 1 else [sys.executable, "grpo_train.py", *argv]
    return subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True, check=False, timeout=600)


def launched(argv: list[str], processes: int = 1) -> str:
    """The log of a run that must succeed."""
    proc = run(argv, processes)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("ddp") / "out"
    return out, launched([*RUN, "--output_dir", str(out), "--merge", "true"], processes=2)


def test_two_processes_write_and_log_once(two_process_run):
    out, log = two_process_run
    assert log.count("resolved configuration:") == 1  # INFO from the main process only
    assert log.count("Before and after training:") == 2  # one table per opening, from the main process only
    assert log.count("saved the LoRA adapter") == 1
    for name in ("adapter_model.safetensors", "wordle_grpo_config.yaml", "README.md", "train_rows.jsonl"):
        assert (out / name).is_file(), name
    assert (out / "merged" / "config.json").is_file()  # --merge ran after the adapter was complete
    record = json.loads((out / "checkpoint-2" / distributed.PROCESSES_FILE).read_text())
    assert record == {"processes": 2, "effective_batch": 2 * 8}


def test_two_processes_share_the_games_and_play_each_once(two_process_run):
    out, _ = two_process_run
    _, before = read_json(out / "eval" / "before.json")
    _, after = read_json(out / "eval" / "after.json")
    for result in (before[0], before[4], *after):  # each opening's games
        assert [g.secret for g in result.games] == list(evaluation.run.select_secrets(6))  # in order, none twice
        assert result.metrics["games"] == 6


def test_resuming_on_another_number_of_processes_warns(two_process_run):
    out, _ = two_process_run
    proc = run([*RUN, "--output_dir", str(out), "--max_steps", "3", "--resume", "--skip_eval", "true"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "checkpoint-2 was trained on 2 processes (effective batch 16); resuming on 1 changes it to 8" in (
        " ".join(proc.stderr.split())  # rich wraps long log lines
    )


# Game mode, the cpu profile's default: games end at different turns on different processes, yet every
# collective of the step (the loss's gathers, DDP's gradient all-reduce) sees the same shapes everywhere.
GAME_RUN = ["--profile", "cpu", "--max_steps", "3", "--save_steps", "1", "--eval_games", "4"]
ADAPTER = "adapter_model.safetensors"


@pytest.fixture(scope="module")
def two_process_games(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("ddp-game") / "out"
    return out, launched([*GAME_RUN, "--output_dir", str(out), "--merge", "true"], processes=2)


def test_game_mode_on_two_processes_trains_evaluates_and_merges_once(two_process_games):
    out, log = two_process_games
    assert log.count("resolved configuration:") == 1
    assert log.count("Before and after training:") == 2 and log.count("saved the LoRA adapter") == 1
    assert log.count("step 3/3 |") == 1  # one progress line per step, from the main process
    assert (out / "merged" / "config.json").is_file()
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    steps = [e for e in state["log_history"] if "game/win_rate" in e]
    assert [e["step"] for e in steps] == [1, 2, 3] and all(0 <= e["game/win_rate"] <= 1 for e in steps)
    record = json.loads((out / "checkpoint-3" / distributed.PROCESSES_FILE).read_text())
    assert record == {"processes": 2, "effective_batch": 2 * 8 * 12}  # each: 4 start states x 6 slots x 4 games


def test_game_mode_on_two_processes_repeats_byte_for_byte_and_resumes_exactly(two_process_games, tmp_path):
    out, _ = two_process_games
    launched([*GAME_RUN, "--output_dir", str(tmp_path / "again"), "--skip_eval", "true"], processes=2)
    assert (tmp_path / "again" / ADAPTER).read_bytes() == (out / ADAPTER).read_bytes()
    # What a kill after step 2's checkpoint leaves behind, resumed: step 3 trains as the run straight through.
    cut = tmp_path / "cut"
    for step in (1, 2):
        shutil.copytree(out / f"checkpoint-{step}", cut / f"checkpoint-{step}")
    resumed = launched([*GAME_RUN, "--output_dir", str(cut), "--skip_eval", "true", "--resume"], processes=2)
    assert "resumingfrom" in "".join(resumed.split())
    assert (cut / ADAPTER).read_bytes() == (out / ADAPTER).read_bytes()


def test_a_second_live_run_into_the_same_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    held = distributed.OutputLock(out)
    assert held.acquire()
    try:
        assert grpo_train.main([*RUN, "--output_dir", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"is in use by a live run (pid {os.getpid()})" in err
    finally:
        held.release()
    assert distributed.OutputLock(out).holder() is None  # released: a later run may start


def test_shard_and_unshard_restore_the_order():
    items = list(range(7))
    assert distributed.shard(items) == items  # one process: all of it
    assert distributed.unshard(items) == items


def test_dry_run_previews_a_world_size(capsys):
    assert grpo_train.main(["--profile", "cpu", "--dry-run", "--world_size", "4", *TURN_MODE]) == 0
    out = capsys.readouterr().out
    assert "processes: 4" in out and "effective_completions_per_step: 32" in out
    assert grpo_train.main(["--profile", "cpu", "--world_size", "4"]) == 2
    assert "previews a launch with --dry-run" in capsys.readouterr().err
