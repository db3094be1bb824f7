"""Constrained decoding: the whole reply follows ``guess_regex``'s grammar token by token, for the tiny
model's letter-level tokenizer, Qwen's byte-level BPE and Mistral's SentencePiece, whatever the weights and the budget; and a
model's sampling generation_config never leaks into greedy evaluation."""

from __future__ import annotations

import logging
import re

import pytest
import torch
import transformers
from transformers import GenerationConfig

import evaluate as evaluate_cli
from evaluation import ModelPlayer, play
from evaluation.constrain import GuessConstraint
from evaluation.report import read_json
from evaluation.run import select_secrets
from models.loading import load_for_inference
from settings.arguments import TINY
from settings.config import resolve
from wordle import allowed, candidates
from wordle.completion import guess_regex
from wordle.decoding import Decoding

SECRETS = select_secrets(3)


@pytest.fixture(scope="module")
def tiny():
    """The embedded model's tokenizer on random weights, which never write the reply format themselves."""
    torch.set_num_threads(1)
    model, tokenizer = load_for_inference(TINY, device="cpu")
    torch.manual_seed(0)
    return type(model)(model.config).eval(), tokenizer


@pytest.fixture(scope="module")
def qwen(qwen_dir):
    torch.set_num_threads(1)
    return load_for_inference(str(qwen_dir), device="cpu")


@pytest.fixture(scope="module")
def mistral(mistral_dir):
    """SentencePiece: "▁C" reads "C" alone and " C" inside a reply, so a token's text depends on where it is."""
    torch.set_num_threads(1)
    return load_for_inference(str(mistral_dir), device="cpu")


@pytest.fixture(scope="module")
def constraint_of():
    """One GuessConstraint per tokenizer: decoding Qwen's 151,669 tokens takes a second."""
    built = {}

    def get(tokenizer) -> GuessConstraint:
        if id(tokenizer) not in built:
            built[id(tokenizer)] = GuessConstraint(tokenizer, [tokenizer.eos_token_id])
        return built[id(tokenizer)]

    return get


# --- the regex (vLLM's form) ---------------------------------------------------------------------------


def test_guess_regex_matches_a_valid_reply_and_rejects_a_non_word():
    pattern = re.compile(guess_regex())
    assert pattern.fullmatch("<think>placed letters .R..E</think><guess>CRANE</guess>")
    assert not pattern.fullmatch("<think>x</think><guess>ABCDE</guess>")  # not a word
    assert not pattern.fullmatch("<think><guess>A</guess></think><guess>CRANE</guess>")  # a tag in the think
    small = re.compile(guess_regex(["crane", "slate"]))
    assert small.fullmatch("<think></think><guess>SLATE</guess>") and not small.fullmatch(
        "<think></think><guess>ABBEY</guess>"
    )
    with pytest.raises(ValueError):
        guess_regex(["toolong"])


def test_constrain_vllm_flag_sets_the_regex_only_with_vllm():
    with pytest.raises(ValueError, match="use_vllm"):
        resolve(["--profile", "cpu", "--constrain_vllm", "allowed", "--dry-run"])
    r = resolve(["--profile", "cpu", "--constrain_vllm", "allowed", "--use_vllm", "true", "--dry-run"])
    assert r.training.vllm_structured_outputs_regex == guess_regex()


# --- the grammar, state by state -------------------------------------------------------------------


EOS = "eos"
WORDS = ("CRANE", "CRAMP")


def _prefix_of_a_reply(text: str) -> bool:
    """Whether ``text`` can still become ``<think>…</think><guess>WORD</guess>`` with a word of WORDS."""
    if not text.startswith("<think>"):
        return "<think>".startswith(text)
    closing = text.find("<", len("<think>"))
    if closing < 0:
        return True
    tail = text[closing:]
    if tail.startswith("</think>"):  # any whitespace before "<guess>", as the reply reader takes it
        tail = "</think>" + tail[len("</think>") :].lstrip(" \t\n\r")
    return any(f"</think><guess>{w}</guess>".startswith(tail) for w in WORDS)


