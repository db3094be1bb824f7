"""What a run leaves for a reader: the adapter's model card and portable adapter_config.json, and the
evaluation plots (labelled axes, one colour per player) with the training logs they read."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from matplotlib.colors import to_rgba
from peft import AutoPeftModelForCausalLM, LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

import evaluate as evaluate_cli
from evaluation.metrics import wilson
from evaluation.plots import (
    PLAYER_COLOURS,
    by_turn_figure,
    guess_histogram_figure,
    learning_curve_figure,
    load_log_history,
    plot_guess_histogram,
    plot_reward_curves,
    reward_curves_figure,
)
from evaluation.report import PlayerResult
from rewards import DEFAULT_WEIGHTS, REWARD_RANGES
from settings.errors import ConfigError
from tinymodel import MODEL_DIR
from training.card import make_adapter_config_portable, write_model_card

HUB_ID = "Qwen/Qwen2.5-3B-Instruct"
COMMAND = "python grpo_train.py --profile cpu --output_dir runs/a --learning_rate 5e-4"
TABLE = "| player | win rate |\n|---|---|\n| before | 39.7% |\n| after | 41.0% |"


# --- the adapter --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_adapter(tmp_path_factory) -> Path:
    """A LoRA adapter on the shipped tiny model, saved as grpo_train saves one (untrained: only the
    files matter here), with the tokenizer beside it."""
    out = tmp_path_factory.mktemp("adapter") / "out"
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(MODEL_DIR),
        LoraConfig(r=2, target_modules=["v_proj"], task_type="CAUSAL_LM"),
    )
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(MODEL_DIR).save_pretrained(out)
    return out


@pytest.fixture
def adapter(saved_adapter, tmp_path, monkeypatch) -> Path:
    """A fresh copy of the adapter at ``runs/a`` under the working directory, as a user's relative
    --output_dir; a copy of the tiny model at ``models/base`` stands for a local base directory."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(MODEL_DIR, "models/base")
    return Path(shutil.copytree(saved_adapter, "runs/a"))


def base_name(adapter: Path) -> str:
    return json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]


def test_peft_records_the_absolute_path_that_needs_rewriting(adapter):
    assert base_name(adapter) == str(MODEL_DIR) and Path(base_name(adapter)).is_absolute()


@pytest.mark.parametrize(
    "base_model",
    [
        HUB_ID,  # a hub id loads anywhere
        "tiny",  # the embedded model: the card says where it lives
        "models/base",  # a local directory, relative as the user typed it, not resolved
    ],
)
def test_adapter_config_names_the_base_as_the_user_gave_it_and_still_loads(adapter, base_model):
    make_adapter_config_portable(adapter, base_model)
    assert base_name(adapter) == base_model
    # PeftModel.from_pretrained never reads the field: the rewrite changes nothing for it.
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(MODEL_DIR), adapter)
    assert any("lora_A" in name for name, _ in model.named_parameters())


def test_auto_peft_model_finds_a_local_base_by_its_relative_path(adapter):
    make_adapter_config_portable(adapter, "models/base")
    model = AutoPeftModelForCausalLM.from_pretrained(adapter)
    assert isinstance(model, PeftModel)


# --- the model card -----------------------------------------------------------------------------------


def card(adapter: Path, base_model: str, table: str | None = TABLE) -> str:
    path = write_model_card(
        adapter,
        base_model=base_model,
        profile="cpu",
        command=COMMAND,
        rewards=DEFAULT_WEIGHTS,
        steps=2000,
        eval_markdown_table=table,
    )
    assert path == adapter / "README.md"
    return path.read_text()


def front_matter(text: str) -> dict:
    head, _ = text.removeprefix("---\n").split("\n---\n", 1)
    return yaml.safe_load(head)


@pytest.mark.parametrize(
    ("base_model", "hub_base", "base_line", "evaluate_line"),
    [
        (HUB_ID, HUB_ID, f'BASE = "{HUB_ID}"', f"python evaluate.py --model {HUB_ID} --adapter runs/a"),
        ("tiny", None, "BASE = model_dir()", "python evaluate.py --model tiny --adapter runs/a"),
        ("models/base", None, 'BASE = "models/base"', "python evaluate.py --model models/base --adapter runs/a"),
    ],
)
def test_card_says_what_made_the_adapter_and_how_to_load_it(adapter, base_model, hub_base, base_line, evaluate_line):
    text = card(adapter, base_model)
    meta = front_matter(text)
    assert meta.get("base_model") == hub_base  # the hub rejects a base_model that is not a hub id
    assert meta["library_name"] == "peft"
    assert {"grpo", "trl", "wordle", "lora"} <= set(meta["tags"])
    assert "[None]" not in text and "huggingface.co/None" not in text  # TRL's card is gone
    assert f"```bash\n{COMMAND}\n```" in text
    assert "Profile `cpu`" in text and "2000 GRPO steps" in text
    for name, weight in DEFAULT_WEIGHTS.items():
        low, high = REWARD_RANGES[name]
        assert f"| `{name}` | {weight:g} | [{low:g}, {high:g}] |" in text
    assert TABLE in text
    assert base_line in text and evaluate_line in text
    assert 'OUT = "runs/a"' in text
    assert "PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), OUT)" in text


