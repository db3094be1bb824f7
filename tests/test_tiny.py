"""The embedded tiny model: tokenizer, chat template, a ci-scale build, and the shipped artefact."""

import dataclasses
import json
import os
import platform
import random
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import datasets
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaForCausalLM, Qwen2Tokenizer

import grpo_train
import tinymodel
import tinymodel.build
import tinymodel.mkl
from evaluation.play import ModelPlayer
from evaluation.run import evaluate_model
from models.source import model_source
from settings.config import resolve
from settings.errors import ConfigError
from tinymodel import MODEL_DIR, MODEL_FILES, MissingModelError, model_dir
from tinymodel.bag import (
    add_past_guess_heads,
    as_llama,
    constraint_rows,
    fit_guess_bag,
    guess_states,
    wire_guess_bag,
)
from tinymodel.build import BUILD_LIBRARIES, SCALES, WIRED_LAYERS, build, build_model
from tinymodel.build import main as tiny_main
from tinymodel.data import encode, game_rows, opener, reply_text, think_text
from tinymodel.sft import MARGIN, slowed_optimizer, think_letter_hinge
from tinymodel.tokenizer import (
    CHARACTERS,
    CHAT_TEMPLATE,
    COLUMN_TAGS,
    TAGGED_LETTERS,
    THINK_LETTERS,
    UNSPELLED,
    WORD_SET,
    WORDS,
    build_tokenizer,
    past_guess_ids,
    prompt_only_ids,
)
from training.data import make_row
from wordle import (
    SYSTEM_PROMPT,
    Solver,
    allowed,
    answers,
    candidates,
    eval_secrets,
    history_for,
    is_consistent,
    non_answers,
    parse_completion,
    parse_history,
    render_prompt,
    train_secrets,
)

TOKENIZER = build_tokenizer()
# What the shipped model must keep doing on 50 validation games: floors well below what it measures.
MIN_WIN_RATE, MAX_INVALID, MIN_TURN2_CONSISTENT = 0.3, 0.05, 0.7
VOCAB_TEXT = st.text(alphabet=st.sampled_from(CHARACTERS), max_size=200)
HISTORIES = st.builds(history_for, st.sampled_from(answers()), st.lists(st.sampled_from(allowed()), max_size=5))


def user_message(history):
    return render_prompt(history)[1]["content"]


FEEDBACK_LINE = re.compile(r"(?<=: )[A-Z]\([-~✓]\)(?: [A-Z]\([-~✓]\)){4}(?=\n|\Z)")


def as_decoded(text):
    """``text`` as the tokenizer gives it back: a marked letter of a feedback line that a later line holds again in
    the same column is dropped with the space before it, a past guess's spelling at a feedback line's start is
    dropped, and an answer's comes back from its past-guess token."""
    lines = list(FEEDBACK_LINE.finditer(text))
    later = [
        {(column, item) for line in lines[i + 1 :] for column, item in enumerate(line[0].split(" "))}
        for i in range(len(lines))
    ]
    kept, end = [], 0
    for i, line in enumerate(lines):
        kept.append(text[end : line.start() - 1])  # the space of ": " goes with a dropped first letter
        items = line[0].split(" ")
        kept += [" " + item for column, item in enumerate(items) if (column, item) not in later[i]]
        end = line.end()
    return re.sub(UNSPELLED, lambda m: m.group(0) if m.group(0) in WORD_SET else "", "".join(kept) + text[end:])


def round_trips(tokenizer, text):
    return tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == as_decoded(text)


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
    assert TOKENIZER.tokenize("CRANE: C(-)") == ["⟦CRANE⟧", ": ", "C(-)"]  # a past guess: its own token
    assert TOKENIZER.tokenize("<think>.R..E</think><guess>CRANE</guess>") == [
        "<think>",
        ".₁",
        "R₂",
        ".₃",
        ".₄",
        "E₅",
        "</think>",
        "<guess>",
        "CRANE",
        "</guess>",
    ]
    assert TOKENIZER.tokenize("SOARE: S(✓) O(~) A(-)") == [": ", "S(✓)", " O(~)", " A(-)"]  # no answer: dropped
    assert TOKENIZER.tokenize("crane</guess>") == [*"crane", "</guess>"]  # answers are upper case only


def test_column_tags_mark_each_letter_of_a_feedback_line_with_its_column():
    lines = "SOARE: S(-) O(~) A(✓) R(-) E(-)\nPANEL: P(-) A(~) N(-) E(✓) L(-)"
    tokens = TOKENIZER.tokenize(lines)
    assert tokens[1:6] == ["S(-)₁", " O(~)₂", " A(✓)₃", " R(-)₄", " E(-)₅"]
    assert tokens[-7:] == ["⟦PANEL⟧", ": ", "P(-)₁", " A(~)₂", " N(-)₃", " E(✓)₄", " L(-)₅"]
    assert TOKENIZER.decode(TOKENIZER.convert_tokens_to_ids(tokens)) == as_decoded(lines)  # the tags are not text
    # Only whole lines of five marks after "WORD: " are tagged: a fragment or a sixth mark is not a guess's feedback.
    for text in ("S(-) O(~) A(✓) R(-) E(-)", "SOARES: S(-) O(~) A(✓) R(-) E(-) S(-)", "SOA: S(-) O(~) A(✓)"):
        assert not any(tag in token for token in TOKENIZER.tokenize(text) for tag in COLUMN_TAGS), text


