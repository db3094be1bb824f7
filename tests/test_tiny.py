"""The embedded tiny model: tokenizer, chat template, a ci-scale build, and the shipped artefact."""

import dataclasses
import json
import os
import platform
import random
import subprocess
import sys

import datasets
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM, Qwen2ForCausalLM, Qwen2Tokenizer

import grpo_train
import tinymodel
import tinymodel.build
from evaluation.play import ModelPlayer
from evaluation.run import evaluate_model
from tinymodel import MODEL_DIR, MODEL_FILES, MissingModelError, model_dir
from tinymodel.bag import add_past_guess_heads, as_llama, fit_guess_bag, guess_states, wire_guess_bag
from tinymodel.build import RECIPE_VERSION, SCALES, _past_guess_flags, _past_guess_heads_flags, build, build_model
from tinymodel.build import main as tiny_main
from tinymodel.data import encode, game_rows, reply_text, think_text
from tinymodel.tokenizer import (
    CHARACTERS,
    CHAT_TEMPLATE,
    COLUMN_TAGS,
    WORDS,
    build_tokenizer,
    past_guess_ids,
    prompt_only_ids,
)
from training.config import ConfigError, resolve
from training.data import make_row
from training.modeling import model_source
from wordle import (
    SYSTEM_PROMPT,
    Solver,
    allowed,
    answers,
    candidates,
    eval_secrets,
    history_for,
    is_consistent,
    parse_completion,
    parse_history,
    render_prompt,
    train_secrets,
)

TOKENIZER = build_tokenizer()  # recipe 7's (python -m tinymodel --no_past_guesses)
PAST = build_tokenizer(past_guesses=True)  # the shipped recipe 10's (and 9's): a token for each past answer guess
# What the shipped model must keep doing on 60 held-out games. When shipped it measured on these 60:
# 22 wins (36.7%; random allowed words win none), 2.2% invalid replies, every turn-2 guess consistent
# with the opener's feedback.
MIN_WIN_RATE, MAX_INVALID, MIN_TURN2_CONSISTENT = 0.2, 0.05, 0.9
VOCAB_TEXT = st.text(alphabet=st.sampled_from(CHARACTERS), max_size=200)
HISTORIES = st.builds(history_for, st.sampled_from(answers()), st.lists(st.sampled_from(allowed()), max_size=5))


def user_message(history):
    return render_prompt(history)[1]["content"]


def round_trips(tokenizer, text):
    return tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


@pytest.fixture(scope="module")
def ci_model(tmp_path_factory):
    return build(tmp_path_factory.mktemp("tiny") / "ci", scale="ci", seed=0)


# --- tokenizer ------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(HISTORIES, st.sampled_from(allowed()), VOCAB_TEXT)
def test_rendered_prompts_and_replies_round_trip(history, guess, think):
    assert round_trips(TOKENIZER, user_message(history))
    assert round_trips(TOKENIZER, reply_text(history, guess))
    assert round_trips(TOKENIZER, f"<think>{think}</think><guess>{guess}</guess>")


@settings(max_examples=200, deadline=None)
@given(VOCAB_TEXT)
def test_any_vocabulary_text_round_trips(text):
    assert round_trips(TOKENIZER, text)


def test_system_prompt_round_trips():
    assert round_trips(TOKENIZER, SYSTEM_PROMPT)


def test_letters_marks_answers_and_tags_are_whole_tokens():
    assert "SOARE" not in answers() and TOKENIZER.tokenize("SOARE") == list("SOARE")  # spelled
    assert TOKENIZER.tokenize("CRANE</guess>") == ["CRANE", "</guess>"]  # an answer, guessed: one token
    assert TOKENIZER.tokenize("CRANE: C(-)") == [*"CRANE", ": ", "C(-)"]  # in a history: spelled
    assert TOKENIZER.tokenize("<think>.R..E</think><guess>CRANE</guess>") == [
        "<think>",
        ".",
        "R",
        ".",
        ".",
        "E",
        "</think>",
        "<guess>",
        "CRANE",
        "</guess>",
    ]
    assert TOKENIZER.tokenize("SOARE: S(✓) O(~) A(-)") == [*"SOARE", ": ", "S(✓)", " O(~)", " A(-)"]
    assert TOKENIZER.tokenize("crane</guess>") == [*"crane", "</guess>"]  # answers are upper case only


UNTAGGED = build_tokenizer(column_tags=False)


