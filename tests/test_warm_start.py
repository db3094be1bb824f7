"""The supervised warm start (sft_train.py) and GRPO continuing it (grpo_train.py --adapter): the rows and their budget
in Qwen's real tokens, the prompts the trainer and evaluate.py show, the completion-only loss, and the handoff (the
adapter trainable, the reference it is, --resume, the refusals), on the stand-in with Qwen's real tokenizer."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoTokenizer
from trl.data_utils import is_conversational

import grpo_train
import sft_train
from models.loading import load_tokenizer
from settings.config import SFT, resolve
from settings.errors import ConfigError
from tinymodel.stand_in import qwen_tokenizer_files
from training.sft import make_sft_trainer
from training.sft_data import Budget, build_sft_rows, load_sft_dataset, save_sft_dataset
from wordle import completion_text, parse_completion, render_prompt, score_guess, train_secrets
from wordle.game import GameView


@pytest.fixture(scope="module")
def qwen_tokenizer():
    return AutoTokenizer.from_pretrained(qwen_tokenizer_files())


@pytest.fixture(scope="module")
def rows_128(qwen_tokenizer):
    return build_sft_rows(3000, seed=5, tokenizer=qwen_tokenizer, budget=Budget(128))


# --- the rows -----------------------------------------------------------------------------------------------------


def test_replies_fit_the_mps_budget_and_the_rollbacks_in_qwens_tokens(qwen_tokenizer, rows_128):
    rows, stats = rows_128
    tokens = np.array([r["reply_tokens"] for r in rows])
    assert np.mean(tokens <= 90) >= 0.99 and tokens.max() <= 120
    assert stats.reply_tokens["max"] == tokens.max() and stats.dropped == 0
    small, _ = build_sft_rows(1000, seed=5, tokenizer=qwen_tokenizer, budget=Budget(96))
    tokens_96 = np.array([r["reply_tokens"] for r in small])
    assert tokens_96.max() <= 88 and np.mean(tokens_96 <= 67) >= 0.99
    # The smaller budget wrote shorter thinks for the same states, not fewer states.
    assert np.mean([r["level"] for r in small]) > np.mean([r["level"] for r in rows[:1000]])


def test_a_replys_count_is_the_completion_as_the_chat_template_renders_it_up_to_its_end_of_turn(
    qwen_tokenizer, rows_128
):
    rows, _ = rows_128
    end = qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")
    for row in rows[:200]:
        prompt = qwen_tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        whole = qwen_tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
        reply = row["completion"][0]["content"]
        assert whole == f"{prompt}{reply}<|im_end|>\n", "the template changed the canonical reply"
        generated = qwen_tokenizer(reply, add_special_tokens=False)["input_ids"] + [end]
        assert len(generated) == row["reply_tokens"]


def test_rows_are_distinct_states_of_the_sft_secrets_from_every_opening(rows_128):
    rows, stats = rows_128
    secrets = set(train_secrets("sft"))
    assert {r["secret"] for r in rows} <= secrets
    assert set(stats.sources) == {"own", "answer", "allowed", "answer:2", "explored"}
    histories = [tuple(map(tuple, r["past_guess_history"])) for r in rows]
    assert stats.unique_states == len(set(histories)) >= 0.75 * len(rows)
    for row, history in zip(rows, histories, strict=True):
        assert all(score_guess(g, row["secret"]) == p for g, p in history)
        assert parse_completion(row["completion"][0]["content"]) == row["guess"]


def test_the_prompt_is_what_the_trainer_and_evaluate_show_at_that_turn(rows_128):
    rows, _ = rows_128
    for row in rows[:300]:
        history = tuple(map(tuple, row["past_guess_history"]))
        assert row["prompt"] == render_prompt(history) == GameView(history, len(history) + 1).prompt


def test_the_dataset_directory_loads_with_datasets_and_carries_a_card(tmp_path, rows_128):
    rows, stats = rows_128
    folder = save_sft_dataset(rows[:100], stats, tmp_path / "rows")
    loaded = datasets.load_dataset(str(folder), split="train")
    assert loaded.to_list() == rows[:100]
    assert is_conversational(loaded[0]) and {"prompt", "completion"} <= set(loaded.column_names)
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nconfigs:") and "sft" in card and f"{stats.unique_states} distinct" in card
    assert len(load_sft_dataset(folder)) == 100


BAD_ROWS = [
    ("a completion that is no reply", {"completion": [{"role": "assistant", "content": "CRANE"}]}, "row 2: the"),
    (
        "a guess that is no word",
        {"completion": [{"role": "assistant", "content": "<think>\n</think>\n\n<guess>QXZJV</guess>"}]},
        "row 2",
    ),
    ("a prompt that is no chat", {"prompt": "Guess 1 of 6."}, "row 2: prompt must be a list of chat messages"),
]


@pytest.mark.parametrize(("what", "change", "expected"), BAD_ROWS, ids=[b[0] for b in BAD_ROWS])
def test_a_malformed_supervised_row_is_named(tmp_path, rows_128, what, change, expected):
    rows, stats = rows_128
    bad = [dict(r) for r in rows[:3]]
    bad[1].update(change)
    if what == "a prompt that is no chat":  # parquet wants one type per column: a JSON Lines file holds any
        path = tmp_path / "rows.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in bad))
    else:
        path = save_sft_dataset(bad, stats, tmp_path / "rows")
    with pytest.raises(ValueError, match=expected):
        load_sft_dataset(path)


# --- the supervised stage -----------------------------------------------------------------------------------------

QUICK_SFT = ["--profile", "cpu", "--train_rows", "16", "--per_device_train_batch_size", "2"]
QUICK_SFT += ["--gradient_accumulation_steps", "1", "--save_steps", "100", "--disable_tqdm", "true", "--seed", "3"]


def test_the_labels_are_the_reply_and_the_end_of_turn_alone(qwen_dir, rows_128, tmp_path):
    resolved = resolve([*QUICK_SFT, "--model", str(qwen_dir), "--output_dir", str(tmp_path)], stage=SFT)
    tokenizer = load_tokenizer(str(qwen_dir), resolved)
    rows, _ = rows_128
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(qwen_dir, dtype=torch.float32)
    trainer = make_sft_trainer(resolved, model, tokenizer, datasets.Dataset.from_list(rows[:4]), [])
    batch = next(iter(trainer.get_train_dataloader()))
    by_reply = {r["completion"][0]["content"]: r for r in rows[:4]}
    for ids, labels in zip(batch["input_ids"], batch["labels"], strict=True):
        taught = tokenizer.decode(labels[labels != -100])
        reply = taught.removesuffix("<|im_end|>\n")
        assert reply in by_reply and taught == f"{reply}<|im_end|>\n"  # the template's newline after it, as TRL does
        # The context is exactly the prompt the trainer and evaluate.py render.
        prompt = tokenizer.apply_chat_template(
            by_reply[reply]["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        shown = ids[ids != tokenizer.pad_token_id][: len(prompt)].tolist()
        assert shown == list(prompt)


@pytest.fixture(scope="module")
def supervised(qwen_dir, tmp_path_factory):
    """A supervised adapter of the stand-in, two steps of sft_train.py."""
    out = tmp_path_factory.mktemp("sft") / "adapter"
    argv = [*QUICK_SFT, "--model", str(qwen_dir), "--max_steps", "2", "--output_dir", str(out)]
    trainer = sft_train.train(resolve([*argv, "--game_eval_steps", "2", "--game_eval_games", "1"], stage=SFT))
    assert trainer.state.global_step == 2
    checks = [h for h in trainer.state.log_history if "val/win_rate" in h]
    assert [h["step"] for h in checks] == [0, 2], "the validation games were not played at the start and step 2"
    return out


def test_sft_train_saves_the_adapter_its_tokenizer_rows_card_and_the_bases_fingerprint(supervised):
    assert (supervised / "adapter_model.safetensors").is_file() and (supervised / "tokenizer_config.json").is_file()
    config = yaml.safe_load((supervised / "wordle_grpo_config.yaml").read_text())
    assert config["stage"] == "sft" and config["model"]["fingerprint"]
    assert len(load_sft_dataset(supervised / "sft_data")) == 16
    card = (supervised / "README.md").read_text()
    assert "SFTTrainer" in card and "--adapter" in card
    lora = load_file(supervised / "adapter_model.safetensors")
    assert any(t.abs().sum() > 0 for n, t in lora.items() if "lora_B" in n), "two steps left the LoRA at zero"


QUICK_GRPO = ["--profile", "cpu", "--rollout", "turn", "--train_rows", "4", "--num_generations", "2"]
QUICK_GRPO += ["--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--max-completion", "24"]
QUICK_GRPO += ["--skip_eval", "true", "--disable_tqdm", "true", "--seed", "3", "--temperature", "1.0"]


def varied_reward(completions, **kwargs) -> list[float]:
    """Any two different replies score apart: on random weights every real reward is its floor for every reply, so
    every advantage would be 0 and no step would move the adapter."""
    return [int(hashlib.md5(completion_text(c).encode()).hexdigest()[:6], 16) / 16**6 for c in completions]


@pytest.fixture
def a_gradient(monkeypatch):
    real = grpo_train.get_reward_funcs
    monkeypatch.setattr(grpo_train, "get_reward_funcs", lambda names: [varied_reward, *real(names)[1:]])


def lora_of(model, adapter: str = "default") -> dict[str, torch.Tensor]:
    return {
        n.replace(f".{adapter}.", "."): p.detach().clone() for n, p in model.named_parameters() if f".{adapter}." in n
    }


def test_grpo_continues_the_adapter_trainable_with_it_as_the_reference(qwen_dir, supervised, tmp_path, a_gradient):
    out = tmp_path / "grpo"
    argv = [*QUICK_GRPO, "--model", str(qwen_dir), "--adapter", str(supervised), "--beta", "0.04"]
    trainer = grpo_train.train(resolve([*argv, "--max_steps", "1", "--save_steps", "1", "--output_dir", str(out)]))
    model = trainer.model
    assert trainer.processing_class.name_or_path == str(supervised)  # the tokenizer the supervised stage saved
    start = load_file(supervised / "adapter_model.safetensors")
    ref, trained = lora_of(model, "ref"), lora_of(model)
    assert set(ref) == set(trained) and ref, "TRL made no reference copy of the adapter"
    saved = {k.replace("base_model.model.", "").replace(".weight", ""): v for k, v in start.items()}
    for name, value in ref.items():  # the reference is the supervised adapter, exactly
        key = name.replace("base_model.model.", "").replace(".weight", "")
        torch.testing.assert_close(value, saved[key], rtol=0, atol=0)
    assert all(p.requires_grad for n, p in model.named_parameters() if ".default." in n)
    assert not any(p.requires_grad for n, p in model.named_parameters() if ".ref." in n or "lora" not in n)
    assert any(not torch.equal(trained[n], ref[n]) for n in ref), "the step left the adapter as it was"
    log = next(h for h in trainer.state.log_history if "kl" in h)
    assert log["kl"] == pytest.approx(0.0, abs=1e-6)  # step 1: the policy is its reference
    for folder in (out, out / "checkpoint-1"):
        assert not (folder / "ref").exists(), "a saved adapter holds TRL's reference copy"
    assert yaml.safe_load((out / "wordle_grpo_config.yaml").read_text())["lora"]["continues"] == str(supervised)

    # --resume: the trained adapter comes from the checkpoint, the reference again from the supervised adapter.
    resumed = grpo_train.train(
        resolve([*argv, "--max_steps", "2", "--save_steps", "1", "--output_dir", str(out), "--resume"])
    )
    assert resumed.state.global_step == 2
    checkpoint = load_file(out / "checkpoint-1" / "adapter_model.safetensors")
    assert not any(torch.equal(checkpoint[k], saved_v) for k, saved_v in start.items() if "lora_B" in k)
    for name, value in lora_of(resumed.model, "ref").items():
        key = name.replace("base_model.model.", "").replace(".weight", "")
        torch.testing.assert_close(value, saved[key], rtol=0, atol=0)


def test_grpo_continues_the_adapter_on_a_4bit_base(qwen_dir, supervised, tmp_path, a_gradient):
    argv = [*QUICK_GRPO, "--model", str(qwen_dir), "--adapter", str(supervised), "--load_in_4bit", "true"]
    trainer = grpo_train.train(resolve([*argv, "--max_steps", "1", "--output_dir", str(tmp_path / "q")]))
    start = load_file(supervised / "adapter_model.safetensors")
    trained = {n: p for n, p in trainer.model.named_parameters() if "lora_B.default" in n}
    assert trained and type(trainer.model.get_base_model().model.layers[0].mlp.up_proj.base_layer).__name__ == (
        "Linear4bit"
    )
    moved = [n for n, p in trained.items() if not torch.equal(p.float(), start[n.replace(".default", "")].float())]
    assert moved, "the 4-bit run left the adapter as it was"


# --- what the handoff refuses -------------------------------------------------------------------------------------


def test_the_adapters_lora_wins_over_the_profile_and_a_contradicting_flag_is_refused(supervised, qwen_dir):
    base = ["--profile", "cpu", "--model", str(qwen_dir), "--adapter", str(supervised)]
    saved = json.loads((supervised / "adapter_config.json").read_text())
    # The profile's own LoRA settings (r 16 here) give way to the adapter's, with a note: no contradiction.
    resolved = resolve([*base, "--lora_r", str(saved["r"])])
    assert resolved.model.lora_r == saved["r"] and resolved.script.secrets == "rl"
    assert any(note.startswith("--adapter") for note in resolved.notes)
    with pytest.raises(ConfigError, match=rf"--lora_r 4 contradicts the adapter in .* \(r {saved['r']}\)"):
        resolve([*base, "--lora_r", "4"])
    with pytest.raises(ConfigError, match="--lora_target_modules q_proj contradicts"):
        resolve([*base, "--lora_target_modules", "q_proj"])
    with pytest.raises(ConfigError, match="--use_peft false trains the whole model"):
        resolve([*base, "--use_peft", "false"])


def test_an_adapter_of_another_base_is_refused_before_anything_loads(supervised, qwen_dir, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(qwen_dir, other)
    config = json.loads((other / "config.json").read_text())
    config["rope_theta"] = 5000.0  # the same shapes: PEFT would load the adapter onto it in silence
    (other / "config.json").write_text(json.dumps(config))
    argv = [
        "--profile",
        "cpu",
        "--model",
        str(other),
        "--adapter",
        str(supervised),
        "--output_dir",
        str(tmp_path / "o"),
    ]
    assert grpo_train.main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"error: the adapter in {supervised} was trained on {qwen_dir} (fingerprint ")
    assert not (tmp_path / "o").exists()


def test_the_embedded_model_is_refused_by_the_supervised_stage(capsys):
    assert sft_train.main(["--profile", "cpu", "--dry-run"]) == 2
    assert "the embedded model has its own supervised build" in capsys.readouterr().err


def test_a_grpo_only_option_is_unknown_to_the_supervised_stage(capsys):
    assert sft_train.main(["--profile", "mps", "--num_generations", "4", "--dry-run"]) == 2
    assert "unknown option '--num_generations'" in capsys.readouterr().err


def test_the_supervised_dry_run_shows_its_own_settings_and_a_3b_estimate(capsys):
    assert sft_train.main(["--profile", "mps", "--dry-run"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["stage"] == "sft" and out["schedule"]["steps"] == 200 and out["schedule"]["learning_rate"] == 2e-4
    assert out["batch"]["rows_per_step"] == 16 and out["data"]["reply_budget"].startswith("128 tokens")
    assert out["memory_estimate"]["peak_gib"] > 10  # a 3B in fp32
    assert "kv cache" not in out["memory_estimate"]["parts_gib"]
    assert out["next"] == "python grpo_train.py --profile mps --adapter outputs/mps-sft"
    assert out["expected_time"] == {
        "steps": 200,
        "unknown": "mps is absent here: run --dry-run on the machine that trains",
    }


def test_the_supervised_dry_run_on_this_cpu_gives_a_time_from_the_steps_arithmetic(qwen_dir, capsys):
    assert sft_train.main(["--profile", "cpu", "--model", str(qwen_dir), "--dry-run"]) == 0
    expected = yaml.safe_load(capsys.readouterr().out)["expected_time"]
    assert expected["steps"] == 100 and float(expected["at_least_per_step"].removesuffix(" s")) > 0
    assert "16 rows of" in expected["assumes"] and "TFLOP/s" in expected["assumes"]


def test_full_fine_tuning_in_the_supervised_stage_saves_a_whole_model(qwen_dir, tmp_path):
    argv = [*QUICK_SFT, "--model", str(qwen_dir), "--max_steps", "1", "--use_peft", "false"]
    sft_train.train(resolve([*argv, "--output_dir", str(tmp_path / "full")], stage=SFT))
    assert (tmp_path / "full" / "model.safetensors").is_file()
    assert not (tmp_path / "full" / "adapter_config.json").exists()


def test_the_dry_run_with_an_adapter_says_how_many_groups_carry_signal(qwen_dir, supervised, capsys):
    argv = ["--profile", "cpu", "--model", str(qwen_dir), "--adapter", str(supervised), "--dry-run"]
    assert grpo_train.main([*argv, "--max-completion", "16", "--num_generations", "2"]) == 0
    warm = yaml.safe_load(capsys.readouterr().out)["warm_start"]
    assert warm["states"] == 8 and warm["num_generations"] == 2
    assert 0 <= warm["frac_reward_zero_std"] <= 1 and warm["groups_with_signal"].endswith("of 8")


def test_trls_own_sft_command_trains_on_the_rows_as_they_are(qwen_dir, rows_128, tmp_path):
    rows, stats = rows_128
    folder = save_sft_dataset(rows[:8], stats, tmp_path / "rows")
    cli = Path(sys.executable).with_name("trl")
    args = [str(cli), "sft", "--model_name_or_path", str(qwen_dir), "--dataset_name", str(folder)]
    args += ["--output_dir", str(tmp_path / "out"), "--max_steps", "1", "--per_device_train_batch_size", "2"]
    args += ["--use_cpu", "true", "--bf16", "false", "--report_to", "none", "--save_strategy", "no"]
    done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file() or (
        tmp_path / "out" / "model.safetensors"
    ).is_file()