# (reply text, the think's tokens): a think of exactly five letters or dots between the tags is tagged column by
# column, as the feedback's marks are; any other think is spelled as it was. Every one decodes to itself.
THINK_CASES = [
    ("<think>DECO.</think>", ["D₁", "E₂", "C₃", "O₄", ".₅"]),
    ("<think>.....</think>", [".₁", ".₂", ".₃", ".₄", ".₅"]),
    ("<think>.R..</think>", [".", "R", ".", "."]),  # four: no column is certain
    ("<think>.R..EE</think>", [".", "R", ".", ".", "E", "E"]),  # six
    ("<think>.r..E</think>", [".", "r", ".", ".", "E"]),  # lower case is no placed letter
    ("<think>.R. E</think>", [".", "R", ".", " ", "E"]),
]


@pytest.mark.parametrize(("text", "think"), THINK_CASES)
def test_think_characters_are_tagged_with_their_column_only_in_a_five_character_think(text, think):
    tokens = TOKENIZER.tokenize(text)
    assert tokens == ["<think>", *think, "</think>"]
    assert round_trips(TOKENIZER, text)


def test_think_tags_need_the_think_tags_around_them():
    assert TOKENIZER.tokenize("DECO.") == list("DECO.")  # outside a think: plain characters
    assert TOKENIZER.tokenize("<think>DECO.") == ["<think>", *"DECO."]  # never closed
    tokens = TOKENIZER.tokenize("<think>DECO.</think><guess>DECOR</guess><think>A....</think>")
    assert tokens.count("D₁") == 1 and tokens.count("A₁") == 1  # each think on its own


# (history line, its tokens up to the first marked letter, how it decodes): a past answer's spelling gives way to its
# own token, which decodes to the word; another allowed word's spelling (the opener SOARE) is dropped: its marked
# letters spell it again, and five tokens a line that say nothing new would dilute layer 0's mean. Text that is no
# feedback line stays as it is.
PAST_GUESS_CASES = [
    ("CRANE: C(-) R(✓) A(~) N(-) E(-)", ["⟦CRANE⟧", ": ", "C(-)₁"], "CRANE: C(-) R(✓) A(~) N(-) E(-)"),
    ("SOARE: S(-) O(~) A(✓) R(-) E(-)", [": ", "S(-)₁"], ": S(-) O(~) A(✓) R(-) E(-)"),
    ("XCRANE: C(-)", [*"XCRANE", ": ", "C(-)"], "XCRANE: C(-)"),  # not a word at a line's start
    ("CRANE, C(-)", [*"CRANE", ",", " C(-)"], "CRANE, C(-)"),  # not a feedback line
    ("crane: c(-)", [*"crane", ": ", "c"], "crane: c(-)"),
]


@pytest.mark.parametrize(("text", "start", "decoded"), PAST_GUESS_CASES)
def test_a_past_answer_becomes_its_own_token_and_other_spellings_drop(text, start, decoded):
    ids = TOKENIZER(text, add_special_tokens=False)["input_ids"]
    assert TOKENIZER.convert_ids_to_tokens(ids)[: len(start)] == start
    assert TOKENIZER.decode(ids) == decoded == as_decoded(text)


def test_past_guess_tokens_mark_every_answer_line_of_a_prompt_and_never_a_reply():
    history = history_for("ROBIN", ["SOARE", "CRANE", "PANEL", "CRANE"])
    tokens = TOKENIZER.tokenize(user_message(history))
    # A guess played again gives its marked letters to its last line; its first line keeps only the word, spelled.
    assert [t for t in tokens if t.startswith("⟦")] == ["⟦PANEL⟧", "⟦CRANE⟧"]
    assert tokens[tokens.index("⟦PANEL⟧") - 7 : tokens.index("⟦PANEL⟧")] == [*"CRANE", ":", "\n"]
    marked = [t.strip() for t in tokens if "(" in t]
    assert len(marked) == len(set(marked))  # each marked letter once: the first CRANE's line gives way to the second's
    assert tokens[-6:] == [": ", "C(-)₁", " R(~)₂", " A(-)₃", " N(~)₄", " E(-)₅"]
    assert tokens[tokens.index("\n") + 1] == ": "  # the opener's spelling dropped
    assert "⟦" not in "".join(TOKENIZER.tokenize(reply_text(history, "ROBIN")))
    assert round_trips(TOKENIZER, reply_text(history, "ROBIN"))  # replies are untouched
    assert TOKENIZER.convert_tokens_to_ids("⟦CRANE⟧") in prompt_only_ids(TOKENIZER)  # never generated
    assert len(past_guess_ids(TOKENIZER)) == len(WORDS)


