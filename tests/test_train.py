"""The real trainer on CPU: GRPO steps with LoRA and 4-bit QLoRA, resume after kill -9, the MPS callback,
and every error a user can cause, each one line."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import TURN_MODE
from peft import PeftModel
from safetensors import SafetensorError
from safetensors.torch import load_file
from test_errors import assert_is_the_docs_line
from transformers import AutoModelForCausalLM, AutoTokenizer

import grpo_train
from evaluation.metrics import mean_ci
from evaluation.play import ModelPlayer
from evaluation.strategy import information_of, information_states
from runtime import device as devices
from runtime import distributed
from settings.arguments import CONFIG_FILE
from settings.config import resolve
from tinymodel import MODEL_DIR
from training import before_after
from wordle import train_secrets
from wordle.decoding import Decoding

ROOT = Path(__file__).resolve().parent.parent

# Small and quick: 8 completions of 2 prompts a step, the embedded model, few rows to build.
QUICK = [
    "--profile",
    "cpu",
    "--train_rows",
    "16",
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--save_steps",
    "100",
    "--disable_tqdm",
    "true",
    "--seed",
    "3",
    "--eval_games",  # the full-game evaluation before and after, kept to a few games
    "2",
    *TURN_MODE,
]


def run_in_process(tmp_path: Path, *extra: str):
    return grpo_train.train(resolve([*QUICK, "--output_dir", str(tmp_path / "out"), *extra]))


def split_params(model) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    lora, base = {}, {}
    for name, param in model.named_parameters():
        (lora if "lora_" in name else base)[name] = param.detach().clone()
    return lora, base


def original_name(peft_name: str) -> str:
    return peft_name.removeprefix("base_model.model.").replace(".base_layer", "")


def test_grpo_steps_change_lora_and_leave_the_base_alone(tmp_path):
    trainer = run_in_process(tmp_path, "--max_steps", "2")
    lora, base = split_params(trainer.model)
    assert lora and all("lora_" in n for n in lora)
    # LoRA B starts at zero: any non-zero value is what the two optimizer steps did.
    assert any(t.abs().sum() > 0 for n, t in lora.items() if "lora_B" in n)
    original = load_file(MODEL_DIR / "model.safetensors")
    assert base, "no base parameters found"
    for name, tensor in base.items():
        torch.testing.assert_close(tensor, original[original_name(name)], rtol=0, atol=0, msg=name)
    assert not any(p.requires_grad for n, p in trainer.model.named_parameters() if "lora_" not in n)

    # What was saved loads with PeftModel.from_pretrained and holds the trained LoRA weights.
    out = Path(trainer.args.output_dir)
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(MODEL_DIR), out)
    reloaded, _ = split_params(loaded)
    for name, tensor in lora.items():
        torch.testing.assert_close(reloaded[name], tensor, msg=name)
    assert (out / CONFIG_FILE).is_file() and (out / "tokenizer_config.json").is_file()
    assert not (out / distributed.LOCK_FILE).exists()  # it would be uploaded with the adapter

    # Every training log carries each reward by name, the spread, length, clipping, time and memory.
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2
    for key in (
        "reward_std",
        "rewards/format_reward/mean",
        "rewards/win_reward/mean",
        "completions/mean_length",
        "completions/clipped_ratio",
        "step_time",
        "peak_memory_mb",
    ):
        assert all(key in h for h in logs), key
    assert all(h["step_time"] > 0 and h["peak_memory_mb"] > 0 for h in logs)
    # Where each step's time went: the three parts are the whole step, which holds TRL's step_time (generation,
    # scoring, forward and backward) and the optimizer besides; generation happens inside TRL's.
    for h in logs:
        generation, scoring, update = (h[f"time/{part}"] for part in ("generation", "scoring", "update"))
        assert generation > 0 and scoring > 0 and update > 0
        assert generation + scoring + update >= h["step_time"] > generation


def test_full_fine_tuning_saves_a_whole_model(tmp_path):
    # Two steps: every group of the first (seed 3) can score alike, which leaves the weights as they were.
    trainer = run_in_process(tmp_path, "--max_steps", "2", "--use_peft", "false")
    out = Path(trainer.args.output_dir)
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    trained = load_file(out / "model.safetensors")
    original = load_file(MODEL_DIR / "model.safetensors")
    assert any(not torch.equal(trained[name], original[name]) for name in original)


def test_qlora_4bit_runs_for_real_on_cpu(tmp_path, monkeypatch):
    import bitsandbytes as bnb

    # As on CPUs with AVX512-BF16/AMX, where the evaluation before training would repack the 4-bit
    # weights for inference (tests/test_hub_model.py shows the repacking happens under this patch).
    monkeypatch.setattr(bnb.nn.modules, "has_avx512bf16", lambda: True)
    trainer = run_in_process(tmp_path, "--max_steps", "2", "--load_in_4bit", "true", "--merge", "true")
    quantized = [m for m in trainer.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert quantized, "no 4-bit layers: the QLoRA path did not quantize"
    assert all(m.weight.quant_state.quant_type == "nf4" for m in quantized)
    lora, _ = split_params(trainer.model)
    assert any(t.abs().sum() > 0 for n, t in lora.items() if "lora_B" in n)
    merged = Path(trainer.args.output_dir) / "merged"
    model = AutoModelForCausalLM.from_pretrained(merged)  # a standalone model, no adapter
    assert not any("lora_" in n for n, _ in model.named_parameters())


def test_format_log_line_names_each_reward():
    from training.trainer import format_log

    line = format_log(
        {
            "reward": 1.5,
            "reward_std": 0.25,
            "rewards/format_reward/mean": 1.0,
            "rewards/win_reward/mean": 0.125,
            "completions/mean_length": 21.0,
            "completions/clipped_ratio": 0.0,
            "step_time": 2.5,
            "peak_memory_mb": 900.0,
        },
        step=3,
        max_steps=60,
    )
    assert line.startswith("step 3/60 | reward 1.500 ± 0.250 | format 1.000 win 0.125 | len 21.0 clipped 0.00")
    assert line.endswith(" | 2.50 s/step | peak 900 MB rss")  # TRL's step time where the split is missing
    split = {"reward": 1.0, "time/generation": 2.0, "time/scoring": 0.25, "time/update": 0.5, "peak_memory_mb": 9.0}
    line = format_log({**split, "step_time": 2.5}, step=3, max_steps=60, device="mps")
    assert line.endswith(" | 2.75 s/step (generate 2.00, score 0.25, update 0.50) | peak 9 MB rss")  # no MPS here
    assert format_log({"train_runtime": 1.0}, 1, 1) is None
    # A step that trains on replies generated before (num_iterations > 1): its loss, never a raw dict.
    line = format_log({"loss": 0.0312, "grad_norm": 0.5, "step_time": 1.25, "peak_memory_mb": 9.0}, 4, 8)
    assert line == "step 4/8 | loss 0.0312 (on replies generated at an earlier step) | 1.25 s/step | peak 9 MB rss"


# --- resume ------------------------------------------------------------------------------------------


def _train_cmd(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "grpo_train.py",
        *QUICK,
        "--output_dir",
        str(out),
        "--max_steps",
        "12",
        "--save_steps",
        "2",
        "--save_total_limit",
        "2",
        *extra,
    ]


def _run_until_checkpoint(out: Path, step: int, env: dict) -> subprocess.Popen:
    """A training run in its own process, once its checkpoint-``step`` is whole."""
    proc = subprocess.Popen(_train_cmd(out), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not (out / f"checkpoint-{step}" / "trainer_state.json").exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "no checkpoint within 5 minutes"
        time.sleep(0.2)
    return proc


def test_resume_after_kill_9_reaches_max_steps_with_nothing_lost(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = _run_until_checkpoint(out, 4, env)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "adapter_model.safetensors").exists(), "the run finished before it was killed"
    # A save cut short by the kill leaves a directory without trainer_state.json: resume skips it.
    partial = out / "checkpoint-999"
    partial.mkdir()
    (partial / "adapter_model.safetensors").write_bytes(b"half")

    refused = subprocess.run(_train_cmd(out), cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert refused.returncode == 2 and "--resume" in refused.stderr.strip().splitlines()[-1]

    resumed = subprocess.run(
        _train_cmd(out, "--resume"), cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    log = resumed.stdout + resumed.stderr  # rich logs to stdout
    assert "skipping" in log and "checkpoint-999" in log
    state = json.loads((out / "checkpoint-12" / "trainer_state.json").read_text())
    assert state["global_step"] == 12
    steps = [h["step"] for h in state["log_history"] if "reward" in h]
    assert steps == list(range(1, 13)), steps  # every step logged once: none lost, none repeated
    assert (out / "adapter_model.safetensors").is_file()


def test_sigterm_stops_at_the_step_s_end_with_a_checkpoint_and_resume_finishes(tmp_path):
    """A real SIGTERM, as a cluster sends it: the process saves the step it was on and exits 143 with one line that
    gives the --resume command; no checkpoint is torn; the resumed run logs every step once."""
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = _run_until_checkpoint(out, 2, env)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)  # a hang guard: it stops when the step under way ends
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()[-2000:]
    line = err.decode().strip().splitlines()[-1]
    assert line.startswith("stopped: SIGTERM at step ") and line.endswith(" --resume"), line
    assert_is_the_docs_line("a signal during training", line.replace(str(out), "outputs/cpu"), tmp_path, stops=True)
    step = int(line.split("at step ")[1].split()[0])
    assert f"checkpoint-{step} saved in {out}" in line and step < 12
    assert all((c / "trainer_state.json").is_file() for c in out.glob("checkpoint-*"))  # none torn

    resumed = subprocess.run(
        _train_cmd(out, "--resume"), cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    state = json.loads((out / "checkpoint-12" / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "reward" in h] == list(range(1, 13))


# --- the MPS cache callback --------------------------------------------------------------------------


def test_mps_callback_fires_every_n_steps(monkeypatch):
    calls = []
    monkeypatch.setattr(devices.torch.mps, "synchronize", lambda: calls.append("sync"))
    monkeypatch.setattr(devices.torch.mps, "empty_cache", lambda: calls.append(("empty", state.global_step)))
    callback = devices.MpsCacheCallback(every=3)
    state = SimpleNamespace(global_step=0)
    for step in range(1, 11):
        state.global_step = step
        callback.on_step_end(None, state, None)
    assert [c for c in calls if c != "sync"] == [("empty", 3), ("empty", 6), ("empty", 9)]
    assert calls.count("sync") == 3 and calls[0] == "sync"  # synchronize before each empty_cache
    with pytest.raises(ValueError):
        devices.MpsCacheCallback(every=0)


def test_mps_profile_wires_the_callback(monkeypatch, tmp_path):
    seen = {}

    class Stop(Exception):
        pass

    def fake_trainer(**kwargs):
        seen["callbacks"] = kwargs["callbacks"]
        raise Stop

    monkeypatch.setattr(grpo_train, "WordleGRPOTrainer", fake_trainer)
    monkeypatch.setattr(devices.torch.backends.mps, "is_available", lambda: True)
    r = resolve(
        [
            "--profile",
            "mps",
            "--model",
            "tiny",
            "--output_dir",
            str(tmp_path),
            "--train_rows",
            "4",
            "--skip_eval",
            "true",
        ]
    )
    with pytest.raises(Stop):
        grpo_train.train(r)
    [callback] = [c for c in seen["callbacks"] if isinstance(c, devices.MpsCacheCallback)]
    assert callback.every == r.script.mps_empty_cache_steps


# --- errors: one line, exit code 2 (every bad input is in tests/test_errors.py) -----------------------


def error_of(capsys, *argv: str) -> str:
    """The error line; loading progress bars may come before it, but no traceback and no second error."""
    assert grpo_train.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error: ") == 1, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: "), err
    return line


def test_out_of_memory_suggests_the_rollback(monkeypatch, capsys, tmp_path):
    def oom(self, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(grpo_train.WordleGRPOTrainer, "train", oom)
    err = error_of(capsys, *QUICK, "--output_dir", str(tmp_path), "--max_steps", "1")
    # Its replies are 16 tokens, below the first rung: the advice starts at the next one.
    assert "out of memory" in err and "retry with --num_generations" in err and "--per_device_train_batch_size" in err
    assert "--max-completion" not in err


@pytest.mark.slow
def test_the_readme_main_job_trains_the_embedded_model_to_a_saved_adapter(tmp_path):
    """The README's first command, as a user runs it (minutes): the cpu profile, offline, to the end."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "grpo_train.py", "--profile", "cpu", "--output_dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(MODEL_DIR), out)
    assert any("lora_B" in n and p.abs().sum() > 0 for n, p in loaded.named_parameters())

    # What GRPO taught the choice among the answers still possible: on fixed validation states (a choice among
    # three or more), the expected information of the greedy guess rises, state by state, beyond its interval.
    tokenizer = AutoTokenizer.from_pretrained(out)  # the run saves the tokenizer beside the adapter
    states = information_states(train_secrets("val"))
    decoding = Decoding(max_new_tokens=16)
    trained = information_of(ModelPlayer(loaded, tokenizer, decoding), states)["per_state"]
    with loaded.disable_adapter():
        start = information_of(ModelPlayer(loaded, tokenizer, decoding), states)["per_state"]
    rise = mean_ci([a - b for a, b in zip(trained, start, strict=True)])
    assert rise["low"] > 0, rise