def test_column_tags_mark_each_letter_of_a_feedback_line_with_its_column():
    lines = "SOARE: S(-) O(~) A(✓) R(-) E(-)\nPANEL: P(-) A(~) N(-) E(✓) L(-)"
    tokens = TOKENIZER.tokenize(lines)
    assert tokens[6:11] == ["S(-)₁", " O(~)₂", " A(✓)₃", " R(-)₄", " E(-)₅"]
    assert tokens[-5:] == ["P(-)₁", " A(~)₂", " N(-)₃", " E(✓)₄", " L(-)₅"]
    assert PAST.tokenize(lines)[-7:] == ["⟦PANEL⟧", ": ", "P(-)₁", " A(~)₂", " N(-)₃", " E(✓)₄", " L(-)₅"]
    assert TOKENIZER.decode(TOKENIZER.convert_tokens_to_ids(tokens)) == lines  # the tags are not text
    assert UNTAGGED.tokenize(lines)[6:11] == ["S(-)", " O(~)", " A(✓)", " R(-)", " E(-)"]  # recipe 3's tokenizer
    # Only whole lines of five marks after "WORD: " are tagged: a fragment or a sixth mark is not a guess's feedback.
    for text in ("S(-) O(~) A(✓) R(-) E(-)", "SOARES: S(-) O(~) A(✓) R(-) E(-) S(-)", "SOA: S(-) O(~) A(✓)"):
        assert not any(tag in token for token in TOKENIZER.tokenize(text) for tag in COLUMN_TAGS), text


# (history, what follows each spelled past guess): an answer gets its own token, and only where it
# starts a feedback line; other allowed words (the opener SOARE), a reply's guess and lower case do not.
PAST_GUESS_CASES = [
    ("CRANE: C(-) R(✓) A(~) N(-) E(-)", [*"CRANE", "⟦CRANE⟧", ": "]),
    ("SOARE: S(-) O(~) A(✓) R(-) E(-)", [*"SOARE", ": "]),
    ("XCRANE: C(-)", [*"XCRANE", ": "]),  # not a word at a line's start
    ("CRANE, C(-)", [*"CRANE", ","]),  # not a feedback line
    ("crane: c(-)", [*"crane", ": "]),
]


@pytest.mark.parametrize(("text", "start"), PAST_GUESS_CASES)
def test_a_past_answer_gets_a_token_of_its_own_beside_its_letters(text, start):
    tokens = PAST.tokenize(text)
    assert tokens[: len(start)] == start
    assert PAST.decode(PAST.convert_tokens_to_ids(tokens)) == text  # the token is not text
    assert "⟦" not in "".join(TOKENIZER.tokenize(text))  # recipe 7's tokenizer has none


def test_past_guess_copies_repeat_the_token_and_still_decode_to_the_text():
    # The variant of e51: the token's share of layer 0's mean grows with its copies (its norm cannot).
    twice = build_tokenizer(past_guesses=2)
    text = "CRANE: C(-) R(✓) A(~) N(-) E(-)"
    tokens = twice.tokenize(text)
    assert tokens[:8] == [*"CRANE", "⟦CRANE⟧", "⟦CRANE⟧", ": "]
    assert twice.decode(twice.convert_tokens_to_ids(tokens)) == text
    assert twice.get_vocab() == PAST.get_vocab()  # the same tokens, written twice


def test_past_guess_tokens_mark_every_answer_line_of_a_prompt_and_never_a_reply():
    history = history_for("ROBIN", ["SOARE", "CRANE", "PANEL", "CRANE"])
    tokens = PAST.tokenize(user_message(history))
    assert [t for t in tokens if t.startswith("⟦")] == ["⟦CRANE⟧", "⟦PANEL⟧", "⟦CRANE⟧"]
    assert "⟦" not in "".join(PAST.tokenize(reply_text(history, "ROBIN")))
    assert PAST.convert_tokens_to_ids("⟦CRANE⟧") in prompt_only_ids(PAST)  # never generated
    # New tokens come after recipe 7's, whose ids do not move.
    assert len(TOKENIZER) + len(WORDS) == len(PAST) and past_guess_ids(TOKENIZER) == []
    assert all(PAST.convert_tokens_to_ids(t) == i for t, i in TOKENIZER.get_vocab().items())