@pytest.mark.parametrize(
    ("model", "text", "left", "free", "tokens"),
    [
        ("tiny", "", 20, False, {"<think>", "<"}),  # the reply opens with <think>, in one token or spelled
        ("tiny", "<think>", 20, True, {"</think>", "<"}),  # free text, or close the think
        ("tiny", "<think>x", 6, True, {"</think>"}),  # no room to spell "</think>" from "<"
        ("tiny", "<think>x", 5, False, {"</think>"}),  # only just room for "</think><guess>CRANE</guess>" + eos
        ("tiny", "<think>x</think><guess>", 20, False, {"C", "CRANE", "CRAMP"}),  # a word's token or its letters
        ("tiny", "<think>x</think><guess>CRA", 20, False, {"N", "M"}),
        ("tiny", "<think>x</think><guess>", 3, False, {"CRANE", "CRAMP"}),  # no room to spell a word
        ("tiny", "<think>x</think><guess>CRANE</guess>", 20, False, {EOS}),  # complete: stop
        ("tiny", "<think>x</think> <guess>", 20, False, {"C", "CRANE", "CRAMP"}),  # whitespace, as the reader takes
        ("tiny", "<think>x</think>x<guess>", 20, None, None),  # off the grammar: an error, never a guess
        ("qwen", "", 20, False, {"<think>", "<", "<th"}),
        ("qwen", "<think>", 20, True, {"</think>", "<", " <", ".</"}),  # some of the tokens that close it
        ("qwen", "<think>x</think><guess>", 20, False, {"C", "CR"}),
        # The canonical form that chat templates keep (the supervised rows'): newlines around the think, and between.
        ("qwen", "<think>\nx\n</think>", 20, False, {"\n\n", "<", " <", "\n"}),
        ("qwen", "<think>\nx\n</think>\n\n<guess>", 20, False, {"C", "CR"}),
        ("mistral", "", 20, False, {"<"}),  # "▁<" reads " <" inside a reply: not a reply's start
        ("mistral", "<think>", 20, True, {"</", ".</", " </", "<"}),
        ("mistral", "<think>x</think><guess>", 20, False, {"C", "CR"}),  # never "▁C", which reads " C"
        ("mistral", "<think>x</think>\n\n<guess>", 20, False, {"C", "CR"}),
        ("mistral", "<think>x</think>.<guess>", 20, None, None),
    ],
)
def test_grammar_allows_exactly_the_tokens_that_can_finish_a_reply(
    request, constraint_of, model, text, left, free, tokens
):
    _, tokenizer = request.getfixturevalue(model)
    grammar = constraint_of(tokenizer).grammar(WORDS)
    if tokens is None:
        with pytest.raises(RuntimeError, match="left the grammar"):
            grammar.allowed(text, left)
        return
    got_free, ids = grammar.allowed(text, left)
    texts = constraint_of(tokenizer).decode([[i] for i in ids.tolist()])  # as each reads inside the reply
    decoded = {EOS if i == tokenizer.eos_token_id else t for i, t in zip(ids.tolist(), texts, strict=True)}
    assert got_free == free
    assert all(t == EOS or _prefix_of_a_reply(text + t) for t in decoded)
    if model == "tiny":
        assert decoded == tokens
    else:  # a real vocabulary holds too many to list (" </", "\n<", ...): some of them
        assert tokens <= decoded


# --- whole games on random weights -----------------------------------------------------------------

# The fewest tokens of "<think></think><guess>WORD</guess>" + eos with the longest allowed word: the
# tiny tokenizer spells a non-answer letter by letter; Qwen writes <guess> and </guess> as 3 tokens each,
# SentencePiece some words in 5.
LONGEST_REPLY = {"tiny": 10, "qwen": 13, "mistral": 19}


@pytest.mark.parametrize("model", ["tiny", "qwen", "mistral"])
def test_a_budget_below_the_longest_reply_is_an_error(request, constraint_of, model):
    _, tokenizer = request.getfixturevalue(model)
    constraint = constraint_of(tokenizer)
    assert constraint.longest_reply == LONGEST_REPLY[model]
    constraint.for_batch(0, [None], LONGEST_REPLY[model])
    with pytest.raises(ValueError, match="too few"):
        constraint.for_batch(0, [None], LONGEST_REPLY[model] - 1)


