"""The embedded tiny model: tokenizer, chat template, a ci-scale build, and the shipped artefact."""

import json
import os
import random
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM, Qwen2Tokenizer

import training.data
from rewards import format_reward
from training import tiny
from training.data import build_rows, eval_secrets
from wordle import SYSTEM_PROMPT, Solver, allowed, answers, history_for, parse_completion, render_prompt

TOKENIZER = tiny.build_tokenizer()
VOCAB_TEXT = st.text(alphabet=st.sampled_from(tiny.CHARACTERS), max_size=200)
HISTORIES = st.builds(history_for, st.sampled_from(answers()), st.lists(st.sampled_from(allowed()), max_size=5))


def user_message(history):
    return render_prompt(history)[1]["content"]


def round_trips(tokenizer, text):
    return tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


@pytest.fixture(scope="module")
def ci_model(tmp_path_factory):
    return tiny.build(tmp_path_factory.mktemp("tiny") / "ci", scale="ci", seed=0)


# --- tokenizer ------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(HISTORIES, st.sampled_from(allowed()), VOCAB_TEXT)
def test_rendered_prompts_and_replies_round_trip(history, guess, think):
    assert round_trips(TOKENIZER, user_message(history))
    assert round_trips(TOKENIZER, tiny.reply_text(history, guess))
    assert round_trips(TOKENIZER, f"<think>{think}</think><guess>{guess}</guess>")


@settings(max_examples=200, deadline=None)
@given(VOCAB_TEXT)
def test_any_vocabulary_text_round_trips(text):
    assert round_trips(TOKENIZER, text)


def test_system_prompt_round_trips():
    assert round_trips(TOKENIZER, SYSTEM_PROMPT)


def test_letters_are_single_tokens_and_tags_marks_are_whole():
    assert TOKENIZER.tokenize("CRANE") == list("CRANE")
    assert TOKENIZER.tokenize("<think>.R..E</think><guess>CRANE</guess>") == [
        "<think>",
        ".",
        "R",
        ".",
        ".",
        "E",
        "</think>",
        "<guess>",
        *"CRANE",
        "</guess>",
    ]
    assert TOKENIZER.tokenize("SOARE: S(✓) O(~) A(-)") == [*"SOARE", ": ", "S", "(✓)", " ", "O", "(~)", " ", "A", "(-)"]


@pytest.mark.parametrize("text", ["é", "CRANÉ 😀", "<think>日本</think>", "\x00\u200b"])
def test_unknown_characters_become_unk(text):
    ids = TOKENIZER(text, add_special_tokens=False)["input_ids"]
    unknown = sum(c not in tiny.CHARACTERS for c in text)
    assert ids.count(TOKENIZER.unk_token_id) == unknown > 0
    known = "".join(c for c in text if c in tiny.CHARACTERS)
    assert TOKENIZER.decode(ids, skip_special_tokens=True) == known


def test_prompts_are_short():
    # Pins the fixed prompt phrases to single tokens: a renderer change that breaks them shows here.
    first = TOKENIZER.apply_chat_template(render_prompt([]), add_generation_prompt=True, return_dict=False)
    five = history_for("ROBIN", ["SOARE", "CLINT", "BUMPH", "FOLKY", "GAWKS"])
    last = TOKENIZER.apply_chat_template(render_prompt(five), add_generation_prompt=True, return_dict=False)
    assert len(first) == 8
    assert len(last) == 8 + 5 * 21  # per line: 5 letters, ': ', 5 x (letter, mark), 4 spaces, newline


# --- chat template --------------------------------------------------------------------------------


def test_template_drops_system_and_ends_turns_with_eos():
    history = history_for("ROBIN", ["SOARE"])
    with_system = TOKENIZER.apply_chat_template(render_prompt(history), tokenize=False, add_generation_prompt=True)
    user_only = TOKENIZER.apply_chat_template(render_prompt(history)[1:], tokenize=False, add_generation_prompt=True)
    assert with_system == user_only == f"<|user|>{user_message(history)}<|end|><|assistant|>"
    assert "Wordle" not in with_system
    assert TOKENIZER.eos_token == "<|end|>"


@settings(max_examples=50, deadline=None)
@given(HISTORIES, st.sampled_from(allowed()))
def test_generation_prompt_is_a_prefix_of_prompt_plus_completion(history, guess):
    # What TRL's SFTTrainer needs to find the completion, and what GRPO generates after.
    prompt = render_prompt(history)
    completion = [{"role": "assistant", "content": tiny.reply_text(history, guess)}]
    prompt_ids = TOKENIZER.apply_chat_template(prompt, add_generation_prompt=True, return_dict=False)
    full = TOKENIZER.apply_chat_template(prompt + completion, return_dict=True, return_assistant_tokens_mask=True)
    assert full["input_ids"][: len(prompt_ids)] == prompt_ids
    reply_ids = full["input_ids"][len(prompt_ids) :]
    assert reply_ids[-1] == TOKENIZER.eos_token_id
    assert TOKENIZER.decode(reply_ids, skip_special_tokens=True) == completion[0]["content"]
    # The assistant mask (SFT's assistant_only_loss) is exactly the reply and its eos.
    assert full["assistant_masks"] == [0] * len(prompt_ids) + [1] * len(reply_ids)