UNSPELLED = build_tokenizer(past_guesses=True, spelled=False)  # recipe 12's: a past guess's letters not spelled
# (history line, its tokens up to the first marked letter, how it decodes): an answer's spelling gives way to its
# token, which decodes to the word; another allowed word's spelling is dropped; text that is no feedback line stays.
UNSPELLED_CASES = [
    ("CRANE: C(-) R(✓) A(~) N(-) E(-)", ["⟦CRANE⟧", ": ", "C(-)₁"], "CRANE: C(-) R(✓) A(~) N(-) E(-)"),
    ("SOARE: S(-) O(~) A(✓) R(-) E(-)", [": ", "S(-)₁"], ": S(-) O(~) A(✓) R(-) E(-)"),
    ("XCRANE: C(-)", [*"XCRANE", ": ", "C(-)"], "XCRANE: C(-)"),
    ("CRANE, C(-)", [*"CRANE", ",", " C(-)"], "CRANE, C(-)"),
    ("crane: c(-)", [*"crane", ": ", "c"], "crane: c(-)"),
]


@pytest.mark.parametrize(("text", "start", "decoded"), UNSPELLED_CASES)
def test_unspelled_past_guesses_keep_their_token_and_marked_letters(text, start, decoded):
    ids = UNSPELLED(text, add_special_tokens=False)["input_ids"]
    assert UNSPELLED.convert_ids_to_tokens(ids)[: len(start)] == start
    assert UNSPELLED.decode(ids) == decoded


def test_unspelled_prompts_are_five_tokens_a_guess_shorter_with_the_same_vocabulary():
    history = history_for("ROBIN", ["SOARE", "CRANE", "PANEL", "CRANE"])
    spelled, unspelled = (t.tokenize(user_message(history)) for t in (PAST, UNSPELLED))
    assert len(spelled) - len(unspelled) == 5 * len(history)
    assert [t for t in unspelled if t.startswith("⟦")] == ["⟦CRANE⟧", "⟦PANEL⟧", "⟦CRANE⟧"]
    assert [t for t in unspelled if "(" in t] == [t for t in spelled if "(" in t]  # every marked letter kept
    assert UNSPELLED.get_vocab() == PAST.get_vocab()
    assert round_trips(UNSPELLED, reply_text(history, "ROBIN"))  # replies are untouched
    with pytest.raises(ValueError, match="past-guess tokens"):
        build_tokenizer(spelled=False)


@settings(max_examples=100, deadline=None)
@given(HISTORIES, VOCAB_TEXT)
def test_column_tagged_prompts_round_trip(history, text):
    for tokenizer in (TOKENIZER, PAST):
        assert round_trips(tokenizer, user_message(history))
        assert round_trips(tokenizer, text)


@pytest.mark.parametrize("text", ["é", "CRANÉ 😀", "<think>日本</think>", "\x00\u200b"])
def test_unknown_characters_become_unk(text):
    ids = TOKENIZER(text, add_special_tokens=False)["input_ids"]
    unknown = sum(c not in CHARACTERS for c in text)
    assert ids.count(TOKENIZER.unk_token_id) == unknown > 0
    known = "".join(c for c in text if c in CHARACTERS)
    assert TOKENIZER.decode(ids, skip_special_tokens=True) == known


def test_prompt_only_tokens_are_suppressed_and_no_reply_needs_one():
    ids = set(prompt_only_ids(TOKENIZER))
    assert {TOKENIZER.convert_tokens_to_ids(t) for t in (" R(✓)", "R(✓)₂", "Guess ", ": ", "<|user|>")} <= ids
    replies = ["<think>.R..E</think><guess>CRANE</guess>", "<think>.....</think><guess>SOARE</guess>"]
    for reply in replies:  # every token a reply is made of stays writable
        assert not ids & set(TOKENIZER(reply + TOKENIZER.eos_token, add_special_tokens=False)["input_ids"])
    assert len(prompt_only_ids(UNTAGGED)) < len(ids)  # recipe 3's tokenizer has no column tags


def test_prompts_are_short():
    # Pins the fixed prompt phrases to single tokens: a renderer change that breaks them shows here.
    first = TOKENIZER.apply_chat_template(render_prompt([]), add_generation_prompt=True, return_dict=False)
    five = history_for("ROBIN", ["SOARE", "CLINT", "BUMPH", "FOLKY", "GAWKS"])
    last = TOKENIZER.apply_chat_template(render_prompt(five), add_generation_prompt=True, return_dict=False)
    assert len(first) == 8
    assert len(last) == 8 + 5 * 12  # per line: 5 letters, ': ', 5 marked letters, newline
    answered = history_for("ROBIN", ["CRANE"])  # an answer in a history is spelled too (recipe 9: and marked)
    assert (
        len(TOKENIZER.apply_chat_template(render_prompt(answered), add_generation_prompt=True, return_dict=False)) == 20
    )
    assert len(PAST.apply_chat_template(render_prompt(answered), add_generation_prompt=True, return_dict=False)) == 21


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
    completion = [{"role": "assistant", "content": reply_text(history, guess)}]
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