def test_a_marked_letter_is_kept_only_in_the_last_line_that_holds_it_in_its_column():
    # L green in columns 4 and 5 of three lines would pull L's think letters three times as hard as one line does.
    tokens = TOKENIZER.tokenize(user_message(history_for("STILL", ["RAISE", "SWILL", "SKILL", "SPILL"])))
    assert tokens[tokens.index("⟦SWILL⟧") : tokens.index("⟦SKILL⟧")] == ["⟦SWILL⟧", ": ", "W(-)₂", "\n"]
    assert tokens[-5:] == ["S(✓)₁", " P(-)₂", " I(✓)₃", " L(✓)₄", " L(✓)₅"]
    assert {"R(-)₁", " S(~)₄"} <= set(tokens)  # S in another column, or with another mark, is another constraint


@settings(max_examples=100, deadline=None)
@given(HISTORIES, VOCAB_TEXT)
def test_column_tagged_prompts_round_trip(history, text):
    assert round_trips(TOKENIZER, user_message(history))
    assert round_trips(TOKENIZER, text)


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


def test_prompts_are_short():
    # Pins the fixed prompt phrases to single tokens: a renderer change that breaks them shows here.
    first = TOKENIZER.apply_chat_template(render_prompt([]), add_generation_prompt=True, return_dict=False)
    five = history_for("ROBIN", ["SOARE", "CLINT", "BUMPH", "FOLKY", "GAWKS"])
    last = TOKENIZER.apply_chat_template(render_prompt(five), add_generation_prompt=True, return_dict=False)
    assert len(first) == 8
    # per line: ': ', 5 marked letters, newline (none of these guesses is an answer), less O(✓)₂ and K(-)₄ in the
    # lines that a later one repeats them in
    assert len(last) == 8 + 5 * 7 - 2
    answered = history_for("ROBIN", ["CRANE"])  # an answer's spelling is one token
    assert (
        len(TOKENIZER.apply_chat_template(render_prompt(answered), add_generation_prompt=True, return_dict=False)) == 16
    )


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


def test_game_rows_answer_with_the_opener_then_a_still_possible_answer_from_any_opening():
    solver = Solver()
    rows = game_rows(600, random.Random(0), solver, train_secrets())
    assert rows == game_rows(600, random.Random(0), solver, train_secrets())  # deterministic
    turns, openers = set(), []
    for row in rows:
        history = parse_history(row["prompt"][1]["content"])
        guess = parse_completion(row["completion"])
        turns.add(len(history))
        openers += [history[0][0]] if history else []
        assert row["completion"][0]["content"] == reply_text(history, guess)
        if history:
            assert guess in candidates(history).words(), (history, guess)
        else:
            assert guess == opener() == "RAISE"  # the answer of most opening information: one token
            assert TOKENIZER.tokenize(row["completion"][0]["content"])[-2:] == ["RAISE", "</guess>"]
    assert turns == set(range(6))
    # Its own opener in 40% of histories, a random answer or allowed word in the rest.
    own = openers.count(opener()) / len(openers)
    answer_set = set(answers())
    assert 0.3 < own < 0.5 and 0.2 < sum(o in answer_set - {opener()} for o in openers) / len(openers) < 0.4


def test_game_rows_play_half_their_games_against_stand_in_secrets_and_never_against_another_answer():
    # One training secret: a history that rules CRANE out was played against a stand-in (an allowed word that is
    # not an answer), and one that no stand-in fits either would mean another answer was the secret.
    rows = game_rows(160, random.Random(1), Solver(), ("CRANE",))
    histories = [h for h in (parse_history(r["prompt"][1]["content"]) for r in rows) if h]
    ruled_out = [h for h in histories if "CRANE" not in candidates(h).words()]
    assert 0.25 < len(ruled_out) / len(histories) < 0.6
    for history in ruled_out:
        assert candidates(history, pool=non_answers()).words(), history
    assert all(row["candidates"] for row in rows)  # a state no answer fits has nothing to learn: never a row


CONSTRAINTS = constraint_rows(TOKENIZER)


