"""A run in trouble says so at the step it happens (training/health.py): the rule on fixed sequences of logs, and a
real collapse of the embedded model driven by a learning rate that wrecks it."""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import pytest
import yaml
from test_errors import assert_is_the_docs_line
from transformers import TrainerControl

import grpo_train
from settings.config import resolve
from training.health import PATIENCE, Health, set_aside

# (what it covers, the format reward of each logged step, the step the collapse is called at, or None)
SEQUENCES = [
    ("healthy throughout", [1.0, 0.9, 0.8, 0.7, 0.9], None),
    ("collapses after a healthy start", [1.0, 0.0, 0.0, 0.0, 0.0], 2),
    ("a dip it recovers from is no collapse", [1.0, 0.2, 0.1, 0.9, 0.2, 0.3, 1.0], None),
    ("a start that was never healthy is no collapse", [0.1, 0.0, 0.0, 0.0, 0.0], None),
    ("the streak counts from its first step", [1.0, 1.0, 0.4, 0.6, 0.3, 0.2, 0.1], 5),
]


def feed(health: Health, shares: list[float], loss: float = 0.1) -> list[TrainerControl]:
    controls = []
    for step, share in enumerate(shares, start=1):
        state = SimpleNamespace(global_step=step, is_world_process_zero=True)
        logs = {"loss": loss, "grad_norm": 1.0, "rewards/format_reward/mean": share}
        controls.append(health.on_log(None, state, TrainerControl(), logs=logs))
    return controls


@pytest.mark.parametrize(("what", "shares", "collapsed_at"), SEQUENCES, ids=[s[0] for s in SEQUENCES])
def test_a_collapse_is_called_at_its_first_step_after_a_healthy_start(what, shares, collapsed_at, caplog):
    health = Health(learning_rate=0.5, stop_on_collapse=True)
    with caplog.at_level(logging.WARNING, logger="training.health"):
        controls = feed(health, shares)
    assert health.collapsed_at == collapsed_at
    stopped = [c.should_training_stop for c in controls]
    if collapsed_at is None:
        assert not any(stopped) and not caplog.records
    else:
        assert stopped.index(True) == collapsed_at + PATIENCE - 2  # at the log that completes the streak
        [record] = caplog.records
        assert f"collapsed at step {collapsed_at}" in record.message and "learning rate (0.5)" in record.message


def test_without_stop_on_collapse_it_warns_and_trains_on(caplog):
    health = Health(learning_rate=0.5, stop_on_collapse=False)
    controls = feed(health, [1.0, 0.0, 0.0, 0.0, 0.0])
    assert health.collapsed_at == 2 and not any(c.should_training_stop for c in controls)


@pytest.mark.parametrize("name", ["loss", "grad_norm"])
def test_a_loss_or_gradient_that_is_not_finite_is_said_once_with_its_step(name, caplog):
    health = Health(learning_rate=1e-3)
    with caplog.at_level(logging.WARNING, logger="training.health"):
        for step in (1, 2):
            logs = {"loss": 0.1, "grad_norm": 1.0, name: math.nan}
            health.on_log(None, SimpleNamespace(global_step=step, is_world_process_zero=True), TrainerControl(), logs)
    [record] = caplog.records
    assert (
        record.message.startswith(f"step 1: the {name.replace('_', ' ')} is nan") and "learning rate" in record.message
    )


def test_the_checkpoints_after_the_last_healthy_step_are_set_aside_not_deleted(tmp_path):
    for step in (2, 4, 6):
        (tmp_path / f"checkpoint-{step}").mkdir()
    assert set_aside(tmp_path, after=3) == ["collapsed-checkpoint-4", "collapsed-checkpoint-6"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint-2",
        "collapsed-checkpoint-4",
        "collapsed-checkpoint-6",
    ]


# A real collapse: the embedded model plays well from step 1 (format 1.000), and a learning rate this high breaks
# every reply within a few steps.
WRECK = ["--profile", "cpu", "--learning_rate", "0.5", "--max_steps", "12", "--save_steps", "1", "--logging_steps", "1"]
WRECK += ["--skip_eval", "true", "--disable_tqdm", "true", "--seed", "3", "--gradient_accumulation_steps", "6"]


def test_a_real_collapse_stops_the_run_keeps_the_last_healthy_checkpoint_and_says_how_to_go_on(tmp_path, capsys):
    out = tmp_path / "out"
    code = grpo_train.main([*WRECK, "--output_dir", str(out)])
    err = capsys.readouterr().err
    assert code == 3, err[-3000:]
    line = err.strip().splitlines()[-1]
    assert line.startswith("stopped: the policy collapsed at step "), line
    row = "a policy that collapsed, stopped (`--stop_on_collapse`, on by default after a healthy start)"
    assert_is_the_docs_line(row, line.replace(str(out), "outputs/cpu"), tmp_path, stops=True)
    step = int(line.split("collapsed at step ")[1].split(":")[0])
    assert "stopped by --stop_on_collapse, no adapter saved" in line and "--learning_rate 0.05 " in line
    assert line.endswith(" --resume")
    assert not (out / "adapter_model.safetensors").exists()
    kept = sorted(int(p.name.split("-")[-1]) for p in out.glob("checkpoint-*"))
    aside = sorted(int(p.name.split("-")[-1]) for p in out.glob("collapsed-checkpoint-*"))
    assert kept and max(kept) < step <= min(aside)  # the last healthy checkpoint is what --resume takes
    state = yaml.safe_load((out / f"checkpoint-{max(kept)}" / "trainer_state.json").read_text())
    first = next(h for h in state["log_history"] if "rewards/format_reward/mean" in h)
    assert first["rewards/format_reward/mean"] >= 0.5  # the start was healthy


def test_a_collapse_trained_through_is_on_the_card_in_the_log_history_and_the_last_words(tmp_path, caplog):
    out = tmp_path / "out"
    argv = [*WRECK, "--output_dir", str(out), "--stop_on_collapse", "false", "--save_steps", "100"]
    with caplog.at_level(logging.WARNING):
        trainer = grpo_train.train(resolve(argv))
    collapsed = [h["health/collapsed_at"] for h in trainer.state.log_history if "health/collapsed_at" in h]
    assert len(collapsed) == 1  # what every tracker receives
    assert "this run collapsed" in caplog.records[-1].getMessage()
    assert (
        f"**This run collapsed.** The policy collapsed at step {int(collapsed[0])}" in (out / "README.md").read_text()
    )