# --- the training rows and the word embeddings -------------------------------------------------


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
    assert think_text(history_for(secret, guesses)) == think


def test_game_rows_answer_with_the_opener_then_a_still_possible_answer():
    solver = Solver()
    rows = game_rows(300, random.Random(0), solver, train_secrets())
    assert rows == game_rows(300, random.Random(0), solver, train_secrets())  # deterministic
    turns = set()
    for row in rows:
        history = parse_history(row["prompt"][1]["content"])
        guess = parse_completion(row["completion"])
        turns.add(len(history))
        assert row["completion"][0]["content"] == reply_text(history, guess)
        if history:
            assert guess in candidates(history).words(), (history, guess)
        else:
            assert guess == solver.next_guess(())
    assert turns == set(range(6))


# sum: the probe's alternative (research log, e34); PAST: recipe 9's tokenizer
@pytest.mark.parametrize(("pooling", "tokenizer"), [("mean", TOKENIZER), ("sum", TOKENIZER), ("mean", PAST)])
def test_guess_bag_learns_to_favour_still_possible_answers(pooling, tokenizer):
    rows = game_rows(300, random.Random(0), Solver(), train_secrets())
    encoded = encode(tokenizer, rows)
    matrix = fit_guess_bag(encoded, tokenizer, steps=100, batch_size=32, learning_rate=1e-2, seed=0, pooling=pooling)
    assert matrix.shape == (len(tokenizer), len(WORDS))
    column = {t: j for j, t in enumerate(tokenizer.convert_tokens_to_ids(list(WORDS)))}
    gains = []
    for _, prefix, cands in guess_states(encoded):
        probs = getattr(matrix[prefix], pooling)(0).softmax(-1)  # the rows' mean or sum
        gains.append(float(probs[[column[c] for c in cands]].sum()) / (len(cands) / len(WORDS)))
    # Against a uniform guess, the states it was fitted on put many times more mass on their candidates.
    assert sum(gains) / len(gains) > 5
    if tokenizer is PAST:
        # A past-guess token's row says "not W" and nothing else, with one weight for every W, learnt to be
        # negative: a past guess is never the answer (the game stops at a win).
        past = torch.tensor(past_guess_ids(tokenizer))
        own = matrix[past, torch.arange(len(WORDS))]
        assert float(own[0]) < 0 and torch.equal(own, torch.full_like(own, float(own[0])))
        assert matrix[past].count_nonzero() == len(WORDS)


def test_wiring_makes_layer_zero_compute_the_guess_bag():
    # Before any training the model's answer logits are the bag's: the mean over the prefix of each
    # token's row. A rank-16 bag survives the SVD (hidden 64) exactly; the MLP's small random output
    # is the only noise.
    spec = dataclasses.replace(SCALES["ci"], hidden_size=64, num_heads=2, num_kv_heads=2)
    model = build_model(TOKENIZER, spec, seed=0)
    generator = torch.Generator().manual_seed(0)
    matrix = torch.randn(len(TOKENIZER), 16, generator=generator) @ torch.randn(16, len(WORDS), generator=generator)
    encoded = encode(TOKENIZER, game_rows(40, random.Random(0), Solver(), train_secrets()))
    word_ids = TOKENIZER.convert_tokens_to_ids(list(WORDS))
    wire_guess_bag(model, matrix, word_ids, encoded)
    states = guess_states(encoded)
    assert len(states) > 20
    with torch.no_grad():
        for _, prefix, _ in states:
            logits = model(torch.tensor([prefix])).logits[0, -1, word_ids]
            bag = matrix[prefix].mean(0)
            assert torch.corrcoef(torch.stack([logits, bag]))[0, 1] > 0.98
            assert bag[logits.argmax()] >= bag.topk(10).values[-1]  # its top answer is among the bag's ten
    with pytest.raises(ValueError, match="one key/value head per attention head"):
        wire_guess_bag(build_model(TOKENIZER, dataclasses.replace(spec, num_kv_heads=1), 0), matrix, word_ids, encoded)