@pytest.mark.parametrize(
    "token, word, placed, present",
    [
        (" R(✓)₂", "ARBOR", 0, 0),  # R in column 2: kept
        (" R(✓)₂", "CRANE", 0, 0),
        (" R(✓)₂", "ROBIN", 1, 0),  # an R, but not in column 2
        ("S(~)₁", "ABASE", 0, 0),  # an S, elsewhere
        ("S(~)₁", "SALTY", 1, 0),  # an S where the mark said not
        ("S(~)₁", "BLOAT", 0, 1),  # no S at all
        (" E(-)₅", "ROBIN", 0, 0),
        (" E(-)₅", "CRANE", 1, 1),  # an E, and in column 5
        (" E(-)₅", "BEACH", 0, 1),  # an E: ruled out unless the same line marks another E (one token cannot see it)
    ],
)
def test_constraint_rows_say_what_a_marked_letter_rules_out(token, word, placed, present):
    row, column = TOKENIZER.convert_tokens_to_ids(token), WORDS.index(word)
    assert (CONSTRAINTS[0][row, column], CONSTRAINTS[1][row, column]) == (placed, present)


def test_constraint_rows_rule_out_every_past_guess_and_keep_the_secret():
    # Summed over a prompt's tokens, the rows count the feedback a word breaks. A past guess that did not win always
    # breaks its own placed rows (its yellow or grey letter sits where the mark says it does not belong), so "not W"
    # needs no row of its own; the secret breaks none unless a line marks one letter both grey and not.
    rng, (placed, present) = random.Random(0), CONSTRAINTS
    marked = torch.zeros(len(TOKENIZER), dtype=torch.bool)
    marked[TOKENIZER.convert_tokens_to_ids(list(TAGGED_LETTERS))] = True
    assert not placed[~marked].any() and not present[~marked].any()  # every other token rules nothing out
    for _ in range(200):
        secret = rng.choice(WORDS)
        guesses = [rng.choice(WORDS) if rng.random() < 0.5 else rng.choice(allowed()) for _ in range(rng.randint(1, 4))]
        history = history_for(secret, guesses)
        text = TOKENIZER.apply_chat_template(render_prompt(history), add_generation_prompt=True, tokenize=False)
        ids = torch.tensor(TOKENIZER(text, add_special_tokens=False)["input_ids"])
        for guess, pattern in history:
            if guess in WORD_SET and pattern != "GGGGG":
                assert placed[ids, WORDS.index(guess)].sum() >= 1, history
        grey_and_not = any(
            len({mark for letter_, mark in zip(guess, pattern) if letter_ == letter}) > 1
            for guess, pattern in history
            for letter, mark in zip(guess, pattern)
            if mark == "B"
        )
        if not grey_and_not:
            assert placed[ids, WORDS.index(secret)].sum() + present[ids, WORDS.index(secret)].sum() == 0, history


# sum: the probe's alternative (research log)
@pytest.mark.parametrize("pooling, constraint_weight", [("mean", 0.0), ("sum", 0.0), ("mean", 400.0)])
def test_guess_bag_learns_to_favour_still_possible_answers(pooling, constraint_weight):
    tokenizer = TOKENIZER
    rows = game_rows(300, random.Random(0), Solver(), train_secrets())
    encoded = encode(tokenizer, rows)
    matrix = fit_guess_bag(
        encoded,
        tokenizer,
        steps=100,
        batch_size=32,
        learning_rate=1e-2,
        seed=0,
        pooling=pooling,
        constraint_weight=constraint_weight,
    )
    assert matrix.shape == (len(tokenizer), len(WORDS))
    column = {t: j for j, t in enumerate(tokenizer.convert_tokens_to_ids(list(WORDS)))}
    gains = []
    states = guess_states(encoded)
    for _, prefix, cands in states:
        probs = getattr(matrix[prefix], pooling)(0).softmax(-1)  # the rows' mean or sum
        gains.append(float(probs[[column[c] for c in cands]].sum()) / (len(cands) / len(WORDS)))
    # Against a uniform guess, the states it was fitted on put many times more mass on their candidates.
    assert sum(gains) / len(gains) > 5
    if pooling == "mean":
        # A past-guess token's row says "not W" and nothing else, with one weight for every W, learnt to be
        # negative: a past guess is never the answer (the game stops at a win).
        past = torch.tensor(past_guess_ids(tokenizer))
        own = matrix[past, torch.arange(len(WORDS))]
        assert float(own[0]) < 0 and torch.equal(own, torch.full_like(own, float(own[0])))
        assert matrix[past].count_nonzero() == len(WORDS)
    if constraint_weight:
        # Every marked letter's row is lower on the answers it rules out than on the rest.
        placed, present = CONSTRAINTS
        tagged = TOKENIZER.convert_tokens_to_ids(list(TAGGED_LETTERS))
        both = [(t, o) for t, o in zip(tagged, (placed[tagged] + present[tagged]) > 0) if o.any() and (~o).any()]
        assert len(both) > 500 and all(matrix[t][o].mean() < matrix[t][~o].mean() for t, o in both)
        # At that weight a broken constraint outweighs what the fitted rows learnt: the top answer fits.
        fits = [int(matrix[prefix].mean(0).argmax()) in {column[c] for c in cands} for _, prefix, cands in states]
        assert sum(fits) / len(fits) > 0.99


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


