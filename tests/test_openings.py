"""Games from openings the player did not choose: the parser, the drawn and given starts, fixed transcripts
(a start that already won, a start with six guesses, an invalid start word), the contradiction rate, the
tables, the CLI, and game mode's start states."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

import evaluate as evaluate_cli
from evaluation import Game, compute_metrics, play
from evaluation.play import RandomCandidatePlayer
from evaluation.report import PlayerResult, markdown, read_json, replay_lines, write_json
from evaluation.run import evaluate_baselines, select_secrets
from training.data import game_starts
from wordle import answers, is_allowed, is_consistent, score_guess
from wordle.game import GameView, count, format_reply
from wordle.openings import OWN, Opening

SECRETS = select_secrets(30, split="val")


class Scripted:
    """Replies from a list by turn number (the start's guesses counted), the last one repeating."""

    name = "scripted"

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)
        self.turns_seen: list[int] = []

    def replies(self, views: Sequence[GameView]) -> list[str]:
        self.turns_seen += [v.turn for v in views]
        return [format_reply(self.words[min(v.turn, len(self.words)) - 1]) for v in views]


@pytest.mark.parametrize(
    ("spec", "kind", "k", "words", "canonical"),
    [
        ("own", "own", 0, (), "own"),
        ("answer", "answer", 1, (), "answer"),
        ("Allowed", "allowed", 1, (), "allowed"),
        ("answer:2", "answer", 2, (), "answer:2"),
        ("allowed:5", "allowed", 5, (), "allowed:5"),
        ("words:crane,SLATE", "words", 0, ("CRANE", "SLATE"), "words:CRANE,SLATE"),
    ],
)
def test_openings_parse_and_spell_back(spec, kind, k, words, canonical):
    opening = Opening.parse(spec)
    assert (opening.kind, opening.count, opening.words, opening.spec) == (kind, k, words, canonical)
    assert Opening.parse(opening.spec) == opening


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("random", "unknown opening 'random'; valid: own, answer, allowed"),
        ("own:1", "unknown opening 'own:1'"),
        ("answer:0", "K must be a whole number from 1 to 5"),
        ("answer:6", "K must be a whole number from 1 to 5"),
        ("answer:x", "K must be a whole number from 1 to 5"),
        ("words:QXZJV", "'QXZJV' is not an allowed word"),  # an invalid start word
        ("words:CRAN", "'CRAN' is not an allowed word"),
        ("words:", "unknown opening 'words:'"),
        ("words:CRANE,SLATE,AUDIO,PILOT,MOUND,FIGHT,BERRY", "7 guesses, more than a game's 6"),
    ],
)
def test_bad_openings_name_the_problem(spec, why):
    with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
        Opening.parse(spec)


@pytest.mark.parametrize("spec", ["answer", "allowed", "answer:2", "allowed:3"])
def test_drawn_openings_are_seeded_per_secret_never_the_secret_and_of_their_kind(spec):
    opening = Opening.parse(spec)
    starts = opening.starts(SECRETS, seed=7)
    assert starts == opening.starts(SECRETS, seed=7)  # the same seed, the same openings
    assert starts != opening.starts(SECRETS, seed=8)
    # A secret's opening does not depend on which other secrets are played (sharding, --games).
    assert opening.starts(SECRETS[5:9], seed=7) == starts[5:9]
    answer_set = set(answers())
    for secret, start in zip(SECRETS, starts, strict=True):
        words = [w for w, _ in start]
        assert len(words) == opening.count == len(set(words))
        assert secret not in words  # the opening decides no game
        assert all(is_allowed(w) and (w in answer_set) == (opening.kind == "answer") for w in words)
        assert all(pattern == score_guess(w, secret) for w, pattern in start)


def test_own_opening_starts_empty():
    assert OWN.starts(SECRETS[:3]) == [(), (), ()]


# --- fixed transcripts --------------------------------------------------------------------------------


def test_a_start_that_already_won_is_over_before_the_player_moves():
    player = Scripted(["SLATE"])
    [game] = play(player, ["CRANE"], Opening.parse("words:AUDIO,CRANE,SLATE").starts(["CRANE"]))
    assert game.start == (("AUDIO", score_guess("AUDIO", "CRANE")), ("CRANE", "GGGGG"))  # cut at the secret
    assert game.won and game.over and game.guesses == 2 and game.turns == []
    assert player.turns_seen == []  # never asked
    c = count([game])
    assert (c.wins, c.turns, c.valid, c.informed) == (1, 0, 0, 0)
    assert replay_lines(game) == ["CRANE (won in 2)", "1 🟨⬛⬛⬛⬛ AUDIO (given)", "2 🟩🟩🟩🟩🟩 CRANE (given)"]


def test_a_start_with_six_guesses_is_lost_before_the_player_moves():
    six = "words:AUDIO,PILOT,MOUND,FIGHT,BERRY,SLATE"
    player = Scripted(["CRANE"])
    [game] = play(player, ["CRANE"], Opening.parse(six).starts(["CRANE"]))
    assert not game.won and game.over and game.guesses == 6 and game.turns == []
    assert player.turns_seen == []
    assert compute_metrics([game])["win_rate"]["k"] == 0


