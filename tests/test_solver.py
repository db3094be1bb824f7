import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wordle import Solver, allowed, answers, candidates, history_for, information, is_consistent, score_guess


def brute_candidates(history, pool):
    return [w for w in pool if all(score_guess(g, w) == p for g, p in history)]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(answers()), st.lists(st.sampled_from(allowed()), max_size=3))
def test_candidates_match_brute_force(secret, guesses):
    history = history_for(secret, guesses)
    cands = candidates(history)
    assert cands.words() == brute_candidates(history, answers())
    assert secret in cands


def test_candidates_extra_pool_word():
    # A secret outside the answer list (an allowed-only word) joins the pool when passed as extra.
    secret = "AAHED"
    history = history_for(secret, ["CRANE"])
    cands = candidates(history, extra=[secret])
    assert secret in cands and secret in cands.extra
    assert len(cands) == len(candidates(history)) + 1
    assert candidates(history, pool=["AAHED", "ABIDE", "ZZZZZ"]).words() == brute_candidates(
        history, ["ABIDE", "AAHED", "ZZZZZ"]
    )


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(answers()), st.lists(st.sampled_from(allowed()), max_size=2), st.sampled_from(allowed()))
def test_information_matches_definition(secret, guesses, guess):
    history = history_for(secret, guesses)
    cands = candidates(history)
    counts = Counter(score_guess(guess, w) for w in cands.words())
    n = len(cands)
    expected = -sum(c / n * math.log2(c / n) for c in counts.values())
    bits, normalised = information(guess, cands)
    assert bits == pytest.approx(expected, abs=1e-9)
    assert normalised == pytest.approx(expected / math.log2(n) if n > 1 else 0.0, abs=1e-9)


def test_solver_sample_of_games():
    rng = random.Random(0)
    secrets = rng.sample(answers(), 150)
    solver = Solver()
    games = [solver.play(s) for s in secrets]
    assert all(g[-1] == (s, "GGGGG") for g, s in zip(games, secrets))
    assert all(len(g) <= 6 for g in games)
    # Every recorded pattern is the true feedback against the secret.
    assert all(score_guess(guess, s) == p for g, s in zip(games, secrets) for guess, p in g)
    assert sum(map(len, games)) / len(games) <= 3.6


def test_solver_prefers_candidates_on_ties():
    solver = Solver()
    # Two candidates left: guessing one of them is always optimal and must be chosen.
    for secret in ("HATCH", "LATCH", "MATCH", "BATCH"):
        game = solver.play(secret)
        for i, (guess, _) in enumerate(game[1:], start=1):
            cands = candidates(game[:i])
            if len(cands) <= 2:
                assert guess in cands


def test_solver_all_answers():
    # Every answer, ~5 s: fast enough to run by default.
    solver = Solver()
    games = [solver.play(s) for s in answers()]
    assert all(g[-1][1] == "GGGGG" for g in games)
    mean = sum(map(len, games)) / len(games)
    assert mean <= 3.50
    assert all(is_consistent(s, g) for s, g in zip(answers(), games))


@pytest.mark.parametrize(
    ("pool", "opener", "lost", "mean_won"),
    [
        # Every allowed word: the solver, the ceiling (SOARE is no answer).
        ("allowed", "SOARE", 0, 3.463),
        # Answers only, as a player whose every guess is one answer token: RAISE is the answer of most opening
        # information, and it may still probe with an answer the feedback ruled out.
        ("answers", "RAISE", 0, 3.495),
        # Only answers still possible: every guess could win, and 11 families of look-alikes outlast six guesses.
        ("candidates", "RAISE", 11, 3.582),
    ],
)
def test_solver_pools(pool, opener, lost, mean_won):
    solver = Solver(pool)
    games = [solver.play(s) for s in answers()]
    won = [g for g in games if g[-1][1] == "GGGGG"]
    assert solver.next_guess() == opener
    assert all(len(g) <= 6 for g in games) and len(games) - len(won) == lost
    assert sum(map(len, won)) / len(won) == pytest.approx(mean_won, abs=5e-4)
    for game in games:
        for i, (guess, _) in enumerate(game):
            if pool != "allowed":
                assert guess in answers()
            if pool == "candidates":
                assert is_consistent(guess, game[:i])


def test_solver_pools_rank_by_information_within_the_pool():
    history = history_for("PLANT", ["RAISE"])
    cands = candidates(history)
    for pool, words in (("answers", answers()), ("candidates", cands.words())):
        guess = Solver(pool).next_guess(history)
        best = max(information(w, cands)[0] for w in words)
        assert information(guess, cands)[0] == pytest.approx(best)
    with pytest.raises(ValueError, match="unknown pool 'words'; valid: allowed, answers, candidates"):
        Solver("words")