@pytest.mark.parametrize(
    ("model", "constrain", "sample", "budgets"),
    [
        ("tiny", "allowed", False, [10, 16, 48]),  # 10: the longest reply, no room for a think
        ("tiny", "candidates", True, [10, 16, 48]),
        ("qwen", "allowed", True, [13, 24]),  # Qwen samples any of 151,936 tokens: odd bytes, tags, "<"
        ("qwen", "candidates", False, [13, 24]),
        ("mistral", "allowed", True, [19, 32]),  # sampled: "▁"-tokens are drawn, and must read in place
        ("mistral", "candidates", True, [32]),
    ],
)
def test_every_constrained_reply_parses_as_a_listed_word_on_random_weights(request, model, constrain, sample, budgets):
    model_, tokenizer = request.getfixturevalue(model)
    player = ModelPlayer(model_, tokenizer, Decoding(sample=sample, seed=1, constrain=constrain))
    every_word = re.compile(guess_regex())
    for budget in budgets:
        player.decoding = player.decoding.replace(max_new_tokens=budget)  # one player: its precompute is slow
        thinks = []
        for game in play(player, SECRETS):
            history = ()
            for turn in game.turns:
                listed = every_word if constrain == "allowed" else re.compile(guess_regex(candidates(history).words()))
                assert turn.status == "valid" and listed.fullmatch(turn.reply), (budget, turn.reply)
                think = turn.reply[len("<think>") : turn.reply.index("</think>")]
                assert "<" not in think
                thinks.append(think)
                history = (*history, (turn.guess, turn.pattern))
        if (model, constrain, budget) == ("tiny", "allowed", 10):
            assert set(thinks) == {""}  # the think had to close at once
        if budget >= 24:
            assert any(thinks), "the think never held free text: the test checked little"


def test_evaluate_cli_on_a_hub_model_has_no_format_failures_once_constrained(qwen_dir, tmp_path):
    argv = ["--model", str(qwen_dir), "--games", "3", "--constrain", "allowed", "--no_baselines"]
    assert evaluate_cli.main([*argv, "--max_new_tokens", "16", "--out", str(tmp_path)]) == 0
    _, [free, constrained] = read_json(tmp_path / "eval.json")
    assert free.kind == "model" and constrained.kind == "constrained"
    assert constrained.metrics["format_failure_rate"]["rate"] == 0.0
    assert constrained.metrics["nonword_rate"]["rate"] == 0.0
    assert all(t.guess in allowed() for g in constrained.games for t in g.turns)


# --- the generation config: the model's own sampling settings never leak in ----------------------------


def _generation_warnings(caplog, model, tokenizer, config) -> list[str]:
    """What transformers' logger warns while generating with ``config`` (warning_once reset first)."""
    transformers.utils.logging.warning_once.cache_clear()
    library_logger = logging.getLogger("transformers")
    library_logger.addHandler(caplog.handler)
    try:
        batch = tokenizer(["Guess a word."], return_tensors="pt")
        model.generate(**batch, generation_config=config)
    finally:
        library_logger.removeHandler(caplog.handler)
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("sample", "effective"),
    [
        (False, {"do_sample": False, "repetition_penalty": 1.0}),
        (True, {"do_sample": True, "temperature": 0.9, "top_k": 0, "top_p": 1.0, "repetition_penalty": 1.0}),
    ],
)
def test_the_model_generation_config_neither_changes_decoding_nor_warns(qwen, caplog, recwarn, sample, effective):
    model, tokenizer = qwen
    assert model.generation_config.do_sample and model.generation_config.top_k == 20  # Qwen's sampling defaults
    player = ModelPlayer(model, tokenizer, Decoding(max_new_tokens=4, sample=sample, temperature=0.9))
    # What generate() runs with once it has filled the fields left None from model.generation_config.
    merged, _ = model._prepare_generation_config(player.generation_config())
    assert {key: getattr(merged, key) for key in effective} == effective
    assert _generation_warnings(caplog, model, tokenizer, player.generation_config()) == []
    assert not [w for w in recwarn if "generation" in str(w.message).lower()]


def test_the_warning_check_sees_the_warning_a_bare_greedy_config_gets(qwen, caplog):
    model, tokenizer = qwen
    warnings = _generation_warnings(caplog, model, tokenizer, GenerationConfig(max_new_tokens=2, do_sample=False))
    assert any("generation flags are not valid" in w and "temperature" in w for w in warnings)
