"""The embedded tiny model: tokenizer, chat template, a ci-scale build, and the shipped artefact."""

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM, Qwen2Tokenizer

from rewards import format_reward
from training import tiny
from training.data import build_rows, eval_secrets
from wordle import SYSTEM_PROMPT, allowed, answers, history_for, parse_completion, render_prompt

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


# --- the distilled think --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "secret, guesses, think",
    [
        ("ROBIN", [], "....."),  # nothing known yet
        ("CRANE", ["SOARE"], "..A.E +R -SO"),  # placed, elsewhere, absent
        ("ROBIN", ["SOARE", "CLINT"], ".O... +RIN -SAECLT"),  # in order of first appearance
        ("ABIDE", ["SPEED"], "..... +ED -SP"),  # the second E is marked - but E is in the word
        ("CRANE", ["CRANE"], "CRANE"),  # everything placed: nothing else to say
        ("EERIE", ["EERIE"], "EERIE"),
    ],
)
def test_think_text(secret, guesses, think):
    assert tiny.think_text(history_for(secret, guesses)) == think


# --- a ci-scale build -----------------------------------------------------------------------------


def test_ci_build_saves_a_model_that_loads_like_a_hub_model(ci_model):
    for name in (*tiny.MODEL_FILES, "build_info.json"):
        assert (ci_model / name).is_file(), name
    info = json.loads((ci_model / "build_info.json").read_text())
    assert info["scale"] == "ci" and info["steps"] == tiny.SCALES["ci"].max_steps
    model = AutoModelForCausalLM.from_pretrained(ci_model)
    tokenizer = AutoTokenizer.from_pretrained(ci_model)
    assert isinstance(model, Qwen2ForCausalLM) and model.config.model_type == "qwen2"
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    replies = tiny.generate_replies(
        model, tokenizer, [render_prompt([]), render_prompt(history_for("ROBIN", ["SOARE"]))]
    )
    # Four steps of training: the reply may be eos at once (decoded as ""), but generation must run end to end.
    assert len(replies) == 2 and all(isinstance(r, str) for r in replies)


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
    assert info["eval"]["rows"] >= 200


@pytest.mark.xfail(
    strict=True,
    reason="known gap (issue 3): the shipped build measured format_reward 0.78 on held-out states (0.89 in a probe of the same recipe on an idle machine), short of 0.9; strict, so meeting it turns this red",
)
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