def test_turns_count_the_start_and_the_prompt_shows_it():
    player = Scripted(["", "", "CRANE"])  # turns 1-2 are the start's: the player is asked from turn 3
    [game] = play(player, ["CRANE"], Opening.parse("words:AUDIO,PILOT").starts(["CRANE"]))
    assert player.turns_seen == [3]
    assert game.won and game.guesses == 3 and [t.turn for t in game.turns] == [3]


def test_contradiction_rate_counts_only_guesses_made_with_feedback_in_view():
    # Own opening: CRANE (nothing to contradict), then SLATE against CRANE's feedback on secret PILOT
    # (A and E absent: it contradicts), then PILOT.
    own = play(Scripted(["CRANE", "SLATE", "PILOT"]), ["PILOT"])
    m = compute_metrics(own)
    assert not is_consistent("SLATE", (("CRANE", score_guess("CRANE", "PILOT")),))
    assert (m["valid_guesses"], m["inconsistent_rate"]["k"]) == (3, 1)
    assert (m["contradiction_rate"]["k"], m["contradiction_rate"]["n"]) == (1, 2)  # turn 1 not counted
    # The same guesses from a given CRANE: every guess the player makes has feedback in view.
    given = play(Scripted(["", "SLATE", "PILOT"]), ["PILOT"], Opening.parse("words:CRANE").starts(["PILOT"]))
    m = compute_metrics(given)
    assert (m["contradiction_rate"]["k"], m["contradiction_rate"]["n"]) == (1, 2)
    assert m["valid_guesses"] == 2


def test_a_player_that_reads_feedback_never_contradicts_it_from_any_opening():
    for spec in ("answer", "allowed:2", "words:FUZZY"):
        [result] = [
            r for r in evaluate_baselines(SECRETS, seed=1, opening=Opening.parse(spec)) if r.label == "random candidate"
        ]
        assert result.opening == Opening.parse(spec).spec
        assert result.metrics["contradiction_rate"]["k"] == 0 and result.metrics["contradiction_rate"]["n"] > 0
        assert result.win_rate > 0.8


# --- reports ---------------------------------------------------------------------------------------------


def _results() -> list[PlayerResult]:
    out = []
    for spec in ("own", "answer"):
        games = play(RandomCandidatePlayer(0), SECRETS[:6], Opening.parse(spec).starts(SECRETS[:6]))
        out.append(PlayerResult("random candidate", "baseline", compute_metrics(games), games, spec))
    return out


def test_each_opening_is_its_own_labelled_table_and_survives_json(tmp_path):
    results = _results()
    text = markdown(results, replays=0)
    assert "## Games from its own opening" in text and "## Games from a random answer played first" in text
    assert text.count("| player |") == 2 and "contradicts feedback" in text
    path = write_json(tmp_path / "eval.json", results, {"openings": ["own", "answer"]})
    _, back = read_json(path)
    assert [r.opening for r in back] == ["own", "answer"]
    assert [g.to_dict() for g in back[1].games] == [g.to_dict() for g in results[1].games]
    assert all(g.start for g in back[1].games)
    assert Game.from_dict(back[1].games[0].to_dict()).start == results[1].games[0].start


def test_own_opening_alone_keeps_one_table_without_a_heading():
    assert "## Games from" not in markdown(_results()[:1], replays=0)


def test_cli_plays_every_opening_asked_for(tmp_path):
    out = tmp_path / "eval"
    argv = ["--model", "tiny", "--games", "6", "--split", "val", "--no_baselines", "--out", str(out)]
    assert evaluate_cli.main([*argv, "--openings", "own", "answer", "allowed:2"]) == 0
    data = json.loads((out / "eval.json").read_text())
    assert [p["opening"] for p in data["players"]] == ["own", "answer", "allowed:2"]
    assert [len(g.get("start", [])) for g in data["players"][2]["games"]] == [2] * 6
    assert "Games from 2 random allowed words (no answers) played first" in (out / "eval.md").read_text()


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        ("words:QXZJV", "error: --openings: opening 'words:QXZJV': 'QXZJV' is not an allowed word\n"),
        ("first", "error: --openings: unknown opening 'first'; valid: own, answer, allowed, answer:K, allowed:K or "),
    ],
)
def test_cli_bad_opening_is_one_line(capsys, spec, line):
    assert evaluate_cli.main(["--openings", spec]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1


# --- training's start states -------------------------------------------------------------------------------


def test_game_mode_start_states_open_a_share_from_random_guesses():
    secrets = answers()[:400]
    rows = game_starts(secrets, 0.5, seed=3)
    assert [r["secret"] for r in rows] == list(secrets)  # each secret once
    assert rows == game_starts(secrets, 0.5, seed=3)
    opened = [r for r in rows if r["past_guess_history"]]
    assert 150 < len(opened) < 250
    assert {len(r["past_guess_history"]) for r in opened} == {1, 2}
    for row in opened:
        assert all(g != row["secret"] and p == score_guess(g, row["secret"]) for g, p in row["past_guess_history"])
    assert not any(r["past_guess_history"] for r in game_starts(secrets, 0.0, seed=3))
    assert all(r["past_guess_history"] for r in game_starts(secrets[:20], 1.0, seed=3))
