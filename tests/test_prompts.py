import pytest
from hypothesis import given
from hypothesis import strategies as st

from wordle import (
    SYSTEM_PROMPT,
    allowed,
    answers,
    format_feedback,
    history_for,
    parse_completion,
    parse_feedback,
    parse_history,
    render_prompt,
)


def test_render_prompt_states_rules_format_and_history():
    history = history_for("ROBIN", ["CRANE", "SPORT"])
    messages = render_prompt(history)
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert system == SYSTEM_PROMPT
    assert "<think>" in system and "<guess>WORD</guess>" in system and "✓" in system and "~" in system
    assert "CRANE: C(-) R(~) A(-) N(~) E(-)\nSPORT: S(-) P(-) O(~) R(~) T(-)" in user
    assert "Guess 3 of 6" in user
    assert "Guess 1 of 6. No guesses yet." == render_prompt([])[1]["content"]


@given(st.sampled_from(answers()), st.lists(st.sampled_from(allowed()), max_size=5))
def test_rendered_history_parses_back(secret, guesses):
    history = history_for(secret, guesses)
    assert parse_history(render_prompt(history)[1]["content"]) == history


@pytest.mark.parametrize(
    "text, notation, expected",
    [
        # The seed's notation: ✓ right place, ~ elsewhere, - absent.
        ("CRANE: C(-) R(✓) A(~) N(-) E(-)", None, ("CRANE", "BGYBB")),
        ("C(-), R(✓), A(~), N(-), E(-)", None, ("CRANE", "BGYBB")),  # commas, no prefix
        ("crane: c(-) r(✔) a(~) n(-) e(-)", "seed", ("CRANE", "BGYBB")),  # heavy check mark, lower case
        # The course's notation: ✓ right place, - elsewhere, x absent.
        ("C(x) R(✓) A(-) N(x) E(x)", None, ("CRANE", "BGYBB")),
        ("C(X) R(✓) A(-) N(X) E(X)", "course", ("CRANE", "BGYBB")),
        # Ambiguous marks made explicit.
        ("C(-) R(✓) A(-) N(-) E(-)", "seed", ("CRANE", "BGBBB")),
        ("C(-) R(✓) A(-) N(-) E(-)", "course", ("CRANE", "YGYYY")),
        ("C(✓) R(✓) A(✓) N(✓) E(✓)", None, ("CRANE", "GGGGG")),  # both notations agree
        # Plain G/Y/B.
        ("CRANE: bgybb", None, ("CRANE", "BGYBB")),
        ("BGYBB", None, ("", "BGYBB")),
    ],
)
def test_parse_feedback(text, notation, expected):
    assert parse_feedback(text, notation) == expected


@pytest.mark.parametrize(
    "text, notation, message",
    [
        ("C(-) R(✓) A(-) N(-) E(-)", None, "ambiguous"),  # '-' means absent in one, elsewhere in the other
        ("CRANE: C(-) R(✓) A(~) N(-)", None, "five marks"),
        ("CRANE: C(-) R(✓) A(~) N(-) E(-) extra", None, "five marks"),
        ("SLATE: C(-) R(✓) A(~) N(-) E(-)", None, "names"),  # prefix disagrees with the letters
        ("C(?) R(✓) A(~) N(-) E(-)", "seed", "mark"),
        ("C(x) R(✓) A(~) N(-) E(-)", "seed", "mark"),
        ("BGYBB", "klingon", "unknown notation"),
    ],
)
def test_parse_feedback_errors(text, notation, message):
    with pytest.raises(ValueError, match=message):
        parse_feedback(text, notation)


def test_format_feedback_notations():
    assert format_feedback("crane", "BGYBB") == "C(-) R(✓) A(~) N(-) E(-)"
    assert format_feedback("CRANE", "BGYBB", notation="course") == "C(x) R(✓) A(-) N(x) E(x)"


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("<think>r</think><guess>CRANE</guess>", "CRANE"),  # the canonical form
        ("  \n<think>\nlong\nthought\n</think>\n\n<guess> crane </guess>\n ", "crane"),  # whitespace around
        ("<think></think><guess>x</guess>", "x"),  # parses; the word is judged elsewhere
        ("<think>a</think><guess></guess>", ""),
        ("<guess>CRANE</guess>", None),  # no think
        ("<think>r</think>", None),  # no guess
        ("<think>r</think>CRANE", None),
        ("<think>r<guess>CRANE</guess></think><guess>SLATE</guess>", None),  # guess inside think
        ("<think>r</think><guess>CRANE</guess><guess>SLATE</guess>", None),  # two guesses
        ("<think>r</think><guess>CRANE</guess> because", None),  # text after </guess>
        ("<think>r</think>so<guess>CRANE</guess>", None),  # text between
        ("preamble <think>r</think><guess>CRANE</guess>", None),  # text before
        ("<think>a</think><think>b</think><guess>CRANE</guess>", None),  # two thinks
        ("<think>r</think><guess>CRA<GUESS>NE</guess>", None),  # a tag in any case
        ("<think>r</think><guess>CRANE</guess", None),  # truncated
        ("<think>r</think><guess>CRANE", None),  # truncated
        ("<think>r", None),  # truncated early
        ("", None),
        ("<THINK>r</THINK><GUESS>CRANE</GUESS>", None),  # the format's tags are lower case
        ([{"role": "assistant", "content": "<think>r</think><guess>CRANE</guess>"}], "CRANE"),  # chat format
        (
            [{"role": "assistant", "content": [{"type": "text", "text": "<think>r</think><guess>ROBIN</guess>"}]}],
            "ROBIN",
        ),
        (None, None),
        (42, None),
    ],
)
def test_parse_completion(completion, expected):
    assert parse_completion(completion) == expected


def test_parse_completion_on_100kb_is_linear():
    big = "<think>" + "a" * 100_000 + "</think><guess>CRANE</guess>"
    assert parse_completion(big) == "CRANE"
    assert parse_completion("<think>" * 20_000) is None
    assert parse_completion("</think><guess>" * 10_000 + "</guess>") is None
