"""The path every real user takes, offline, for two tokenizer families, trained, evaluated, merged and
quantized exactly as a hub model would be:

- ``qwen``: a Qwen2 beside Qwen's real tokenizer (byte-level BPE, a chat template with tool support,
  eos <|im_end|>, a 151,936-row output layer);
- ``mistral``: a Mistral beside Mistral-7B v0.1's real SentencePiece model (a leading space is "▁",
  byte fallback, eos </s>) and that model's first instruct template, which refuses a system message.
"""

from __future__ import annotations

import contextlib
import json
import shutil

import bitsandbytes as bnb
import pytest
import torch
import yaml
from conftest import MISTRAL_V01_TEMPLATE
from jinja2.exceptions import TemplateError
from transformers import AutoModelForCausalLM, AutoTokenizer

import evaluate as evaluate_cli
import grpo_train
import tinymodel
from evaluation.report import read_json
from models.loading import fold_system_if_refused, folds_system, load_tokenizer
from models.memory import QWEN2_5_3B
from rewards import TURN_REWARDS
from settings.config import resolve
from settings.errors import ConfigError
from wordle import SYSTEM_PROMPT, render_prompt
from wordle.prompts import render_user_message

FAMILIES = {"qwen": "<|im_end|>", "mistral": "</s>"}  # each fixture's eos


@pytest.fixture(params=list(FAMILIES))
def hub_dir(request):
    """Each tokenizer family's read-only model directory, in turn."""
    return request.getfixturevalue(f"{request.param}_dir")


def family(path) -> str:
    return "mistral" if "mistral" in str(path) else "qwen"


def tokenizer_of(path):
    return load_tokenizer(str(path), resolve(["--profile", "cpu", "--model", str(path), "--dry-run"]))


# One step of 4 completions, 2 evaluation games before and after: the whole path in seconds.
FAST = [
    "--profile",
    "cpu",
    "--train_rows",
    "8",
    "--per_device_train_batch_size",
    "4",
    "--num_generations",
    "4",
    "--max_steps",
    "1",
    "--save_steps",
    "1",
    "--disable_tqdm",
    "true",
    "--eval_games",
    "2",
    "--seed",
    "5",
]


def trained_one_step(trainer) -> bool:
    # A random model's replies all fail alike, so every advantage is 0 and LoRA cannot move: the
    # step itself is what is checked here (tests/test_train.py checks that LoRA learns, on tiny).
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return trainer.state.global_step == 1 and len(logs) == 1 and "rewards/format_reward/mean" in logs[0]


# --- prompts and replies with the real tokenizer ----------------------------------------------------

HISTORY = [("SOARE", "BBYBB"), ("CLINT", "BBYBG"), ("DIGIT", "BYBBG"), ("PUKKA", "BBBBB"), ("WHIPT", "BBGBG")]
REPLIES = [
    "<think></think><guess>CRANE</guess>",
    "<think>S, O, R, A and E are out, so I try five new letters.</think><guess>CLINT</guess>",
    (
        "<think>S, O, R, A and E are out and T is fifth. I is in the word but not third, so I try "
        "letters I have not used yet, with I first.</think><guess>IDIOT</guess>"
    ),
]
# Tokens of the turn-1 and turn-6 prompts and of each reply (without eos), per family: what a profile's
# max_prompt_length and max_completion_length must hold. SentencePiece spends three byte tokens on ✓.
TOKENS = {
    "qwen": {"prompt": [(1, 122), (6, 219)], "replies": [10, 29, 49]},
    "mistral": {"prompt": [(1, 134), (6, 240)], "replies": [15, 33, 54]},
}