def test_template_rejects_unknown_roles():
    with pytest.raises(Exception, match="only system, user and assistant"):
        TOKENIZER.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


# --- the distilled replies and the spelling drills -------------------------------------------------


@pytest.mark.parametrize(
    "secret, guesses, think",
    [
        ("ROBIN", [], "....."),  # nothing known yet
        ("CRANE", ["SOARE"], "..A.E"),  # only green marks count
        ("ROBIN", ["SOARE", "CLINT"], ".O..."),  # yellows (R, I, N) are not placed
        ("ROBOT", ["SOARE", "TUTOR"], ".O.O."),  # placed letters of different guesses combine
        ("CRANE", ["CRATE", "DRONE"], "CRANE"),  # all five known, though no guess was the secret
        ("ABIDE", ["SPEED", "ELIDE"], "..IDE"),  # only the green E (of ELIDE) is placed
        ("EERIE", ["EERIE"], "EERIE"),  # everything placed
    ],
)
def test_think_text(secret, guesses, think):
    assert tiny.think_text(history_for(secret, guesses)) == think


def test_distilled_reply_is_the_solvers_guess_in_the_parsed_form():
    history = history_for("ROBIN", ["SOARE"])
    solver = Solver()
    (row,) = tiny.distill_rows([{"prompt": render_prompt(history), "past_guess_history": history}], solver)
    assert row["prompt"] == render_prompt(history)
    assert [m["role"] for m in row["completion"]] == ["assistant"]
    assert parse_completion(row["completion"]) == solver.next_guess(history)
    assert row["completion"][0]["content"].startswith("<think>.O...</think><guess>")


def test_spelling_drills_are_runs_of_the_given_words():
    words = ["CLINT", "CLINT", "CLINT", "SOARE"]
    rows = tiny.drill_rows(words, 50, random.Random(0))
    assert len(rows) == 50
    assert all(row["prompt"] == [{"role": "user", "content": ""}] for row in rows)
    drilled = [w for row in rows for w in re.findall(r"<guess>(\w+)</guess>", row["completion"][0]["content"])]
    assert len(drilled) == 50 * tiny.DRILL_WORDS and set(drilled) == {"CLINT", "SOARE"}
    assert 0.6 < drilled.count("CLINT") / len(drilled) < 0.9  # drawn by frequency
    assert rows == tiny.drill_rows(words, 50, random.Random(0))  # deterministic in the generator


# --- a ci-scale build -----------------------------------------------------------------------------


def test_ci_build_saves_a_model_that_loads_like_a_hub_model(ci_model):
    for name in (*tiny.MODEL_FILES, "build_info.json"):
        assert (ci_model / name).is_file(), name
    info = json.loads((ci_model / "build_info.json").read_text())
    ci = tiny.SCALES["ci"]
    assert info["scale"] == "ci" and (info["spelling_steps"], info["steps"]) == (ci.spelling_steps, ci.steps)
    model = AutoModelForCausalLM.from_pretrained(ci_model)
    tokenizer = AutoTokenizer.from_pretrained(ci_model)
    assert isinstance(model, Qwen2ForCausalLM) and model.config.model_type == "qwen2"
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    prompt = tokenizer.apply_chat_template(render_prompt([]), add_generation_prompt=True, return_tensors="pt")
    output = model.generate(**prompt, do_sample=False, min_new_tokens=5, max_new_tokens=5)
    new = output[0, prompt["input_ids"].shape[1] :]
    assert len(new) == 5 and all(0 <= t < len(tokenizer) for t in new.tolist())
    # Six steps of training: the reply itself may be eos at once, but the batched path must run end to end.
    replies = tiny.generate_replies(
        model, tokenizer, [render_prompt([]), render_prompt(history_for("ROBIN", ["SOARE"]))]
    )
    assert len(replies) == 2 and all(isinstance(r, str) for r in replies)


def test_build_trains_on_training_secrets_and_scores_on_held_out_ones(tmp_path, monkeypatch):
    calls = []

    def spy(n_rows, seed, secrets=None, **kwargs):
        rows = real_build_rows(n_rows, seed, secrets, **kwargs)
        calls.append((tuple(secrets), {row["secret"] for row in rows}))
        return rows

    real_build_rows = training.data.build_rows
    monkeypatch.setattr(training.data, "build_rows", spy)
    out = tiny.build(tmp_path / "ci", scale="ci", seed=1)
    (train_pool, trained_on), (eval_pool, scored_on) = calls
    assert train_pool == training.data.train_secrets() and trained_on <= set(train_pool)
    assert eval_pool == training.data.eval_secrets() and scored_on <= set(eval_pool)
    assert not set(train_pool) & set(eval_pool)
    info = json.loads((out / "build_info.json").read_text())
    assert (info["train_states"], info["eval"]["rows"]) == (tiny.SCALES["ci"].train_rows, tiny.SCALES["ci"].eval_rows)