def test_card_of_the_embedded_model_says_where_it_comes_from(adapter):
    text = card(adapter, "tiny")
    assert "wordle-grpo's embedded model" in text and "`tinymodel/model/`" in text and "`--model tiny`" in text


def test_card_without_an_evaluation_says_it_was_skipped(adapter):
    text = card(adapter, "tiny", table=None)
    assert "evaluation was skipped" in text and "| player |" not in text


def test_card_replaces_trls_card_and_its_snippet_runs(adapter):
    (adapter / "README.md").write_text("This model is a fine-tuned version of [None](https://huggingface.co/None).")
    make_adapter_config_portable(adapter, "tiny")
    [snippet] = re.findall(r"```python\n(.*?)```", card(adapter, "tiny"), re.DOTALL)
    check = "\nassert isinstance(model, PeftModel), type(model)\nassert tokenizer.chat_template, type(tokenizer)"
    # Pasted as is into a fresh Python, in the directory the run was started from.
    run = subprocess.run([sys.executable, "-c", snippet + check], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-2000:]


# --- the plots ----------------------------------------------------------------------------------------


def result(label: str, kind: str = "model", won: int = 5, games: int = 10) -> PlayerResult:
    distribution = {"1": 0, "2": 1, "3": 2, "4": 2, "5": 0, "6": 0, "fail": games - won}
    metrics = {"games": games, "distribution": distribution, "win_rate": {"rate": won / games}}
    return PlayerResult(label, kind, metrics)


PLAYERS = [
    result("before"),
    result("after", won=7),
    result("after (constrained: allowed words)", "constrained"),
    result("solver", "baseline", won=10),
    result("random candidate", "baseline", won=9),
    result("random allowed", "baseline", won=0),
]


def bar_styles(results) -> dict[str, tuple]:
    [ax] = guess_histogram_figure(results).axes
    return {c.get_label(): (c.patches[0].get_facecolor(), c.patches[0].get_edgecolor()) for c in ax.containers}


def test_learning_curve_draws_validation_from_both_openings_and_nothing_held_out():
    history = [
        {
            "step": step,
            "val/win_rate": won,
            "val/contradiction_rate": 0.3,
            "val_opening/win_rate": won - 0.1,
            "val_opening/contradiction_rate": 0.4,
        }
        for step, won in ((0, 0.3), (10, 0.5))
    ]
    [ax] = learning_curve_figure(history).axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "validation, its own opening: won",
        "validation, a random answer first: won",
        "its own opening: guesses contradicting feedback",
        "a random answer first: contradicting",
    ]
    assert list(ax.lines[1].get_ydata()) == pytest.approx([0.2, 0.4])  # the random opening's wins
    assert learning_curve_figure([{"step": 1, "loss": 0.1}]) is None  # no periodic check: no curve
    # Guesses per win, beside, where the check logged them from both openings.
    history = [h | {"val/guesses": g, "val_opening/guesses": g + 0.2} for h, g in zip(history, (4.0, 3.7), strict=True)]
    _, guesses = learning_curve_figure(history).axes
    assert [list(line.get_ydata()) for line in guesses.lines] == [pytest.approx([4.0, 3.7]), pytest.approx([4.2, 3.9])]
    assert [t.get_text() for t in guesses.get_legend().get_texts()] == ["its own opening", "a random answer first"]


def test_by_turn_figure_draws_model_rows_with_intervals_and_skips_baselines():
    turns = {str(k): {key: wilson(k - 2, 10) for key in ("inconsistent", "repeat")} for k in range(2, 7)}
    rows = [PlayerResult("after", "model", {"by_turn": turns}), PlayerResult("solver", "baseline", {"by_turn": turns})]
    [ax] = by_turn_figure(rows).axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["after: inconsistent", "after: repeat"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "3", "4", "5", "6"]
    empty = {k: {key: wilson(0, 0) for key in ("inconsistent", "repeat")} for k in turns}  # no valid guess
    assert by_turn_figure([PlayerResult("after", "model", {"by_turn": empty})]).axes[0].get_legend() is None


def test_guess_histogram_is_labelled_and_saved(tmp_path):
    [ax] = guess_histogram_figure(PLAYERS).axes
    assert ax.get_xlabel() == "guesses to win (fail = not solved in 6)"
    assert ax.get_ylabel() == "share of games"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "3", "4", "5", "6", "fail"]
    assert [t.get_text() for t in ax.get_legend().get_texts()][1] == "after: 70.0% won"
    path = plot_guess_histogram(PLAYERS, tmp_path / "eval" / "guesses.png")
    assert path == tmp_path / "eval" / "guesses.png" and path.read_bytes().startswith(b"\x89PNG")