# What each library raised when a write found no space, measured on a full tmpfs: Python's own writes, torch.save
# (the optimizer's state), and safetensors (the adapter's weights). Injected here: a small mount needs privileges.
NO_SPACE = {
    "oserror": lambda path: OSError(errno.ENOSPC, "No space left on device", str(path)),
    "torch": lambda path: RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"),
    "safetensors": lambda path: SafetensorError(
        "Error while serializing: I/O error: No space left on device (os error 28)"
    ),
}


@pytest.mark.parametrize("raised", list(NO_SPACE))
def test_a_disk_that_fills_during_a_save_is_one_line_and_a_resume_finishes(tmp_path, monkeypatch, capsys, raised):
    out = tmp_path / "out"
    argv = [*QUICK, "--output_dir", str(out), "--max_steps", "3", "--save_steps", "1", "--skip_eval", "true"]
    real = grpo_train.WordleGRPOTrainer._save_optimizer_and_scheduler

    def full_at_step_2(trainer, output_dir):
        if trainer.state.global_step == 2:  # the weights are written, the optimizer's state is not
            raise NO_SPACE[raised](Path(output_dir) / "optimizer.pt")
        real(trainer, output_dir)

    with monkeypatch.context() as patch:
        patch.setattr(grpo_train.WordleGRPOTrainer, "_save_optimizer_and_scheduler", full_at_step_2)
        assert grpo_train.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: the disk filled while saving checkpoint-2") and "rerun with --resume" in line
    assert not (out / "checkpoint-2").exists()  # the half-written one is gone, the earlier one whole
    assert json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())["global_step"] == 1
    assert distributed.OutputLock(out).holder() is None

    assert grpo_train.main([*argv, "--resume"]) == 0  # space is back
    assert json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())["global_step"] == 3
    assert (out / "adapter_model.safetensors").is_file()


