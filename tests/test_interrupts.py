"""A signal in every phase of a run ends it with one line and no traceback: what is on disk and the one command that
continues. Real signals to a real run in its own process, before training and after it (training's own handling is
tests/test_train.py's); a save waits for whole files, and a second signal acts at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.preemption import Interrupted, deferred, interruptible

ROOT = Path(__file__).resolve().parent.parent
# The embedded model, one step, a few games: the phases are seconds long each.
RUN = ["--profile", "cpu", "--max_steps", "1", "--save_steps", "100", "--disable_tqdm", "true", "--seed", "3"]
RUN += ["--eval_games", "60", "--eval_openings", "own"]


def start(out: Path, *extra: str) -> tuple[subprocess.Popen, list[str]]:
    cmd = [sys.executable, "grpo_train.py", *RUN, "--output_dir", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "400"}  # one log record a line
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), cmd


def signal_when(proc: subprocess.Popen, marker: str, sig: signal.Signals) -> tuple[int, str]:
    """Send ``sig`` once stderr has shown ``marker``; the exit code and the whole of stderr."""
    seen = []
    deadline = time.monotonic() + 300
    for line in proc.stderr:
        seen.append(line)
        if marker in line:
            proc.send_signal(sig)
            break
        assert time.monotonic() < deadline, "the marker never came"
    else:
        pytest.fail(f"the run ended before {marker!r}: {''.join(seen)[-2000:]}")
    rest = proc.stderr.read()
    proc.wait(timeout=120)
    return proc.returncode, "".join(seen) + rest


def test_a_signal_while_the_games_before_training_play_leaves_nothing_and_a_plain_rerun_works(tmp_path):
    out = tmp_path / "out"
    proc, cmd = start(out)
    code, err = signal_when(proc, "playing the games before training", signal.SIGINT)
    assert code == 128 + signal.SIGINT and "Traceback" not in err, err[-3000:]
    line = err.strip().splitlines()[-1]
    again = " ".join(cmd[1:])
    assert (
        line
        == f"stopped: SIGINT while playing the games before training: nothing trained yet, nothing saved; to start again: python {again}"
    )
    assert not out.exists(), "a run stopped before it wrote anything leaves no directory (and no lock)"
    rerun = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (out / "adapter_model.safetensors").is_file()


def test_a_signal_while_the_games_after_training_play_keeps_the_adapter_and_says_how_to_play_them(tmp_path):
    out = tmp_path / "out"
    proc, _ = start(out)
    # Not on "saved the LoRA adapter": that line is written inside the save, whose deferred signal names the save.
    code, err = signal_when(proc, "playing the games after training", signal.SIGTERM)
    assert code == 128 + signal.SIGTERM and "Traceback" not in err, err[-3000:]
    line = err.strip().splitlines()[-1]
    assert line == (
        f"stopped: SIGTERM while playing the games after training: the adapter is saved in {out}; to play the games "
        f"after training: python evaluate.py --adapter {out} --out {out / 'eval'}"
    )
    assert (out / "adapter_model.safetensors").is_file() and (out / "wordle_grpo_config.yaml").is_file()
    assert not (out / ".wordle_grpo.lock").exists()  # no stale lock: evaluate.py, or a rerun, may use it


def test_a_save_waits_out_the_first_signal_and_a_second_acts_at_once():
    before = signal.getsignal(signal.SIGTERM)
    with (
        pytest.raises(Interrupted) as stopped,
        interruptible(lambda s: f"{s.name}: the line"),
        deferred() as signals,
    ):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # Python runs a handler between bytecodes: here, once the signal arrives
        assert signals == [signal.SIGTERM]  # the save goes on
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        pytest.fail("the second signal did not act at once")
    assert str(stopped.value) == "SIGTERM: the line" and stopped.value.code == 143
    assert signal.getsignal(signal.SIGTERM) == before  # every handler given back