def test_wiring_makes_a_past_guess_token_say_not_this_word():
    spec = dataclasses.replace(SCALES["ci"], hidden_size=64, num_heads=2, num_kv_heads=2)
    model = build_model(PAST, spec, seed=0)
    encoded = encode(PAST, game_rows(40, random.Random(0), Solver(), train_secrets()))
    word_ids, past_ids = PAST.convert_tokens_to_ids(list(WORDS)), past_guess_ids(PAST)
    matrix = fit_guess_bag(encoded, PAST, steps=20, batch_size=8, learning_rate=1e-2, seed=0)
    wire_guess_bag(model, matrix, word_ids, encoded, past_ids)
    rows = model.get_input_embeddings().weight.detach()
    answers = rows[word_ids]
    assert torch.equal(rows[past_ids], answers.mean(0) - answers)  # minus the answer's output vector (tied), centred
    # In a prompt, ⟦W⟧ lowers the model's top answer W by more than it lowers the answers on average.
    with torch.no_grad():
        for _, prefix, _ in guess_states(encoded)[:10]:
            before = model(torch.tensor([prefix])).logits[0, -1, word_ids]
            top = int(before.argmax())
            marked = [prefix[0], past_ids[top], *prefix[1:]]
            change = model(torch.tensor([marked])).logits[0, -1, word_ids] - before
            assert change[top] < change.mean() - 3 * change.std()


def test_past_guess_heads_look_at_the_past_guess_tokens_and_save_as_the_same_llama():
    # The full scale's width (a narrower bag's directions are too blurred to test), one layer.
    spec = dataclasses.replace(SCALES["ci"], hidden_size=256, num_heads=8, num_kv_heads=8)
    model = build_model(PAST, spec, seed=0)
    encoded = encode(PAST, game_rows(40, random.Random(0), Solver(), train_secrets()))
    word_ids, past_ids = PAST.convert_tokens_to_ids(list(WORDS)), past_guess_ids(PAST)
    wire_guess_bag(model, fit_guess_bag(encoded, PAST, 20, 8, 1e-2, 0), word_ids, encoded, past_ids)
    history = history_for("ROBIN", ["SOARE", "CRANE", "PANEL", "TIMID"])  # SOARE is no answer: no token
    text = PAST.apply_chat_template(render_prompt(history), add_generation_prompt=True, tokenize=False)
    ids = PAST(text + "<think>.....</think><guess>", add_special_tokens=False, return_tensors="pt")["input_ids"]
    is_past = torch.isin(ids[0], torch.tensor(past_ids))
    assert int(is_past.sum()) == 3
    with torch.no_grad():
        wired = model(ids).logits
        silent = add_past_guess_heads(model, PAST, 8, strength=0.0)  # the added heads, their output 0
        assert silent.config.num_attention_heads == 16 and silent.config.head_dim == 32
        assert torch.allclose(silent(ids).logits, wired, atol=1e-5)  # the widened model computes the same
        wide = add_past_guess_heads(model, PAST, 8, strength=0.01)
        wide.set_attn_implementation("eager")
        attention = wide(ids, output_attentions=True).attentions[0][0, :, -1]  # layer 0 at <guess>: heads x keys
        # The mean's heads still average every token; the added ones look at the past-guess tokens, each of them
        # weighted over five times any other token (and over fifteen times the others' mean).
        assert torch.allclose(attention[:8], torch.full_like(attention[:8], 1 / ids.shape[1]))
        assert (attention[8:, is_past].min(-1).values > 5 * attention[8:, ~is_past].max(-1).values).all()
        assert (attention[8:, is_past].min(-1).values > 15 * attention[8:, ~is_past].mean(-1)).all()
        # So each past guess loses against the other answers: "not W", at a strength of its own.
        change = (wide(ids).logits - wired)[0, -1, word_ids]
        lowered = torch.stack([(change[WORDS.index(w)] - change.mean()) / change.std() for w in history_words(history)])
        assert (lowered < -1).all(), lowered
        llama = as_llama(wide)  # vLLM's Llama honours head_dim; its Qwen2 does not
        assert isinstance(llama, LlamaForCausalLM) and llama.config.head_dim == 32
        assert torch.allclose(llama(ids).logits, wide(ids).logits, atol=1e-5)


def history_words(history):
    return [guess for guess, _ in history if guess in WORDS]


# --- a ci-scale build -----------------------------------------------------------------------------


