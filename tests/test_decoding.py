"""The one decoding-settings object: what it accepts, and the generation settings it gives every player."""

from __future__ import annotations

import pytest

from wordle.decoding import GREEDY, Decoding


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens must be at least 1, got 0"),
        ({"sample": True, "temperature": 0.0}, "temperature must be positive when sampling, got 0.0"),
        ({"constrain": "answers"}, "unknown constrain 'answers'; valid: allowed, candidates"),
    ],
)
def test_bad_settings_are_refused_with_the_field_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Decoding(**kwargs)


def test_greedy_sets_every_sampling_field_to_a_neutral_value():
    # A field left unset would be filled from the model's own generation_config (Qwen's samples).
    assert GREEDY.generation_kwargs() == {
        "do_sample": False,
        "repetition_penalty": 1.0,
        "min_p": None,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 50,
    }
    assert "max_new_tokens" not in GREEDY.generation_kwargs()  # the model's own limit, until a player sets one
    assert GREEDY.describe() == "greedy"


def test_sampling_is_grpos_plain_sampling_at_the_temperature():
    decoding = Decoding(max_new_tokens=16, sample=True, temperature=0.7, seed=3)
    kwargs = decoding.generation_kwargs()
    assert (kwargs["do_sample"], kwargs["temperature"], kwargs["top_p"], kwargs["top_k"]) == (True, 0.7, 1.0, 0)
    assert kwargs["max_new_tokens"] == 16
    assert decoding.describe() == "sampled at temperature 0.7, seed 3"
    assert (
        decoding.replace(constrain="allowed").describe()
        == "sampled at temperature 0.7, seed 3, constrained to allowed words"
    )