def test_wiring_starts_the_rows_the_bag_does_not_use_apart_and_all_rows_at_one_norm():
    # Tokens whose bag row is zero (here: the reply's tags, eos and think letters) are all slack. One shared slack
    # direction made them one vector, and SFT left them at cosine 0.8-0.9: eos then took a doubtful letter's mass.
    spec = dataclasses.replace(SCALES["ci"], hidden_size=64, num_heads=2, num_kv_heads=2)
    model = build_model(TOKENIZER, spec, seed=0)
    generator = torch.Generator().manual_seed(0)
    matrix = torch.randn(len(TOKENIZER), 16, generator=generator) @ torch.randn(16, len(WORDS), generator=generator)
    structure = ["<|end|>", "<think>", "</think>", "<guess>", "</guess>"]
    reply = TOKENIZER.convert_tokens_to_ids([*structure, *THINK_LETTERS[:6]])
    matrix[reply] = 0.0
    encoded = encode(TOKENIZER, game_rows(40, random.Random(0), Solver(), train_secrets()))
    word_ids = TOKENIZER.convert_tokens_to_ids(list(WORDS))
    wire_guess_bag(model, matrix, word_ids, encoded)
    rows = model.get_input_embeddings().weight.detach()
    unit = torch.nn.functional.normalize(rows[reply], dim=1)
    cosine = unit @ unit.T
    assert cosine[~torch.eye(len(reply), dtype=torch.bool)].abs().max() < 0.9  # 1.0 with one slack direction
    others = [t for t in range(len(TOKENIZER)) if t not in {*word_ids, TOKENIZER.pad_token_id}]  # pad: masked
    norms = rows[others].norm(dim=1)
    assert torch.allclose(norms, norms[0].expand_as(norms), rtol=1e-4)  # layer 0's RMSNorm scales every row alike


@pytest.mark.parametrize("rate", [0.3, 0.1])
def test_slowed_optimizer_moves_the_wired_path_at_its_share_of_every_step(rate):
    # Two copies of a model, one step each on the same loss: the slowed layers and embedding rows move ``rate`` times
    # what full-rate AdamW moves them, every other weight exactly as far.
    spec = dataclasses.replace(SCALES["ci"], hidden_size=64, num_heads=2, num_kv_heads=2)
    full, slowed = build_model(TOKENIZER, spec, seed=0), build_model(TOKENIZER, spec, seed=0)
    rows = TOKENIZER.convert_tokens_to_ids(list(WORDS[:50]))
    ids = torch.tensor([TOKENIZER.convert_tokens_to_ids(["<think>", *WORDS[:20], "</think>", *WORDS[20:50]])])
    matrices, vectors = ([p for p in full.parameters() if (p.ndim >= 2) == matrix] for matrix in (True, False))
    moved = {}
    for name, model, optimizer in (
        (
            "full",
            full,
            torch.optim.AdamW(
                [{"params": matrices, "weight_decay": 0.01}, {"params": vectors, "weight_decay": 0.0}], lr=1e-3
            ),
        ),
        ("slowed", slowed, slowed_optimizer(slowed, 1e-3, WIRED_LAYERS, rows, rate)),
    ):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        model(ids, labels=ids).loss.backward()
        optimizer.step()
        moved[name] = {n: p.detach() - before[n] for n, p in model.named_parameters()}
    wired = [n for n in moved["full"] if n.startswith(WIRED_LAYERS)]
    assert len(wired) == 4  # layer 0's value and output projections (their biases) and its input norm
    assert "lm_head.weight" in moved["full"]  # untied: a matrix of its own, whose answer rows are slowed too
    for n, step in moved["full"].items():
        if n in ("model.embed_tokens.weight", "lm_head.weight"):
            others = torch.ones(len(TOKENIZER), dtype=torch.bool)
            others[rows] = False
            assert torch.allclose(moved["slowed"][n][rows], rate * step[rows], rtol=1e-3, atol=1e-7)
            assert torch.allclose(moved["slowed"][n][others], step[others], rtol=1e-3, atol=1e-7)
            assert step[rows].abs().max() > 1e-5  # the rows did move
        else:
            assert torch.allclose(moved["slowed"][n], (rate if n in wired else 1.0) * step, rtol=1e-3, atol=1e-7), n


# (the best listed candidate's logit, the likeliest think letter's, the hinge): the hinge is the part of MARGIN that
# the gap does not cover, so a state where the think letter already trails by MARGIN costs nothing.
HINGE_CASES = [(10.0, 1.0, 0.0), (10.0, 2.0, 0.0), (10.0, 5.0, MARGIN - 5.0), (10.0, 12.0, MARGIN + 2.0)]


