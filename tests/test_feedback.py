import os
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wordle import (
    ALL_GREEN,
    allowed,
    answers,
    code_to_pattern,
    feedback,
    pattern_codes,
    pattern_matrix,
    pattern_to_code,
    score_guess,
)
from wordle.words import encode

words = st.sampled_from(allowed())


@pytest.mark.parametrize(
    "guess, answer, expected",
    [
        ("CRANE", "CRANE", "GGGGG"),
        ("CRANE", "ABIDE", "BBYBG"),
        # Duplicates. SPEED vs ABIDE: ABIDE has one E; the first non-green E takes it.
        ("SPEED", "ABIDE", "BBYBY"),
        # EERIE vs ELDER: E0 green, then ELDER has one unmatched E left -> E1 yellow, E4 grey.
        ("EERIE", "ELDER", "GYYBB"),
        # LLAMA vs HELLO: both L yellow (HELLO has two), A and M absent, second A grey.
        ("LLAMA", "HELLO", "YYBBB"),
        # Greens are taken before yellows: the green E at 4 uses ABIDE's only E, so the Es at 0
        # and 1 are grey even though they come first; I at 3 is yellow (ABIDE's I is at 2).
        ("EERIE", "ABIDE", "BBBYG"),
        ("ABBEY", "BABES", "YYGGB"),
        # Any case. GEESE vs ELDER: no greens; ELDER has two Es, so the first two non-green Es
        # (positions 1 and 2) are yellow and the third is grey.
        ("geese", "elder", "BYYBB"),
    ],
)
def test_score_guess_table(guess, answer, expected):
    assert score_guess(guess, answer) == expected


def test_score_guess_rejects_non_words():
    with pytest.raises(ValueError, match="five-letter"):
        score_guess("CRAN", "CRANE")


def test_pattern_codes_round_trip():
    assert pattern_to_code("GGGGG") == ALL_GREEN == 242
    assert pattern_to_code("BBBBB") == 0
    assert pattern_to_code("gbbbb") == 2  # position 0 is the least significant digit
    for code in range(243):
        assert pattern_to_code(code_to_pattern(code)) == code
    for bad in ("GGGG", "GGGGX", "", None, "✓✓✓✓✓"):
        with pytest.raises(ValueError):
            pattern_to_code(bad)


@given(words)
def test_word_against_itself_is_all_green(w):
    assert score_guess(w, w) == "GGGGG"


@given(words, words)
def test_marks_never_exceed_shared_letters(guess, answer):
    pattern = score_guess(guess, answer)
    hits = Counter(c for c, m in zip(guess, pattern) if m in "GY")
    shared = Counter(guess) & Counter(answer)
    # Exactly min(count in guess, count in answer) copies of each letter are marked G or Y.
    assert hits == shared
    assert all((m == "G") == (g == a) for g, a, m in zip(guess, answer, pattern))


@settings(max_examples=300)
@given(st.lists(words, min_size=1, max_size=20), st.lists(st.sampled_from(answers()), min_size=1, max_size=20))
def test_vectorised_codes_match_scalar(guesses, targets):
    codes = pattern_codes(encode(guesses), encode(targets))
    for i, g in enumerate(guesses):
        for j, t in enumerate(targets):
            assert code_to_pattern(int(codes[i, j])) == score_guess(g, t)


def test_matrix_shape_and_sample():
    m = pattern_matrix()
    assert m.shape == (12972, 2315) and m.dtype == np.uint8 and not m.flags.writeable
    rng = np.random.default_rng(0)
    for i, j in zip(rng.integers(0, 12972, 2000), rng.integers(0, 2315, 2000)):
        assert code_to_pattern(int(m[i, j])) == score_guess(allowed()[i], answers()[j])


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(feedback.CACHE_ENV, str(tmp_path))
    feedback.pattern_matrix.cache_clear()
    yield tmp_path
    feedback.pattern_matrix.cache_clear()


def _rebuilt(caplog, message):
    feedback.pattern_matrix.cache_clear()
    with caplog.at_level("WARNING", logger="wordle.feedback"):
        m = feedback.pattern_matrix()
    assert message in caplog.text
    assert np.array_equal(m, feedback.build_pattern_matrix())


def test_cache_is_written_then_reused(fresh_cache, caplog):
    first = feedback.pattern_matrix()
    path = feedback.cache_path()
    assert path.exists() and path.parent == fresh_cache
    mtime = path.stat().st_mtime_ns
    feedback.pattern_matrix.cache_clear()
    assert np.array_equal(feedback.pattern_matrix(), first)
    assert path.stat().st_mtime_ns == mtime  # loaded, not rebuilt
    assert not list(fresh_cache.glob("*.tmp"))


def test_damaged_cache_is_rebuilt(fresh_cache, caplog):
    feedback.pattern_matrix()
    path = feedback.cache_path()
    matrix, key, digest = (np.load(path)[k] for k in ("patterns", "key", "digest"))
    flipped = matrix.copy()
    flipped[123, 456] ^= 1  # one wrong pattern, file otherwise well formed
    np.savez(path, patterns=flipped, key=key, digest=digest)
    _rebuilt(caplog, "damaged")


def test_truncated_cache_is_rebuilt(fresh_cache, caplog):
    feedback.pattern_matrix()
    path = feedback.cache_path()
    path.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])
    _rebuilt(caplog, "unreadable")


def test_stale_cache_is_rebuilt(fresh_cache, caplog):
    feedback.pattern_matrix()
    path = feedback.cache_path()
    with np.load(path) as f:
        matrix, digest = f["patterns"], f["digest"]
    np.savez(path, patterns=matrix, key=np.array("from-other-word-lists"), digest=digest)
    _rebuilt(caplog, "stale")


def test_unwritable_cache_dir_still_works(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv(feedback.CACHE_ENV, str(blocker))
    feedback.pattern_matrix.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="wordle.feedback"):
            assert feedback.pattern_matrix().shape == (12972, 2315)
        assert "could not cache" in caplog.text
    finally:
        feedback.pattern_matrix.cache_clear()