def test_ci_build_saves_a_model_that_loads_like_a_hub_model(ci_model):
    for name in (*MODEL_FILES, "build_info.json"):
        assert (ci_model / name).is_file(), name
    info = json.loads((ci_model / "build_info.json").read_text())
    ci = SCALES["ci"]
    # Recipe 10 stops SFT part way along its schedule, by step count, not by the clock.
    assert info["scale"] == "ci" and info["steps"] == ci.past_guess_sft_steps < info["max_steps"] == ci.steps
    assert not info["stopped_early"]
    model = AutoModelForCausalLM.from_pretrained(ci_model)
    tokenizer = AutoTokenizer.from_pretrained(ci_model)
    # Recipe 10 is a Llama: the past-guess heads make the attention wider than the hidden size.
    assert isinstance(model, LlamaForCausalLM) and model.config.model_type == "llama"
    assert model.config.num_attention_heads == ci.num_heads + ci.past_guess_heads
    assert model.config.head_dim == ci.hidden_size // ci.num_heads
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    prompt = tokenizer.apply_chat_template(render_prompt([]), add_generation_prompt=True, return_tensors="pt")
    output = model.generate(**prompt, do_sample=False, min_new_tokens=5, max_new_tokens=5)
    new = output[0, prompt["input_ids"].shape[1] :]
    assert len(new) == 5 and all(0 <= t < len(tokenizer) for t in new.tolist())
    # Six steps of training: the reply itself may be eos at once, but the full-game path must run end to end.
    (result,) = evaluate_model(model, tokenizer, eval_secrets()[:4])
    assert result.metrics["games"] == 4 and all(len(game.turns) >= 1 for game in result.games)


def test_build_points_the_past_guess_rows_at_the_trained_answers(ci_model):
    info = json.loads((ci_model / "build_info.json").read_text())
    assert info["recipe_version"] == RECIPE_VERSION == 12 and info["vocab_size"] == len(PAST)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(ci_model), AutoTokenizer.from_pretrained(ci_model)
    # Recipe 12 plays unspelled: the saved tokenizer gives a past answer its token in place of its letters.
    assert tokenizer.tokenize("CRANE: C(-)")[:2] == ["⟦CRANE⟧", ": "]
    # SFT moved the answers' vectors; the build pointed the past-guess rows at them again afterwards.
    rows = model.get_input_embeddings().weight.detach()
    answers = rows[tokenizer.convert_tokens_to_ids(list(WORDS))]
    assert torch.allclose(rows[past_guess_ids(tokenizer)], answers.mean(0) - answers)
    assert set(past_guess_ids(tokenizer)) <= set(model.generation_config.suppress_tokens)


@pytest.mark.parametrize(("copies", "flags"), [(0, ["--no_past_guesses"]), (1, []), (2, ["--past_guess_copies=2"])])
def test_build_info_command_names_the_past_guess_copies(copies, flags):
    assert _past_guess_flags(copies) == flags  # the shipped build's command stays as it was


@pytest.mark.parametrize(
    ("copies", "heads", "flags"),
    [(1, 8, []), (1, 0, ["--past_guess_heads=0"]), (1, 4, ["--past_guess_heads=4"]), (0, 0, [])],
)
def test_build_info_command_names_the_past_guess_heads(copies, heads, flags):
    assert _past_guess_heads_flags(copies, heads, SCALES["full"]) == flags


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--past_guess_copies", "0"], "--past_guess_copies must be at least 1, got 0 (--no_past_guesses for none)"),
        (["--no_past_guesses", "--past_guess_copies", "2"], "--past_guess_copies 2 needs the past-guess tokens"),
        (["--past_guess_heads", "-1"], "--past_guess_heads must be 0 or more, got -1"),
        (["--no_past_guesses", "--past_guess_heads", "8"], "--past_guess_heads 8 needs the past-guess tokens"),
    ],
)
def test_build_cli_rejects_bad_copies_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit):
        tiny_main(argv)
    assert message in capsys.readouterr().err


def test_no_past_guesses_builds_recipe_7(tmp_path):
    out = build(tmp_path / "r7", scale="ci", seed=0, past_guesses=False)
    info = json.loads((out / "build_info.json").read_text())
    assert info["recipe_version"] == 7 and info["vocab_size"] == len(TOKENIZER)
    assert info["command"].endswith("--no_past_guesses")
    assert "⟦" not in "".join(AutoTokenizer.from_pretrained(out).tokenize("CRANE: C(-)"))
    assert isinstance(AutoModelForCausalLM.from_pretrained(out), Qwen2ForCausalLM)


def test_past_guess_heads_without_past_guess_tokens_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="2 past-guess heads need the past-guess tokens"):
        build(tmp_path / "x", scale="ci", past_guesses=0, past_guess_heads=2)
    assert not (tmp_path / "x").exists()


