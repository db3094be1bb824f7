"""The README says what is true: its counts are the code's, its sample progress line is the trainer's, its
layout names every package, and it stays short and free of the research log's experiment ids."""

from __future__ import annotations

import math
import re
from pathlib import Path

from safetensors import safe_open

import tinymodel
from training.trainer import format_log
from wordle import answers, eval_secrets, train_secrets

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
TEXT = " ".join(README.split())  # a phrase may wrap across lines


# Experiment ids, recipe and issue numbers belong to the research log and git history.
IDS = re.compile(r"\be\d{1,3}\b|\brecipes? \d+|\bissues? #?\d+|\bseed 0\d\d\b", flags=re.IGNORECASE)


def test_the_readme_is_short_and_plain():
    assert len(README.splitlines()) <= 250
    assert not IDS.findall(README)


def test_the_profiles_cite_no_experiment_ids():
    for profile in sorted((ROOT / "profiles").glob("*.yaml")):
        assert not IDS.findall(profile.read_text()), profile.name


def test_the_readmes_counts_are_the_codes():
    tensors = safe_open(str(tinymodel.model_dir() / "model.safetensors"), "pt")
    parameters = sum(math.prod(tensors.get_slice(name).get_shape()) for name in tensors.keys())  # noqa: SIM118 (a safetensors handle is not iterable)
    claims = {
        f"among the {len(answers())} answers": True,
        f"game states of the {len(train_secrets('all'))} training secrets": True,
        f"never the {len(eval_secrets())} held-out ones nor the {len(train_secrets('val'))} validation": True,
        f"a {parameters / 1e6:.1f}M-parameter Qwen2": True,
        f"the {len(eval_secrets())} held-out secrets (`--split val`: the {len(train_secrets('val'))}": True,
    }
    assert {claim: claim in TEXT for claim in claims} == claims


def test_the_sample_progress_line_has_the_trainers_fields_in_its_order():
    sample = re.search(r"`(step \d+/\d+ \| reward .*?)`", README)
    assert sample, "the README shows a progress line from a run"
    logs = {
        "reward": 2.0,
        "reward_std": 1.0,
        **{f"rewards/{name}_reward/mean": 0.5 for name in ("format", "feedback", "info_gain", "win", "game")},
        "completions/mean_length": 11.0,
        "completions/clipped_ratio": 0.0,
        "game/win_rate": 0.8,
        "game/guesses": 4.0,
        "game/invalid_rate": 0.0,
        "game/contradiction_rate": 0.2,
        "step_time": 1.0,
        **{f"time/{part}": 0.5 for part in ("generation", "scoring", "update")},
        "peak_memory_mb": 800.0,
    }

    def words(line: str) -> list[str]:  # the labels, without the figures a run fills in
        return re.sub(r"[-\d.]+|±", " ", line).split()

    assert words(sample.group(1)) == words(format_log(logs, 100, 100))


def test_the_layout_names_every_package_and_entry_script():
    layout = README[README.index("## Layout") :]
    packages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert all(f"\n{name}/" in layout for name in packages), packages
    assert "grpo_train.py" in layout and "evaluate.py" in layout