def test_prompt_and_reply_token_counts(hub_dir):
    tokenizer = tokenizer_of(hub_dir)
    counts = TOKENS[family(hub_dir)]
    for turn, expected in counts["prompt"]:
        ids = tokenizer.apply_chat_template(
            render_prompt(HISTORY[: turn - 1]), add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert len(ids) == expected, (turn, len(ids))
    assert [len(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in REPLIES] == counts["replies"]


def test_the_parser_and_every_reward_score_what_the_tokenizer_decodes(hub_dir):
    """A reply goes through the tokenizer (tokens in training, text for the rewards): every reward scores
    the decoded text as it scores the text, for honest replies and every hack."""
    from test_rewards import HACKS, reply  # tests/ is on sys.path under pytest

    tokenizer = tokenizer_of(hub_dir)
    history, secret = [["CRANE", "BYBYB"]], "ROBIN"
    texts = [reply("ROBIN"), reply("SHIRT", "R is second or later; C, A, E are out"), *HACKS.values()]
    decoded = [tokenizer.decode(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert decoded == texts
    for name, fn in TURN_REWARDS.items():
        kwargs = {"past_guess_history": [history] * len(texts), "secret": [secret] * len(texts)}
        assert fn(decoded, **kwargs) == fn(texts, **kwargs), name


# Gemma 1 and 2's template, as shipped: a system message raises.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)


@pytest.mark.parametrize(
    ("template", "folded"),
    [
        (GEMMA_TEMPLATE, True),
        (MISTRAL_V01_TEMPLATE, True),
        ({"default": GEMMA_TEMPLATE, "tool_use": GEMMA_TEMPLATE}, True),  # named templates: each folds
        (None, False),  # the embedded model's: it takes a system message and leaves it out, by design
    ],
)
def test_templates_that_refuse_a_system_message_get_the_rules_in_the_first_user_message(template, folded):
    tokenizer = AutoTokenizer.from_pretrained(tinymodel.model_dir())
    own = tokenizer.chat_template
    if template is not None:
        tokenizer.chat_template = template
    with pytest.raises(TemplateError) if folded else contextlib.nullcontext():
        tokenizer.apply_chat_template(render_prompt(), tokenize=False)
    fold_system_if_refused(tokenizer, "a model")
    assert folds_system(tokenizer) == folded
    text = tokenizer.apply_chat_template(render_prompt(HISTORY[:1]), add_generation_prompt=True, tokenize=False)
    if not folded:
        assert tokenizer.chat_template == own and SYSTEM_PROMPT not in text
        return
    by_hand = [{"role": "user", "content": SYSTEM_PROMPT + "\n\n" + render_user_message(HISTORY[:1])}]
    tokenizer.chat_template = template  # the template as shipped, on the messages folded by hand
    assert text == tokenizer.apply_chat_template(by_hand, add_generation_prompt=True, tokenize=False)


def test_a_template_that_refuses_even_the_folded_prompt_is_one_line(tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tinymodel.model_dir())
    tokenizer.chat_template = "{{ raise_exception('Only assistant roles are supported!') }}"
    with pytest.raises(ConfigError, match="fails on the game's prompt .* even with the system message folded"):
        fold_system_if_refused(tokenizer, "a model")


def test_a_template_without_a_system_role_gets_the_rules_in_the_first_user_message(hub_dir):
    tokenizer = tokenizer_of(hub_dir)
    text = tokenizer.apply_chat_template(render_prompt(HISTORY[:2]), add_generation_prompt=True, tokenize=False)
    assert text.count(SYSTEM_PROMPT) == 1 and "CLINT: C(-)" in text
    assert folds_system(tokenizer) == (family(hub_dir) == "mistral")
    if family(hub_dir) == "mistral":
        assert text.startswith("<s>[INST] " + SYSTEM_PROMPT + "\n\nGuess 3 of 6.") and text.endswith(" [/INST]")


# --- the cpu profile for a hub model -----------------------------------------------------------------


def test_cpu_profile_gives_a_hub_model_its_own_settings_and_says_so(qwen_dir, capsys):
    assert grpo_train.main(["--profile", "cpu", "--model", str(qwen_dir), "--dry-run"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["generation"]["max_completion_length"] >= 128
    assert {"q_proj", "k_proj"} <= set(out["lora"]["target_modules"])
    assert out["grpo_config"]["learning_rate"] < 5e-4
    assert any("not the embedded model" in note and "max_completion_length 16" in note for note in out["notes"])
    assert grpo_train.main(["--profile", "cpu", "--dry-run"]) == 0
    tiny = yaml.safe_load(capsys.readouterr().out)
    assert tiny["generation"]["max_completion_length"] == 16
    assert any(
        note.startswith("model tiny: the profile's settings for the embedded model apply") for note in tiny["notes"]
    )
    # The note lists the section's values; the command line still wins over them, and the note says so.
    assert grpo_train.main(["--profile", "cpu", "--dry-run", "--max_completion_length", "32"]) == 0
    overridden = yaml.safe_load(capsys.readouterr().out)
    assert overridden["generation"]["max_completion_length"] == 32
    assert any("under --config and the command line" in note for note in overridden["notes"])


# --- the preflight before the download -----------------------------------------------------------------


def config_only(path, tokenizer_from=None):
    """What a user has before a 6 GB download: Qwen2.5-3B-Instruct's config.json, and its tokenizer files or none."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", **QWEN2_5_3B}))
    if tokenizer_from is not None:
        for file in tokenizer_from.iterdir():
            if not file.name.startswith(("model", "config", "generation")):
                shutil.copy(file, path / file.name)
    return path


@pytest.mark.parametrize("profile", ["mps", "cuda"])
@pytest.mark.parametrize("tokenizer", [True, False])
def test_dry_run_estimates_a_3b_model_from_its_config_alone(qwen_dir, tmp_path, capsys, profile, tokenizer):
    model = config_only(tmp_path / "qwen3b", qwen_dir if tokenizer else None)
    assert grpo_train.main(["--profile", profile, "--model", str(model), "--dry-run"]) == 0
    estimate = yaml.safe_load(capsys.readouterr().out)["memory_estimate"]
    weights = estimate["parts_gib"]["weights"]  # 3.09B parameters: fp32 on MPS, NF4 with bf16 embeddings on CUDA
    assert (11.4 < weights < 11.6) if profile == "mps" else (1.8 < weights < 2.0), weights
    assert weights < estimate["peak_gib"] < 2 * weights
    prompt = 216 if tokenizer else 256  # the longest game prompt in Qwen's tokens, or the stated assumption
    assert f"{prompt} prompt + " in estimate["assumes"]
    assert ("the prompt length is assumed" in estimate["assumes"]) == (not tokenizer)


def test_dry_run_notes_a_template_without_a_system_role(mistral_dir, qwen_dir, capsys):
    for model, folds in ((mistral_dir, True), (qwen_dir, False)):
        assert grpo_train.main(["--profile", "cpu", "--model", str(model), "--dry-run"]) == 0
        notes = yaml.safe_load(capsys.readouterr().out)["notes"]
        assert any(n.startswith("chat template: it has no system role") for n in notes) == folds


# --- training, evaluation, merging ------------------------------------------------------------------


def test_hub_model_trains_evaluates_merges_and_resumes_nothing_when_finished(hub_dir, tmp_path, capsys):

    out = tmp_path / "out"
    argv = [*FAST, "--model", str(hub_dir), "--max-completion", "24", "--output_dir", str(out), "--merge", "true"]
    trainer = grpo_train.train(resolve(argv))
    assert trained_one_step(trainer)
    card = (out / "README.md").read_text()
    assert "[None]" not in card and "python grpo_train.py --profile cpu" in card and "| before |" in card
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(hub_dir)
    _, before = read_json(out / "eval" / "before.json")
    _, after = read_json(out / "eval" / "after.json")
    assert before[0].metrics["games"] == after[0].metrics["games"] == after[1].metrics["games"] == 2

    # The merged model: a standalone model in the base's own dtype (bf16), not the profile's fp32.
    merged = AutoModelForCausalLM.from_pretrained(out / "merged", dtype="auto")
    assert merged.dtype == torch.bfloat16 and not any("lora_" in n for n, _ in merged.named_parameters())
    assert AutoTokenizer.from_pretrained(out / "merged").eos_token == FAMILIES[family(hub_dir)]
    assert folds_system(load_tokenizer(str(out), resolve(argv))) == (family(hub_dir) == "mistral")

    # --resume on the finished run trains nothing and changes nothing.
    state = (out / "checkpoint-1" / "trainer_state.json").read_text()
    files = sorted(p.name for p in out.iterdir())
    assert grpo_train.main([*argv[:-2], "--resume"]) == 0
    assert sorted(p.name for p in out.iterdir()) == files and not (out / "checkpoint-2").exists()
    assert (out / "checkpoint-1" / "trainer_state.json").read_text() == state
    assert "is complete" in capsys.readouterr().err

    # --merge on the finished run merges without training.
    shutil.rmtree(out / "merged")
    assert grpo_train.main(argv) == 0
    assert (out / "merged" / "config.json").is_file() and not (out / "checkpoint-2").exists()

    # The README's command to redo the table replays the run's own evaluation: same games, openings, model,
    # tokens and seed, and the reward curves from the run's log history.
    log = out / "eval" / "log_history.json"
    argv = ["--adapter", str(out), "--no_baselines", "--out", str(tmp_path / "again"), "--train_log", str(log)]
    assert evaluate_cli.main(argv) == 0
    assert (tmp_path / "again" / "rewards.png").is_file()
    settings, again = read_json(tmp_path / "again" / "eval.json")
    assert settings["max_new_tokens"] == 24 and settings["seed"] == 5 and settings["model"] == str(hub_dir)
    assert settings["openings"] == ["own", "answer"]
    assert [(r.label, r.opening) for r in again] == [
        (label, o) for o in ("own", "answer") for label in ("model", "model + adapter")
    ]
    started = [r for r in before if r.kind == "model"]
    for played, run in ((again[0::2], started), (again[1::2], after)):  # the start, then the adapter
        assert [[g.to_dict() for g in r.games] for r in played] == [[g.to_dict() for g in r.games] for r in run]


def test_hub_model_trains_in_game_mode(hub_dir, tmp_path):
    """One game-mode step: 1 start state x 4 games of up to 6 turns, generated together."""
    argv = [
        *FAST,
        "--model",
        str(hub_dir),
        "--max-completion",
        "24",
        "--rollout",
        "game",
        "--per_device_train_batch_size",
        "8",
        "--gradient_accumulation_steps",
        "3",
        "--skip_eval",
        "true",
        "--output_dir",
        str(tmp_path / "out"),
    ]
    trainer = grpo_train.train(resolve(argv))
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert trainer.state.global_step == 1 and len(logs) == 1 and "rewards/game_reward/mean" in logs[0]


def test_qlora_4bit_trains_after_the_evaluation_on_cpus_that_repack_for_inference(qwen_dir, tmp_path, monkeypatch):
    """bitsandbytes repacks 4-bit weights into an inference-only layout on the first eval-mode forward
    on CPUs with AVX512-BF16/AMX; the evaluation before training is such a forward. Made to happen on
    any CPU here, the way those CPUs do it: Linear4bit reads has_avx512bf16() when it is built."""
    monkeypatch.setattr(bnb.nn.modules, "has_avx512bf16", lambda: True)
    probe = bnb.nn.Linear4bit(64, 64, bias=False, compute_dtype=torch.float32, quant_type="nf4")
    probe.weight = bnb.nn.Params4bit(torch.randn(64, 64), requires_grad=False, quant_type="nf4", module=probe)
    probe.to("cpu").eval()
    with torch.no_grad():
        probe(torch.randn(2, 64))
    assert probe.weight.quant_state.packing_format_for_cpu, "the test no longer reaches bitsandbytes' repacking"

    out = tmp_path / "out"
    argv = [
        *FAST,
        "--model",
        str(qwen_dir),
        "--max-completion",
        "16",
        "--load_in_4bit",
        "true",
        "--output_dir",
        str(out),
    ]
    trainer = grpo_train.train(resolve(argv))
    quantized = [m for m in trainer.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert quantized and all(m.weight.quant_state.quant_type == "nf4" for m in quantized)
    assert not any(getattr(m.weight.quant_state, "packing_format_for_cpu", False) for m in quantized)
    assert (out / "eval" / "before.json").is_file() and trained_one_step(trainer)


# --- evaluate.py on the hub-model path ----------------------------------------------------------------


def test_evaluate_plays_a_hub_model_with_and_without_the_constraint(hub_dir, tmp_path):
    argv = ["--model", str(hub_dir), "--games", "2", "--max_new_tokens", "24", "--no_baselines"]
    assert evaluate_cli.main([*argv, "--constrain", "allowed", "--out", str(tmp_path / "e")]) == 0
    settings, [free, constrained] = read_json(tmp_path / "e" / "eval.json")
    assert settings["seed"] == 42  # the trainer's default seed, so a run's table and this one agree
    assert free.metrics["games"] == constrained.metrics["games"] == 2
    assert constrained.metrics["format_failure_rate"]["rate"] == 0.0
    assert constrained.metrics["nonword_rate"]["rate"] == 0.0
