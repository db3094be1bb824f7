"""What a run reports reaches the tracker a user picked (``--report_to``): the run is named after its output
directory in the project ``wordle-grpo`` unless the user named it, and the final before/after evaluation
reaches every tracker, as scalars through ``trainer.log`` and as a table (docs/trackers.md)."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from evaluation.metrics import mean_ci, wilson
from evaluation.play import RandomAllowedPlayer, SolverPlayer
from evaluation.run import evaluate_baselines, evaluate_player, select_secrets
from settings.config import resolve
from training import trackers
from training.before_after import (
    FIGURES,
    TABLE_COLUMNS,
    TABLE_KEY,
    figures,
    final_scalars,
    final_table,
    opening_key,
    report_to_trackers,
)
from wordle.openings import Opening

OPENINGS = ("own", "answer:2")

# --- naming --------------------------------------------------------------------------------------------

UNSET = {"run_name": None, "project": "huggingface", "WANDB_PROJECT": None}

# (flags, environment, expected): what the trackers are told; None: left unset.
NAMING = [
    # no tracker: nothing is touched
    (["--report_to", "none"], {}, UNSET),
    # trackio: the output directory's name, in this project
    (["--report_to", "trackio"], {}, {"run_name": "run-7", "project": "wordle-grpo", "WANDB_PROJECT": None}),
    # the user's own names are kept
    (
        ["--report_to", "trackio", "--run_name", "mine", "--project", "theirs"],
        {},
        {"run_name": "mine", "project": "theirs", "WANDB_PROJECT": None},
    ),
    # TRACKIO_PROJECT, which neither transformers nor trackio reads, is the user's choice too
    (["--report_to", "trackio"], {"TRACKIO_PROJECT": "env"}, {"run_name": "run-7", "project": "env"}),
    # wandb: the project through its own variable, which transformers reads
    (["--report_to", "wandb"], {}, {"run_name": "run-7", "WANDB_PROJECT": "wordle-grpo"}),
    # ... unless the user set it, or named the run through wandb's own variable
    (
        ["--report_to", "wandb"],
        {"WANDB_PROJECT": "team", "WANDB_NAME": "sweep-3"},
        {"run_name": "sweep-3", "WANDB_PROJECT": "team"},
    ),
    # WANDB_NAME is wandb's: another tracker names the run after its directory
    (["--report_to", "trackio"], {"WANDB_NAME": "sweep-3"}, {"run_name": "run-7"}),
    # tensorboard keeps its directory under output_dir; the run is named all the same
    (["--report_to", "tensorboard"], {}, {"run_name": "run-7", "WANDB_PROJECT": None}),
]


@pytest.mark.parametrize(("flags", "env", "expected"), NAMING)
def test_trackers_name_the_run_unless_the_user_did(flags, env, expected, tmp_path, monkeypatch):
    for name in ("WANDB_PROJECT", "WANDB_NAME", "TRACKIO_PROJECT"):
        monkeypatch.setenv(name, "")  # so that monkeypatch restores it, whatever name_the_run sets
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(trackers, "_trackio_runs", lambda project: [])
    resolved = resolve(["--profile", "cpu", "--output_dir", str(tmp_path / "run-7"), *flags])
    trackers.name_the_run(resolved)
    told = {
        "run_name": resolved.training.run_name,
        "project": resolved.training.project,
        "WANDB_PROJECT": os.environ.get("WANDB_PROJECT"),
    }
    assert {key: told[key] for key in expected} == expected


@pytest.mark.parametrize(
    ("flags", "resuming", "warned"),
    [
        ([], False, True),  # a new run would continue the earlier run of its name
        ([], True, False),  # --resume continues its own run: as meant
        (["--run_name", "run-7"], False, False),  # the user chose the name
    ],
)
def test_a_new_trackio_run_named_as_an_earlier_one_is_warned_of(flags, resuming, warned, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(trackers, "_trackio_runs", lambda project: ["run-7"])
    resolved = resolve(["--profile", "cpu", "--output_dir", str(tmp_path / "run-7"), "--report_to", "trackio", *flags])
    trackers.name_the_run(resolved, resuming=resuming)
    assert ("already holds a run named 'run-7'" in caplog.text) == warned


def test_trackio_holds_no_runs_in_a_project_it_never_saw():
    pytest.importorskip("trackio")
    assert trackers._trackio_runs("wordle-grpo-test-no-such-project") == []


# --- the final evaluation ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def results():
    """As evaluate_end orders them, per opening: before, after, then the baselines (6 games each, no model)."""
    secrets = select_secrets(6)
    out = []
    for spec in OPENINGS:
        opening = Opening.parse(spec)
        out += [
            evaluate_player(RandomAllowedPlayer(0), secrets, "model", "before", opening=opening),
            evaluate_player(SolverPlayer(), secrets, "model", "after", opening=opening),
            *evaluate_baselines(secrets, opening=opening),
        ]
    return out


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        (wilson(3, 6), (0.5, wilson(3, 6)["low"], wilson(3, 6)["high"])),  # a rate
        (wilson(0, 0), (None, None, None)),  # nothing observed: left out, not 0
        (mean_ci([3, 4, 5]), (4.0, mean_ci([3, 4, 5])["low"], mean_ci([3, 4, 5])["high"])),  # a mean
        (mean_ci([]), (None, None, None)),  # no game won: no mean guesses
    ],
)
def test_figures_are_a_value_and_its_interval(metric, expected):
    assert figures(metric) == expected


@pytest.mark.parametrize(
    ("spec", "key"),
    [("own", "own"), ("answer", "answer"), ("answer:2", "answer_2"), ("words:CRANE,SLATE", "words_CRANE_SLATE")],
)
def test_an_opening_is_a_plain_key(spec, key):
    assert opening_key(spec) == key


def test_the_scalars_are_the_models_figures_before_and_after_with_intervals(results):
    logs = final_scalars(results)
    after = next(r for r in results if r.label == "after" and r.opening == "answer:2").metrics["win_rate"]
    assert logs["eval_answer_2/after/win_rate"] == after["rate"]
    assert (logs["eval_answer_2/after/win_rate_ci_low"], logs["eval_answer_2/after/win_rate_ci_high"]) == (
        after["low"],
        after["high"],
    )
    # every figure of the model's rows, for each opening; the baselines are in the table only
    for spec in ("own", "answer_2"):
        for player in ("before", "after"):
            assert {f"eval_{spec}/{player}/win_rate", f"eval_{spec}/{player}/contradiction_rate"} <= logs.keys()
    assert not any("solver" in key for key in logs)
    assert "eval_own/before/mean_guesses_won" not in logs  # the floor player never wins: no mean to report
    assert all(isinstance(value, float) for value in logs.values())


def test_the_table_has_a_row_per_player_per_opening(results):
    rows = final_table(results)
    assert [(row[0], row[1]) for row in rows] == [(r.opening, r.label) for r in results]
    assert all(len(row) == len(TABLE_COLUMNS) == 4 + 3 * len(FIGURES) for row in rows)


def tiny_trainer(tmp_path, report_to: str, recorder: TrainerCallback | None = None) -> Trainer:
    args = TrainingArguments(output_dir=str(tmp_path), report_to=report_to, use_cpu=True, disable_tqdm=True)
    return Trainer(model=torch.nn.Linear(1, 1), args=args, callbacks=[recorder] if recorder else None)


class Recorder(TrainerCallback):
    def __init__(self) -> None:
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs))


def test_the_scalars_reach_every_tracker_callback_through_trainer_log(results, tmp_path):
    recorder = Recorder()
    trainer = tiny_trainer(tmp_path, "none", recorder)
    report_to_trackers(trainer, results)
    assert recorder.logs == []  # report_to none, the default: nothing logged, nothing written
    trainer.args.report_to = ["mlflow"]  # a tracker with no table here: the scalars alone, as any callback gets them
    report_to_trackers(trainer, results)
    [logged] = recorder.logs
    assert final_scalars(results).items() <= logged.items()


def test_tensorboard_gets_the_scalars_and_the_table_after_training_closed_its_writer(results, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = tiny_trainer(tmp_path, "tensorboard")
    handler, state, control = trainer.callback_handler, trainer.state, trainer.control
    handler.on_train_begin(trainer.args, state, control)  # opens the writer under output_dir/runs/
    handler.on_train_end(trainer.args, state, control)  # closes it, as before the final evaluation
    report_to_trackers(trainer, results)
    [logdir] = (tmp_path / "runs").iterdir()
    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    [point] = events.Scalars("eval/own/after/win_rate")
    assert point.value == pytest.approx(final_scalars(results)["eval_own/after/win_rate"])
    [text] = events.Tensors(f"{TABLE_KEY}/text_summary")
    assert "| solver |" in text.tensor_proto.string_val[0].decode()