def test_a_real_full_disk_at_the_first_checkpoint_then_space_returns(tmp_path, capsys):
    """On a small tmpfs (where this machine lets the test mount one): the real libraries' errors, then a rerun."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command on this machine")
    disk = tmp_path / "disk"
    disk.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(disk)], check=False, capture_output=True
    )
    if made.returncode:
        pytest.skip("mounting a small filesystem needs privileges this machine does not give")
    try:
        argv = [
            *QUICK,
            "--output_dir",
            str(disk / "run"),
            "--max_steps",
            "1",
            "--save_steps",
            "1",
            "--skip_eval",
            "true",
        ]
        assert grpo_train.main(argv) == 2
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line.startswith(f"error: the disk filled while saving checkpoint-1 in {disk / 'run'} (")
        assert line.endswith("there is no earlier one: free space, then rerun without --resume")
        assert not (disk / "run" / "checkpoint-1").exists()
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)  # space is back
        assert grpo_train.main(argv) == 0
        assert (disk / "run" / "adapter_model.safetensors").is_file()
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_disk_that_fills_while_the_adapter_is_saved_loses_nothing(tmp_path, monkeypatch, capsys):
    """Every step trained, the final save fails: one line naming the directory, and --resume saves the adapter of
    the last checkpoint without a step more, then plays the games after."""
    out = tmp_path / "out"
    argv = [*QUICK, "--output_dir", str(out), "--max_steps", "2", "--save_steps", "1", "--eval_games", "1"]
    real = grpo_train.WordleGRPOTrainer.save_model

    def full(trainer, output_dir=None, _internal_call=False):
        if not _internal_call:  # the final save, not a checkpoint's
            raise NO_SPACE["safetensors"](output_dir)
        real(trainer, output_dir, _internal_call)

    with monkeypatch.context() as patch:
        patch.setattr(grpo_train.WordleGRPOTrainer, "save_model", full)
        assert grpo_train.main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        line == f"error: the disk filled writing {out} (No space left on device): free space, then rerun with --resume"
    )
    assert not (out / CONFIG_FILE).exists() and (out / "checkpoint-2" / "trainer_state.json").is_file()
    assert grpo_train.main(argv) == 2  # a plain rerun says what to do
    assert "pass --resume to save it" in capsys.readouterr().err

    trainer = grpo_train.train(resolve([*argv, "--resume", "true"]))
    assert trainer.state.global_step == 2 and (out / CONFIG_FILE).is_file()  # no step more
    saved, last = (
        load_file(out / "adapter_model.safetensors"),
        load_file(out / "checkpoint-2" / "adapter_model.safetensors"),
    )
    assert saved.keys() == last.keys() and all(torch.equal(saved[k], last[k]) for k in saved)
    assert (out / "eval" / "after.json").is_file() and "| after |" in (out / "README.md").read_text()


@pytest.mark.parametrize("damaged", ["optimizer.pt", "adapter_model.safetensors", "trainer_state.json"])
def test_resume_skips_a_checkpoint_with_a_damaged_file_and_says_which(tmp_path, caplog, damaged):
    """A copy cut short: --resume falls back to the newest whole checkpoint, saying once which file it skipped."""
    out = tmp_path / "out"
    argv = [*QUICK, "--output_dir", str(out), "--save_steps", "1", "--skip_eval", "true"]
    assert grpo_train.train(resolve([*argv, "--max_steps", "2"])) is not None
    cut = out / "checkpoint-2" / damaged
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    with caplog.at_level("WARNING"):
        trainer = grpo_train.train(resolve([*argv, "--max_steps", "3", "--resume", "true"]))
    skipped = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert len(skipped) == 1 and str(out / "checkpoint-2") in skipped[0]
    assert damaged in skipped[0] or damaged == "trainer_state.json"  # that one: "not completely written"
    assert trainer.state.global_step == 3
    steps = [h["step"] for h in trainer.state.log_history if "reward" in h]
    assert steps == [1, 2, 3], steps  # resumed after step 1: step 2 trained again, on the same data


def test_a_disk_that_fills_in_the_games_after_keeps_the_adapter_and_says_how_to_play_them(
    tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    real = before_after.write_json

    def full(path, *args, **kwargs):
        if path.name == "after.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(before_after, "write_json", full)
    assert grpo_train.main([*QUICK, "--output_dir", str(out), "--max_steps", "1", "--eval_games", "1"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    again = f"python evaluate.py --adapter {out} --out {out / 'eval'} (the adapter is saved)"
    assert (
        line
        == f"error: the disk filled writing {out / 'eval' / 'after.json'} (No space left on device): free space, then {again}"
    )
    assert (out / "adapter_model.safetensors").is_file() and (out / CONFIG_FILE).is_file()


def test_checkpoints_name_the_base_as_the_run_did_and_carry_no_empty_card(tmp_path):
    run_in_process(tmp_path, "--max_steps", "1", "--save_steps", "1", "--skip_eval", "true")
    checkpoint = tmp_path / "out" / "checkpoint-1"
    assert json.loads((checkpoint / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny"
    assert not (checkpoint / "README.md").exists()  # PEFT's template; the run's card is in the output directory
    assert "More Information Needed" not in (tmp_path / "out" / "README.md").read_text()


# A real run whose second checkpoint finds the disk full: the fault injected, the rest (the progress bar included) real.
FULL_AT_STEP_2 = """
import errno, sys
import runtime.quiet
from trl import GRPOTrainer
import grpo_train
real = GRPOTrainer._save_checkpoint
def save(self, model, trial):
    if self.state.global_step >= 2:
        raise OSError(errno.ENOSPC, "No space left on device")
    return real(self, model, trial)