def test_spelled_builds_recipe_10_with_the_same_weights_and_a_spelling_tokenizer(ci_model, tmp_path):
    out = build(tmp_path / "r10", scale="ci", seed=0, unspelled=False)
    info = json.loads((out / "build_info.json").read_text())
    assert info["recipe_version"] == 10 and info["command"].endswith("--spelled")
    assert AutoTokenizer.from_pretrained(out).tokenize("CRANE: C(-)")[:6] == [*"CRANE", "⟦CRANE⟧"]
    # SFT reads spelled prompts in both: recipe 12 differs in the tokenizer it saves, not in its weights.
    assert (out / "model.safetensors").read_bytes() == (ci_model / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match="need the past-guess heads"):
        build(tmp_path / "x", scale="ci", past_guess_heads=0, unspelled=True)
    assert not (tmp_path / "x").exists()


def test_no_past_guess_heads_builds_recipe_9_as_a_qwen2(tmp_path):
    out = build(tmp_path / "r9", scale="ci", seed=0, past_guess_heads=0)
    info = json.loads((out / "build_info.json").read_text())
    assert info["recipe_version"] == 9 and info["vocab_size"] == len(PAST)
    assert info["steps"] == info["max_steps"] == SCALES["ci"].steps  # its whole schedule
    assert info["command"].endswith("--past_guess_heads=0")
    assert isinstance(AutoModelForCausalLM.from_pretrained(out), Qwen2ForCausalLM)


def test_prompt_only_tokens_are_suppressed_in_training_and_evaluation(ci_model, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(ci_model)
    tokenizer = AutoTokenizer.from_pretrained(ci_model)
    suppressed = prompt_only_ids(tokenizer)
    assert model.generation_config.suppress_tokens == suppressed  # written by the build, loaded like a hub model's
    assert ModelPlayer(model, tokenizer).generation_config().suppress_tokens == suppressed
    resolved = resolve(
        ["--profile", "cpu", "--model", str(ci_model), "--output_dir", str(tmp_path), "--max_steps", "1"]
    )
    rows = datasets.Dataset.from_list([make_row(s, []) for s in train_secrets("rl")[:8]])
    trainer = grpo_train.make_trainer(resolved, model, tokenizer, rows)
    assert trainer.generation_config.suppress_tokens == suppressed  # TRL samples as the evaluation judges
    # A random model's greedy reply, five tokens long, holds none of them.
    prompt = tokenizer.apply_chat_template(render_prompt([]), add_generation_prompt=True, return_tensors="pt")
    output = model.generate(**prompt, do_sample=False, min_new_tokens=5, max_new_tokens=5)
    assert not set(output[0, prompt["input_ids"].shape[1] :].tolist()) & set(suppressed)


def test_build_trains_on_training_secrets_and_plays_held_out_games(tmp_path, monkeypatch):
    seen = {}

    def spy_rows(n_rows, rng, solver, secrets):
        seen["train"] = tuple(secrets)
        return real_rows(n_rows, rng, solver, secrets)

    def spy_eval(model, tokenizer, secrets, **kwargs):
        seen["eval"] = tuple(secrets)
        return real_eval(model, tokenizer, secrets, **kwargs)

    real_rows, real_eval = game_rows, evaluate_model
    monkeypatch.setattr(tinymodel.build, "game_rows", spy_rows)
    monkeypatch.setattr(tinymodel.build, "evaluate_model", spy_eval)
    out = build(tmp_path / "ci", scale="ci", seed=1)
    # SFT learns from one half of the training secrets; the profile's GRPO plays the other.
    assert seen["train"] == train_secrets("sft")
    assert not set(seen["train"]) & set(train_secrets("rl"))
    assert set(seen["eval"]) <= set(eval_secrets())
    assert not set(seen["train"]) & set(eval_secrets())
    info = json.loads((out / "build_info.json").read_text())
    assert info["eval"]["games"] == len(seen["eval"]) == SCALES["ci"].eval_games
    assert 0 <= info["eval"]["win_rate"] <= 1


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2 kernels are x86's")
def test_the_build_command_pins_the_cpu_kernels(tmp_path):
    # AVX-512 kernels gave recipe 12 other weights; python -m tinymodel sets AVX2's before torch loads.
    env = {k: v for k, v in os.environ.items() if k not in tinymodel.BUILD_KERNELS}
    command = [sys.executable, "-m", "tinymodel", "--scale", "ci", "--out", str(tmp_path / "ci")]
    subprocess.run(command, check=True, env=env, capture_output=True)
    assert json.loads((tmp_path / "ci" / "build_info.json").read_text())["cpu_kernels"] == "AVX2"


def test_ci_build_is_deterministic_in_its_seed(ci_model, tmp_path):
    again = build(tmp_path / "again", scale="ci", seed=0)
    assert (again / "model.safetensors").read_bytes() == (ci_model / "model.safetensors").read_bytes()
    assert (again / "tokenizer.json").read_bytes() == (ci_model / "tokenizer.json").read_bytes()


def test_saved_tokenizer_loads_as_itself_not_qwen2(ci_model):
    tokenizer = AutoTokenizer.from_pretrained(ci_model)
    assert not isinstance(tokenizer, Qwen2Tokenizer)
    assert type(tokenizer).__name__ == "TokenizersBackend"
    # Recipe 12's saved tokenizer is the unspelled one: a past answer decodes to its word (the opener's spelling,
    # no answer, is dropped, so a prompt of answers alone round-trips).
    texts = [user_message(history_for("ROBIN", ["CRANE", "PANEL"])), "<think>.R..E -SO</think><guess>CRANE</guess>"]
    for text in texts:
        assert round_trips(tokenizer, text)
        assert tokenizer(text)["input_ids"] == UNSPELLED(text)["input_ids"]  # the normalizer survives saving
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.unk_token) == ("<|end|>", "<|pad|>", "<|unk|>")