@pytest.mark.parametrize(("best", "letter", "hinge"), HINGE_CASES)
def test_the_think_letter_hinge_keeps_every_think_letter_margin_under_the_best_candidate(best, letter, hinge):
    think = TOKENIZER.convert_tokens_to_ids(list(THINK_LETTERS))
    candidate, other, unlisted = TOKENIZER.convert_tokens_to_ids(["CRANE", "SLATE", "ROBIN"])
    logits = torch.zeros(1, len(TOKENIZER))
    logits[0, [candidate, other, think[7]]] = torch.tensor([best, best - 3.0, letter])
    logits[0, unlisted] = 50.0  # no candidate of the state: it never counts as the best
    listed = torch.tensor([[other, candidate, -1]])  # padded
    assert think_letter_hinge(logits, listed, think).item() == pytest.approx(hinge)


def test_past_guess_heads_keep_the_mean_and_save_as_the_same_llama():
    # The full scale's width, one layer. Without "not W" rows a past guess's token has the bag's own row, which the
    # heads' least-squares key hardly tells apart (a built model's heads put 0.2% of their attention on past guesses:
    # research log, e75), so this pins only what the graft guarantees.
    spec = dataclasses.replace(SCALES["ci"], hidden_size=256, num_heads=8, num_kv_heads=8)
    model = build_model(TOKENIZER, spec, seed=0)
    encoded = encode(TOKENIZER, game_rows(40, random.Random(0), Solver(), train_secrets()))
    word_ids = TOKENIZER.convert_tokens_to_ids(list(WORDS))
    wire_guess_bag(model, fit_guess_bag(encoded, TOKENIZER, 20, 8, 1e-2, 0), word_ids, encoded)
    history = history_for("ROBIN", ["SOARE", "CRANE", "PANEL", "TIMID"])
    text = TOKENIZER.apply_chat_template(render_prompt(history), add_generation_prompt=True, tokenize=False)
    ids = TOKENIZER(text + "<think>.....</think><guess>", add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        wired = model(ids).logits
        silent = add_past_guess_heads(model, TOKENIZER, 8, strength=0.0)  # the added heads, their output 0
        assert silent.config.num_attention_heads == 16 and silent.config.head_dim == 32
        assert torch.allclose(silent(ids).logits, wired, atol=1e-5)  # the widened model computes the same
        wide = add_past_guess_heads(model, TOKENIZER, 8, strength=0.01)
        wide.set_attn_implementation("eager")
        attention = wide(ids, output_attentions=True).attentions[0][0, :, -1]  # layer 0 at <guess>: heads x keys
        uniform = torch.full_like(attention[:8], 1 / ids.shape[1])
        assert torch.allclose(attention[:8], uniform)  # the mean's heads still average every token
        assert not torch.allclose(attention[8:], uniform, atol=1e-3)  # the added ones have queries and keys
        assert not torch.allclose(wide(ids).logits, wired, atol=1e-5)  # and an output
        llama = as_llama(wide)  # vLLM's Llama honours head_dim; its Qwen2 does not
        assert isinstance(llama, LlamaForCausalLM) and llama.config.head_dim == 32
        assert torch.allclose(llama(ids).logits, wide(ids).logits, atol=1e-5)


# --- a ci-scale build -----------------------------------------------------------------------------


def test_ci_build_saves_a_model_that_loads_like_a_hub_model(ci_model):
    for name in (*MODEL_FILES, "build_info.json"):
        assert (ci_model / name).is_file(), name
    info = json.loads((ci_model / "build_info.json").read_text())
    ci = SCALES["ci"]
    # SFT stops part way along its schedule, by step count, not by the clock.
    assert info["scale"] == "ci" and info["steps"] == ci.past_guess_sft_steps < info["max_steps"] == ci.steps
    assert not info["stopped_early"]
    # What decides the bytes besides the code and the seed: the libraries SFT runs through, and the CPU.
    assert info["libraries"] == {name: metadata.version(name) for name in BUILD_LIBRARIES}
    assert info["libraries"]["torch"] == torch.__version__ and info["cpu"]
    if platform.machine() == "x86_64" and Path("/proc/cpuinfo").is_file():
        assert re.search(r"\(family \d+, model \d+\)$", info["cpu"]), info["cpu"]  # a cloud CPU's bare name says little
    model = AutoModelForCausalLM.from_pretrained(ci_model)
    tokenizer = AutoTokenizer.from_pretrained(ci_model)
    # A Llama: the past-guess heads make the attention wider than the hidden size.
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
    (result,) = evaluate_model(model, tokenizer, train_secrets("val")[:4])
    assert result.metrics["games"] == 4 and all(len(game.turns) >= 1 for game in result.games)


def test_build_saves_past_guess_tokens_that_prompts_use_and_replies_never_do(ci_model):
    info = json.loads((ci_model / "build_info.json").read_text())
    assert info["vocab_size"] == len(TOKENIZER)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(ci_model), AutoTokenizer.from_pretrained(ci_model)
    # The saved tokenizer gives a past answer its token in place of its letters, as SFT read it.
    assert tokenizer.tokenize("CRANE: C(-)")[:2] == ["⟦CRANE⟧", ": "]
    assert set(past_guess_ids(tokenizer)) <= set(model.generation_config.suppress_tokens)


@pytest.mark.parametrize(
    "argv", [["--spelled"], ["--no_past_guesses"], ["--past_guess_copies", "2"], ["--past_guess_heads", "0"]]
)
def test_build_cli_has_one_recipe_and_no_flags_for_old_ones(argv, capsys):
    # Old recipes rebuild from the commits that built them (docs/embedded-model.md), not from flags here.
    with pytest.raises(SystemExit):
        tiny_main(argv)
    assert "unrecognized arguments" in capsys.readouterr().err


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
    # With vLLM, the same mask as its allow list (vLLM's training run: tests/test_vllm.py).
    allowed = grpo_train.generation_mask(model.generation_config, tokenizer, use_vllm=True)["allowed_token_ids"]
    assert sorted([*allowed, *suppressed]) == list(range(len(tokenizer)))
    assert grpo_train.generation_mask(GenerationConfig(), tokenizer, use_vllm=True) == {}
    # A random model's greedy reply, five tokens long, holds none of them.
    prompt = tokenizer.apply_chat_template(render_prompt([]), add_generation_prompt=True, return_tensors="pt")
    output = model.generate(**prompt, do_sample=False, min_new_tokens=5, max_new_tokens=5)
    assert not set(output[0, prompt["input_ids"].shape[1] :].tolist()) & set(suppressed)


def test_build_trains_on_training_secrets_and_scores_itself_on_validation_games(tmp_path, monkeypatch):
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
    assert set(seen["eval"]) <= set(train_secrets("val"))  # the held-out secrets are read once, by the main job
    assert not set(seen["train"]) & set(eval_secrets()) and not set(seen["train"]) & set(seen["eval"])
    info = json.loads((out / "build_info.json").read_text())
    assert info["eval"]["games"] == len(seen["eval"]) == SCALES["ci"].eval_games
    assert 0 <= info["eval"]["win_rate"] <= 1


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2 kernels are x86's")
def test_the_build_command_pins_the_cpu_kernels_and_one_thread(tmp_path):
    # AVX-512 kernels give other weights; python -m tinymodel sets AVX2's before torch loads. Another thread count
    # sums in other chunks, so it builds on one whatever the environment asks for.
    env = {k: v for k, v in os.environ.items() if k not in tinymodel.BUILD_KERNELS} | {"OMP_NUM_THREADS": "2"}
    command = [sys.executable, "-m", "tinymodel", "--scale", "ci", "--out", str(tmp_path / "ci")]
    subprocess.run(command, check=True, env=env, capture_output=True)
    info = json.loads((tmp_path / "ci" / "build_info.json").read_text())
    assert (info["cpu_kernels"], info["torch_threads"]) == ("AVX2", 1)
    if tinymodel.mkl.c_compiler():
        assert info["mkl_path"] != tinymodel.mkl.OWN  # with a compiler, never MKL's own path on another maker's CPU


# Where MKL's maker check is answered: another maker's x86-64 CPU with AVX2.
ANSWERED_HERE = tinymodel.mkl.needs_answer(tinymodel.mkl.cpu_fields(), platform.machine())
INTEL_CPU = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx avx2 avx512f\n\nprocessor\t: 1\n"
AMD_CPU = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nflags\t\t: fpu sse2 avx avx2 fma\n"
OLD_AMD_CPU = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx\n"
HYGON_CPU = "processor\t: 0\nvendor_id\t: HygonGenuine\nflags\t\t: fpu avx2\n"


@pytest.mark.parametrize(
    ("cpuinfo", "machine", "answer"),
    [
        (INTEL_CPU, "x86_64", False),  # MKL takes the pinned AVX2 path by itself
        (AMD_CPU, "x86_64", True),
        (HYGON_CPU, "x86_64", True),  # any maker but Intel
        (OLD_AMD_CPU, "x86_64", False),  # no AVX2: no path of MKL's is the shipped one's
        (AMD_CPU, "aarch64", False),
        ("", "x86_64", False),  # no /proc/cpuinfo: nothing known to act on
    ],
)
def test_mkl_maker_check_is_answered_only_on_another_makers_avx2_cpu(cpuinfo, machine, answer):
    assert tinymodel.mkl.needs_answer(tinymodel.mkl.cpu_fields(cpuinfo), machine) is answer


def test_cpu_fields_reads_the_first_core():
    fields = tinymodel.mkl.cpu_fields(INTEL_CPU)
    assert fields["vendor_id"] == "GenuineIntel" and "avx2" in fields["flags"].split() and "processor" in fields


@pytest.mark.skipif(
    not ANSWERED_HERE or not tinymodel.mkl.c_compiler(),
    reason="MKL's maker check is answered on another maker's x86-64 CPU with AVX2, with a C compiler",
)
def test_answered_mkl_takes_its_avx2_path_on_another_makers_cpu():
    # MKL's banner names the path it takes: "Intel(R) Architecture processors" is its own path on another maker's CPU.
    code = (
        "import os; os.environ['MKL_ENABLE_INSTRUCTIONS'] = 'AVX2'\n"
        "from tinymodel.mkl import answer_intel\n"
        "assert answer_intel() is None\n"
        "import torch; a = torch.ones(64, 64); a @ a\n"
    )
    env = os.environ | {"MKL_VERBOSE": "1"}
    banner = subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True, text=True).stdout
    assert "Intel(R) AVX2) enabled processors" in banner
    code = code.replace("from tinymodel.mkl import answer_intel\nassert answer_intel() is None\n", "")
    banner = subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True, text=True).stdout
    assert "Intel(R) Architecture processors" in banner  # the same, unanswered: MKL's own path