def test_each_player_keeps_its_colour_whatever_the_order():
    forward, backward = bar_styles(PLAYERS), bar_styles(PLAYERS[::-1])
    assert forward == backward
    for label in ("before", "after", "solver", "random candidate", "random allowed"):
        assert forward[label][0] == to_rgba(PLAYER_COLOURS[label])
    # The constrained row: hatched in its model's colour, so it reads as that model with help.
    assert forward["after (constrained: allowed words)"][1] == to_rgba(PLAYER_COLOURS["after"])
    # evaluate.py's rows are the same players as grpo_train's: the same colours.
    evaluated = bar_styles(
        [
            result("model"),
            result("model + adapter"),
            result("model, constrained to candidates words", "constrained"),  # play.py's default name
            result("solver", "baseline"),
        ]
    )
    assert evaluated["model"] == forward["before"] and evaluated["model + adapter"] == forward["after"]
    assert evaluated["model, constrained to candidates words"][1] == to_rgba(PLAYER_COLOURS["model"])
    assert evaluated["solver"] == forward["solver"]


def test_an_unnamed_player_gets_the_same_colour_every_time():
    assert bar_styles([result("my label"), result("solver")]) == bar_styles([result("solver"), result("my label")])


def log_history(steps: int) -> list[dict]:
    rewards = {f"rewards/{name}/mean": 0.5 for name in DEFAULT_WEIGHTS}
    logs = [{"step": s, "loss": 0.0, **rewards, "reward": 2.0} for s in range(1, steps + 1)]
    return [*logs, {"step": steps, "train_runtime": 1.0}]  # the trainer's closing summary


@pytest.mark.parametrize("steps", [3, 120])  # raw points only, and raw plus a moving mean
def test_reward_panels_are_labelled_with_each_rewards_range(steps):
    axes = [ax for ax in reward_curves_figure(log_history(steps), DEFAULT_WEIGHTS).axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == [*DEFAULT_WEIGHTS, "total (weighted sum)"]
    for ax in axes:
        assert ax.get_xlabel() == "GRPO step"
    for ax, name in zip(axes, DEFAULT_WEIGHTS):
        low, high = REWARD_RANGES[name]
        assert ax.get_ylabel() == f"mean over the step, range [{low:g}, {high:g}]"
        assert ax.get_ylim()[0] < low and ax.get_ylim()[1] > high
    assert axes[-1].get_ylabel() == "mean over the step, range [-0.25, 4.1]"  # 0.1 * -2.5 .. 1 + 0.1 + 1 + 2


def test_the_total_has_no_range_without_the_runs_weights(tmp_path):
    axes = reward_curves_figure(log_history(3)).axes
    assert axes[4].get_ylabel() == "mean over the step"
    assert plot_reward_curves(log_history(3), tmp_path / "rewards.png") == tmp_path / "rewards.png"
    assert plot_reward_curves([{"step": 1, "loss": 0.0}], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


# --- training logs ------------------------------------------------------------------------------------


@pytest.fixture
def logs(tmp_path) -> dict[str, Path]:
    """The three forms a training log comes in, each holding the same history."""
    history = log_history(3)
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "log_history.json").write_text(json.dumps(history, indent=1))  # what grpo_train writes
    (tmp_path / "checkpoint-3").mkdir()
    state = {"global_step": 3, "log_history": history}
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text(json.dumps(state))
    return {
        "grpo_train's log_history.json": tmp_path / "eval" / "log_history.json",
        "trainer_state.json": tmp_path / "checkpoint-3" / "trainer_state.json",
        "a checkpoint directory": tmp_path / "checkpoint-3",
    }


def test_load_log_history_reads_every_form(logs):
    for form, path in logs.items():
        assert load_log_history(path) == log_history(3), form
        assert load_log_history(str(path)) == log_history(3), form
    assert load_log_history(log_history(3)) == log_history(3)  # trainer.state.log_history itself


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "it does not exist"),
        (b"step,reward\n1,2.0\n", "not JSON"),  # a CSV export
        (b"\x89PNG\r\n\x1a\n\x00\xff", "not text"),  # the plot instead of the log
        (b'{"global_step": 500}', "an object without a log_history list"),  # a trainer_state.json cut down
        (b"[1, 2, 3]", "not a list of log objects"),
        (b'{"log_history": [1]}', "not a list of log objects"),
    ],
)
def test_load_log_history_refuses_other_files_in_one_line(tmp_path, content, why):
    path = tmp_path / "log.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError, match="neither a trainer_state.json") as raised:
        load_log_history(path)
    message = str(raised.value)
    assert "\n" not in message and str(path) in message and why in message


def test_load_log_history_refuses_a_directory_without_trainer_state(tmp_path):
    with pytest.raises(ValueError, match=r"trainer_state.json is neither .*: it does not exist"):
        load_log_history(tmp_path)


def test_evaluate_accepts_each_training_log_and_refuses_a_bad_one(logs, tmp_path):
    for form, path in logs.items():
        assert evaluate_cli.parse(["--train_log", str(path)]).train_log == str(path), form
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"^--train_log .*bad.json is neither .*: an object without"):
        evaluate_cli.parse(["--train_log", str(tmp_path / "bad.json")])