GRPOTrainer._save_checkpoint = save
sys.exit(grpo_train.main(sys.argv[1:]))
"""


def as_a_terminal_shows(text: str) -> list[str]:
    """The lines a terminal shows for ``text``: a carriage return goes back to the line's start, and what follows
    writes over what was there."""
    lines = []
    for raw in text.split("\n"):
        line = ""
        for part in raw.split("\r"):
            line = part + line[len(part) :]
        lines.append(line)
    return [line for line in lines if line.strip()]


def test_an_error_during_training_stands_alone_on_the_last_line_as_a_terminal_shows_it(tmp_path):
    off = QUICK.index("--disable_tqdm")
    argv = [*QUICK[:off], *QUICK[off + 2 :]]  # the progress bar on, as a user has it
    argv += ["--output_dir", str(tmp_path / "out"), "--max_steps", "3", "--save_steps", "1", "--skip_eval", "true"]
    done = subprocess.run(
        [sys.executable, "-c", FULL_AT_STEP_2, *argv],
        check=False,
        capture_output=True,  # bytes: text mode would turn the bar's carriage returns into newlines
        cwd=Path(__file__).resolve().parent.parent,
        timeout=600,
    )
    err = done.stderr.decode()
    assert done.returncode == 2, err[-2000:]
    assert "\r" in err and "%|" in err, "no progress bar was drawn: the test would prove nothing"
    screen = as_a_terminal_shows(err)
    errors = [line for line in screen if "error: " in line]
    assert len(errors) == 1 and errors[0].startswith("error: the disk filled while saving checkpoint-2"), screen[-4:]
    assert screen[-1] == errors[0], f"the error is not the last line: {screen[-3:]}"