@pytest.mark.skipif(
    not ANSWERED_HERE,
    reason="MKL's maker check is answered on another maker's x86-64 CPU with AVX2",
)
def test_without_a_c_compiler_the_build_command_says_so_in_one_line(tmp_path):
    env = os.environ | {"PATH": str(tmp_path)}  # no cc, gcc or clang
    command = [sys.executable, "-m", "tinymodel", "--scale", "ci", "--out", str(tmp_path / "ci")]
    done = subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    said = [line for line in done.stderr.splitlines() if line.startswith("python -m tinymodel:")]
    why = "no C compiler (cc, gcc or clang) to build MKL's maker answer"
    assert said == [f"python -m tinymodel: {why}; MKL takes its own path and the weights will differ"]
    assert json.loads((tmp_path / "ci" / "build_info.json").read_text())["mkl_path"] == tinymodel.mkl.OWN


def test_mkl_answer_refuses_once_torch_has_loaded():
    with pytest.raises(RuntimeError, match="before torch is imported"):
        tinymodel.mkl.answer_intel()


def test_ci_build_is_deterministic_in_its_seed(ci_model, tmp_path):
    again = build(tmp_path / "again", scale="ci", seed=0)
    assert (again / "model.safetensors").read_bytes() == (ci_model / "model.safetensors").read_bytes()
    assert (again / "tokenizer.json").read_bytes() == (ci_model / "tokenizer.json").read_bytes()