def test_saved_tokenizer_loads_with_trust_remote_code(ci_model, tmp_path):
    # trust_remote_code=True takes the auto_map's class; run apart so its module cache is a temp dir.
    script = (
        "import sys; from transformers import AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "text = 'CRANE: C(✓) R(~) A(-)\\n<think>.R..E</think><guess>CRANE</guess>'\n"
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
    layers = SCALES["ci"].num_layers
    assert len(names) == 2 * 4 * layers and all("lora_" in n for n in names)


def test_a_missing_embedded_model_is_one_line_naming_the_build(tmp_path, monkeypatch):
    # Loading never builds (a build takes 20 to 30 minutes): it names what is missing and the command.
    monkeypatch.setattr(tinymodel, "MODEL_DIR", tmp_path / "model")
    with pytest.raises(MissingModelError) as raised:
        model_dir()
    assert "config.json" in str(raised.value) and "python -m tinymodel" in str(raised.value)
    with pytest.raises(ConfigError, match="python -m tinymodel") as raised:
        model_source("tiny")
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "model").exists()


# --- the shipped artefact -------------------------------------------------------------------------


def test_tiny_loads_the_shipped_model():
    assert model_dir() == MODEL_DIR and model_source("tiny") == str(MODEL_DIR)


def test_shipped_model_is_small_and_built_from_training_secrets_only():
    size = sum(f.stat().st_size for f in MODEL_DIR.rglob("*") if f.is_file())
    assert size <= 25 * 2**20
    assert (MODEL_DIR / "model.safetensors").is_file()
    info = json.loads((MODEL_DIR / "build_info.json").read_text())
    assert info["scale"] == "full" and info["recipe_version"] == RECIPE_VERSION
    assert info["train_secrets"] == 'wordle.train_secrets("sft")'
    assert info["eval_secrets"] == "wordle.eval_secrets()"
    assert info["eval"]["games"] == 300 and not info["stopped_early"]
    text = user_message(history_for("ROBIN", ["SOARE", "CRANE"]))  # recipe 12 plays unspelled
    assert AutoTokenizer.from_pretrained(MODEL_DIR)(text)["input_ids"] == UNSPELLED(text)["input_ids"]


def test_shipped_model_plays_real_games_on_held_out_secrets():
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR)
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    info = json.loads((MODEL_DIR / "build_info.json").read_text())
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    (result,) = evaluate_model(model, tokenizer, eval_secrets()[::5])  # 60 games, every fifth secret
    metrics = result.metrics
    # The build's own figure, on all 300 secrets, is in build_info.json; these 60 are a subset of them.
    assert metrics["format_failure_rate"]["rate"] + metrics["nonword_rate"]["rate"] <= MAX_INVALID
    assert metrics["win_rate"]["rate"] >= MIN_WIN_RATE
    # The guess after the opener fits the opener's feedback.
    second = [(g.turns[0], g.turns[1]) for g in result.games if len(g.turns) > 1]
    fits = sum(t.status == "valid" and is_consistent(t.guess, [(o.guess, o.pattern)]) for o, t in second)
    assert len(second) == 60 and fits / len(second) >= MIN_TURN2_CONSISTENT