def test_ci_build_is_deterministic_in_its_seed(ci_model, tmp_path):
    again = tiny.build(tmp_path / "again", scale="ci", seed=0)
    assert (again / "model.safetensors").read_bytes() == (ci_model / "model.safetensors").read_bytes()
    assert (again / "tokenizer.json").read_bytes() == (ci_model / "tokenizer.json").read_bytes()


def test_saved_tokenizer_loads_as_itself_not_qwen2(ci_model):
    tokenizer = AutoTokenizer.from_pretrained(ci_model)
    assert not isinstance(tokenizer, Qwen2Tokenizer)
    assert type(tokenizer).__name__ == "TokenizersBackend"
    texts = [user_message(history_for("ROBIN", ["SOARE", "CLINT"])), "<think>.R..E -SO</think><guess>CRANE</guess>"]
    for text in texts:
        assert round_trips(tokenizer, text)
        assert tokenizer(text)["input_ids"] == TOKENIZER(text)["input_ids"]
    assert tokenizer.chat_template == tiny.CHAT_TEMPLATE
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.unk_token) == ("<|end|>", "<|pad|>", "<|unk|>")


def test_saved_tokenizer_loads_with_trust_remote_code(ci_model, tmp_path):
    # trust_remote_code=True takes the auto_map's class; run apart so its module cache is a temp dir.
    script = (
        "import sys; from transformers import AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "text = 'SOARE: S(✓) O(~) A(-)\\n<think>.R..E</think><guess>CRANE</guess>'\n"
        "print(type(t).__name__, t.decode(t(text)['input_ids']) == text)\n"
    )
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", script, str(ci_model)], check=False, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["WordleTinyTokenizer", "True"]


def test_lora_attaches_to_the_attention_projections(ci_model):
    from peft import LoraConfig, get_peft_model

    model = AutoModelForCausalLM.from_pretrained(ci_model)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    names = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    layers = tiny.SCALES["ci"].num_layers
    assert len(names) == 2 * 4 * layers and all("lora_" in n for n in names)


def test_ensure_tiny_builds_into_the_cache_once(tmp_path, monkeypatch):
    builds = []

    def ci_build(out_dir, scale="full", seed=0):
        builds.append(out_dir)
        return real_build(out_dir, scale="ci", seed=seed)

    real_build = tiny.build
    monkeypatch.setattr(tiny, "TINY_DIR", tmp_path / "not-shipped")
    monkeypatch.setenv("WORDLE_GRPO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tiny, "build", ci_build)
    first = tiny.ensure_tiny()
    assert first.parent == tmp_path / "cache" and tiny._is_model_dir(first)
    assert tiny.ensure_tiny() == first
    assert len(builds) == 1
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no scratch left behind


# --- the shipped artefact -------------------------------------------------------------------------


def test_ensure_tiny_returns_the_shipped_model():
    assert tiny.ensure_tiny() == tiny.TINY_DIR


def test_shipped_model_is_small_and_built_from_training_secrets_only():
    size = sum(f.stat().st_size for f in tiny.TINY_DIR.rglob("*") if f.is_file())
    assert size <= 25 * 2**20
    assert (tiny.TINY_DIR / "model.safetensors").is_file()
    info = json.loads((tiny.TINY_DIR / "build_info.json").read_text())
    assert info["scale"] == "full" and info["recipe_version"] == tiny.RECIPE_VERSION
    assert info["train_secrets"] == "training.data.train_secrets()"
    assert info["eval_secrets"] == "training.data.eval_secrets()"
    assert info["eval"]["rows"] >= 200 and info["eval"]["format_reward"] >= 0.9
    assert not info["stopped_early"] and info["build_seconds"] <= 600


def test_shipped_model_replies_well_formed_on_held_out_states():
    model = AutoModelForCausalLM.from_pretrained(tiny.TINY_DIR)
    tokenizer = AutoTokenizer.from_pretrained(tiny.TINY_DIR)
    info = json.loads((tiny.TINY_DIR / "build_info.json").read_text())
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    # A different seed from the build's own evaluation: these states were never looked at.
    rows = build_rows(96, seed=12345, secrets=eval_secrets())
    replies = tiny.generate_replies(model, tokenizer, [row["prompt"] for row in rows])
    scores = format_reward(replies)
    assert sum(scores) / len(scores) >= 0.9
    assert all(parse_completion(r) is not None for r in replies[:10]), replies[:10]