def test_saved_tokenizer_loads_as_itself_not_qwen2(ci_model):
    tokenizer = AutoTokenizer.from_pretrained(ci_model)
    assert not isinstance(tokenizer, Qwen2Tokenizer)
    assert type(tokenizer).__name__ == "TokenizersBackend"
    # A past answer decodes to its word (the opener's spelling, no answer, is dropped: as_decoded).
    texts = [user_message(history_for("ROBIN", ["CRANE", "PANEL"])), "<think>.R..E -SO</think><guess>CRANE</guess>"]
    for text in texts:
        assert round_trips(tokenizer, text)
        assert tokenizer(text)["input_ids"] == TOKENIZER(text)["input_ids"]  # the normalizer survives saving
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
    # Loading never builds (a build takes 17 to 27 minutes): it names what is missing and the command.
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
    assert size <= 32 * 2**20  # a git artefact, rebuilt now and then: 30 MB with its output layer of its own (untied)
    assert (MODEL_DIR / "model.safetensors").is_file()
    info = json.loads((MODEL_DIR / "build_info.json").read_text())
    assert info["scale"] == "full" and info["cpu_kernels"] == "AVX2"
    assert info["train_secrets"] == 'wordle.train_secrets("sft")'
    assert info["eval_secrets"] == 'wordle.train_secrets("val")'
    assert info["eval"]["games"] == len(train_secrets("val")) and not info["stopped_early"]
    text = user_message(history_for("ROBIN", ["SOARE", "CRANE"]))
    assert AutoTokenizer.from_pretrained(MODEL_DIR)(text)["input_ids"] == TOKENIZER(text)["input_ids"]


def test_shipped_model_plays_real_games_on_validation_secrets():
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR)
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    info = json.loads((MODEL_DIR / "build_info.json").read_text())
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    secrets = train_secrets("val")[::4]  # 51 games, every fourth validation secret
    (result,) = evaluate_model(model, tokenizer, secrets)
    metrics = result.metrics
    # The build's own figure, on all 202 validation secrets, is in build_info.json; these are a subset of them.
    assert metrics["format_failure_rate"]["rate"] + metrics["nonword_rate"]["rate"] <= MAX_INVALID
    assert metrics["win_rate"]["rate"] >= MIN_WIN_RATE
    # The guess after the opener fits the opener's feedback.
    second = [(g.turns[0], g.turns[1]) for g in result.games if len(g.turns) > 1]
    fits = sum(t.status == "valid" and is_consistent(t.guess, [(o.guess, o.pattern)]) for o, t in second)
    assert len(second) == len(secrets) and fits / len(second) >= MIN_TURN2_CONSISTENT
