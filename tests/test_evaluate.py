"""Full-game evaluation: the engine on scripted players, the metrics and their intervals, replays,
the CLI's errors, and a real evaluation of a throwaway tiny model (constrained decoding: test_constrain.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
import torch
from conftest import TURN_MODE

import evaluate as evaluate_cli
import grpo_train
from evaluation import (
    Game,
    ModelPlayer,
    RandomAllowedPlayer,
    RandomCandidatePlayer,
    SolverPlayer,
    Turn,
    classify_reply,
    compute_metrics,
    mean_ci,
    play,
    wilson,
)
from evaluation.metrics import by_turn, guesses_saved, reward_means
from evaluation.report import PlayerResult, markdown, plainly, read_json, replay_lines, squares
from evaluation.run import evaluate_model, select_secrets
from evaluation.strategy import information_of, information_states
from evaluation.vllm_backend import same_model, server_url
from rewards import REWARD_FUNCS, TURN_REWARDS
from settings.config import resolve
from tinymodel.build import build
from training import before_after
from wordle import candidates, eval_secrets, information, normalize_word, parse_completion, score_guess, train_secrets
from wordle.decoding import Decoding
from wordle.game import GameView, format_reply

SECRETS = select_secrets(40)


@pytest.fixture(scope="session")
def tiny_ci(tmp_path_factory):
    """A throwaway tiny model (random-ish weights after a few SFT steps), built in seconds."""
    torch.set_num_threads(1)
    return build(tmp_path_factory.mktemp("tiny") / "model", scale="ci")


@pytest.fixture(scope="session")
def tiny_loaded(tiny_ci):
    from models.loading import load_for_inference

    return load_for_inference(str(tiny_ci), device="cpu")


# --- the engine ------------------------------------------------------------------------------------


# Players for tests of the loop itself, not for evaluation.


class ConstantPlayer:
    """Always the same word (CRANE by default): wins only when the secret is that word."""

    def __init__(self, word: str = "CRANE") -> None:
        self.word = word
        self.name = f"always {word}"

    def replies(self, views: Sequence[GameView]) -> list[str]:
        return [format_reply(self.word) for _ in views]


class ScriptedPlayer:
    """Replies from a list, by turn (the last one repeats): for tests of broken or odd replies."""

    def __init__(self, replies_by_turn: Sequence[str], name: str = "scripted") -> None:
        self.script = list(replies_by_turn)
        self.name = name

    def replies(self, views: Sequence[GameView]) -> list[str]:
        return [self.script[min(v.turn, len(self.script)) - 1] for v in views]


@pytest.mark.parametrize(
    ("reply", "status", "word"),
    [
        ("<think>x</think><guess>CRANE</guess>", "valid", "CRANE"),
        ("<think></think> <guess>crane</guess>\n", "valid", "CRANE"),  # any case, whitespace allowed
        ("<think>x</think><guess>ABCDE</guess>", "nonword", "ABCDE"),  # five letters, not a word
        ("<think>x</think><guess>CRANES</guess>", "format", None),  # six letters
        ("<guess>CRANE</guess>", "format", None),  # no think
        ("<think>x</think><guess>CRANE</guess> more", "format", None),  # text after the guess
        ("<think><guess>CRANE</guess></think><guess>SLATE</guess>", "format", None),  # two guesses
        ("", "format", None),  # empty, e.g. eos at once
    ],
)
def test_replies_are_classified_as_the_rewards_read_them(reply, status, word):
    assert classify_reply(reply) == (status, word)
    # The same verdict format_reward gives: 1.0 valid, 0.5 non-word, below that a format failure.
    score = REWARD_FUNCS["format_reward"]([reply])[0]
    assert {"valid": score == 1.0, "nonword": score == 0.5, "format": score < 0.5}[status]


def test_solver_wins_every_game():
    games = play(SolverPlayer(), SECRETS)
    m = compute_metrics(games)
    assert [g.won for g in games] == [True] * len(SECRETS)
    assert m["win_rate"]["rate"] == 1.0 and m["distribution"]["fail"] == 0
    assert m["invalid_rate"]["k"] == 0 and m["repeat_rate"]["k"] == 0
    assert m["rewards"]["format_reward"]["mean"] == 1.0
    # Each game ends on its first all-green turn.
    assert all(g.turns[-1].pattern == "GGGGG" and "GGGGG" not in [t.pattern for t in g.turns[:-1]] for g in games)


def test_always_crane_wins_only_on_crane():
    secrets = ["CRANE", "SLATE", "ABBEY", "ZESTY"]
    games = play(ConstantPlayer("CRANE"), secrets)
    assert [(g.won, g.guesses) for g in games] == [(True, 1), (False, 6), (False, 6), (False, 6)]
    m = compute_metrics(games)
    assert m["win_rate"]["k"] == 1 and m["distribution"] == {"1": 1, "2": 0, "3": 0, "4": 0, "5": 0, "6": 0, "fail": 3}
    # Each of the 15 repeats after a first CRANE is a repeat and (known not the secret) inconsistent.
    assert m["valid_guesses"] == 19 and m["repeat_rate"]["k"] == 15 and m["inconsistent_rate"]["k"] == 15
    assert m["mean_guesses_won"]["mean"] == 1.0


def test_garbage_replies_use_up_every_turn_as_format_failures():
    games = play(ScriptedPlayer(["no tags at all", "<think>x</think><guess>CRANES</guess>"]), SECRETS[:5])
    m = compute_metrics(games)
    assert all(not g.won and g.guesses == 6 and g.history == () for g in games)
    assert all(t.status == "format" and t.guess is None and t.pattern is None for g in games for t in g.turns)
    assert m["turns"] == 30 and m["format_failure_rate"]["k"] == 30 and m["nonword_rate"]["k"] == 0
    assert m["inconsistent_rate"]["n"] == 0 and m["inconsistent_rate"]["rate"] is None  # no valid guess: n/a
    assert m["rewards"]["format_reward"]["mean"] == pytest.approx((1 * 0.0 + 5 * 0.1) / 6)


def test_invalid_turns_are_recorded_and_use_up_the_turn():
    script = [
        "<think>x</think><guess>ABCDE</guess>",  # turn 1: non-word
        "broken",  # turn 2: format
        "<think>x</think><guess>SLATE</guess>",  # turn 3: valid
        "<think>x</think><guess>CRANE</guess>",  # turn 4 onwards: valid, wins on CRANE
    ]
    [game] = play(ScriptedPlayer(script), ["CRANE"])
    assert [(t.turn, t.status, t.guess) for t in game.turns] == [
        (1, "nonword", "ABCDE"),
        (2, "format", None),
        (3, "valid", "SLATE"),
        (4, "valid", "CRANE"),
    ]
    assert game.won and game.guesses == 4 and game.turns[1].reply == "broken"
    assert game.history == (("SLATE", score_guess("SLATE", "CRANE")), ("CRANE", "GGGGG"))
    m = compute_metrics([game])
    assert (m["format_failure_rate"]["k"], m["nonword_rate"]["k"], m["invalid_rate"]["k"], m["turns"]) == (1, 1, 2, 4)
    assert m["distribution"]["4"] == 1


def test_the_prompt_shows_only_valid_guesses():
    seen = []

    class Spy(ScriptedPlayer):
        def replies(self, views):
            seen.extend(v.prompt[-1]["content"] for v in views)
            return super().replies(views)

    play(Spy(["bad", "<think>x</think><guess>SLATE</guess>", "bad"]), ["CRANE"])
    assert seen[0] == seen[1] == "Guess 1 of 6. No guesses yet."  # the invalid turn left no trace
    assert seen[2].startswith("Guess 2 of 6.") and "SLATE:" in seen[2]


def test_random_baselines_are_seeded_and_behave_as_named():
    a, b = play(RandomCandidatePlayer(seed=1), SECRETS[:10]), play(RandomCandidatePlayer(seed=1), SECRETS[:10])
    assert [g.to_dict() for g in a] == [g.to_dict() for g in b]
    assert compute_metrics(a)["inconsistent_rate"]["k"] == 0  # always a still-possible answer
    r = compute_metrics(play(RandomAllowedPlayer(seed=0), SECRETS[:10]))
    assert r["invalid_rate"]["k"] == 0 and r["inconsistent_rate"]["rate"] > 0.5


def test_a_player_returning_the_wrong_number_of_replies_is_an_error():
    class Short(ScriptedPlayer):
        def replies(self, views):
            return []

    with pytest.raises(ValueError, match="0 replies for 2 games"):
        play(Short(["x"]), ["CRANE", "SLATE"])


def test_select_secrets_spreads_over_the_held_out_list():
    assert select_secrets() == eval_secrets() and select_secrets(500) == eval_secrets()
    few = select_secrets(10)
    assert len(set(few)) == 10 and set(few) <= set(eval_secrets()) and few[0] == eval_secrets()[0]
    assert len({w[0] for w in few}) > 5  # not all from the start of the alphabet
    assert select_secrets(split="val") == train_secrets("val") and set(select_secrets(10, "val")) <= set(
        train_secrets("val")
    )
    with pytest.raises(ValueError, match="unknown split 'test'"):
        select_secrets(split="test")


def test_inconsistent_and_repeated_guesses_by_turn_on_a_fixed_transcript():
    def turn(k, word, secret="CRANE"):
        return Turn(k, f"<think>x</think><guess>{word}</guess>", "valid", word, score_guess(word, secret))

    games = [
        # turn 2 contradicts SLATE's feedback (T is absent), turn 3 repeats it, turn 4 wins
        Game("CRANE", [turn(1, "SLATE"), turn(2, "TRACE"), turn(3, "TRACE"), turn(4, "CRANE")]),
        # a broken turn 2 is not a valid guess; turn 3 is consistent
        Game("CRANE", [turn(1, "SLATE"), Turn(2, "broken", "format", None, None), turn(3, "CRANE")]),
        # a game that starts mid-way counts its turns from the start's length
        Game("CRANE", [turn(3, "TRACE")], start=(("SLATE", score_guess("SLATE", "CRANE")),) * 2),
    ]
    rows = by_turn(games)
    assert list(rows) == ["2", "3", "4", "5", "6"]  # turn 1 has no feedback to contradict
    assert (rows["2"]["inconsistent"]["k"], rows["2"]["inconsistent"]["n"]) == (1, 1)
    assert (rows["3"]["inconsistent"]["k"], rows["3"]["inconsistent"]["n"]) == (2, 3)
    assert (rows["3"]["repeat"]["k"], rows["3"]["repeat"]["n"]) == (1, 3)
    assert rows["4"]["inconsistent"]["k"] == 0 and rows["5"]["inconsistent"]["rate"] is None
    assert compute_metrics(games)["by_turn"] == rows


# --- replays ---------------------------------------------------------------------------------------


def test_replay_rows():
    assert squares("GYBBB") == "🟩🟨⬛⬛⬛"
    game = Game(
        "ABIDE",
        [
            Turn(1, "r1", "valid", "SPEED", score_guess("SPEED", "ABIDE")),  # duplicate E: only one marked
            Turn(2, "<think>x</think><guess>ABCDE</guess>", "nonword", "ABCDE", None),
            Turn(3, "x" * 60, "format", None, None),
            Turn(4, "r4", "valid", "ABIDE", "GGGGG"),
        ],
    )
    assert replay_lines(game) == [
        "ABIDE (won in 4)",
        "1 ⬛⬛🟨⬛🟨 SPEED",
        "2 ❌ nonword: '<think>x</think><guess>ABCDE</guess>'",
        "3 ❌ format: '" + "x" * 48 + "…'",
        "4 🟩🟩🟩🟩🟩 ABIDE",
    ]
    lost = Game("ELDER", [Turn(1, "r", "valid", "EERIE", score_guess("EERIE", "ELDER"))] * 6)
    assert replay_lines(lost)[:2] == ["ELDER (lost after 6)", "1 🟩🟨🟨⬛⬛ EERIE"]


# --- intervals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "n", "rate", "low", "high"),
    [
        (0, 10, 0.0, 0.0, 0.2775),  # the rule of three's cousin: zero of ten still allows 28%
        (5, 10, 0.5, 0.2366, 0.7634),
        (10, 10, 1.0, 0.7225, 1.0),
        (1, 100, 0.01, 0.0018, 0.0545),
        (300, 300, 1.0, 0.9874, 1.0),
    ],
)
def test_wilson_interval_known_values(k, n, rate, low, high):
    w = wilson(k, n)
    assert (w["k"], w["n"], w["rate"]) == (k, n, rate)
    assert w["low"] == pytest.approx(low, abs=1e-4) and w["high"] == pytest.approx(high, abs=1e-4)


def test_wilson_with_nothing_observed_and_bad_counts():
    assert wilson(0, 0) == {"k": 0, "n": 0, "rate": None, "low": 0.0, "high": 1.0}
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_mean_ci_is_seeded_and_brackets_the_mean():
    values = [3, 4, 4, 5, 3, 3, 4, 6, 2, 4]
    a, b = mean_ci(values, seed=0), mean_ci(values, seed=0)
    assert a == b and a["mean"] == pytest.approx(3.8) and a["n"] == 10
    assert 3.0 <= a["low"] < 3.8 < a["high"] <= 4.6  # about the mean +- 1.96 standard errors (0.34)
    assert mean_ci([4.0]) == {"n": 1, "mean": 4.0, "low": 4.0, "high": 4.0}
    assert mean_ci([]) == {"n": 0, "mean": None, "low": None, "high": None}


def transcript(secret: str, guesses: Sequence[str], start: Sequence[str] = ()) -> Game:
    """A game of ``secret`` from the given ``start`` guesses, its turns the ``guesses`` played."""
    history = tuple((w, score_guess(w, secret)) for w in start)
    turns = [
        Turn(k, format_reply(w), "valid", w, score_guess(w, secret)) for k, w in enumerate(guesses, len(start) + 1)
    ]
    return Game(secret, turns, history)


LOST = ["CRANE", "SLATE", "PLANT", "BRICK", "FJORD"]  # five wrong guesses after one given: lost at 6


@pytest.mark.parametrize(
    ("start", "trained", "saved"),
    [
        # Won in 4, then won in 3: one guess saved; the given opening counts in both.
        (
            [transcript("ABBEY", ["CRANE", "SLATE", "ABBEY"], ["ROBOT"])],
            [transcript("ABBEY", ["CRANE", "ABBEY"], ["ROBOT"])],
            [1],
        ),
        # A lost game counts 7: winning it in 5 saves 2, and losing a game won in 6 costs 1.
        (
            [transcript("ABBEY", LOST, ["ROBOT"])],
            [transcript("ABBEY", ["CRANE", "SLATE", "PLANT", "ABBEY"], ["ROBOT"])],
            [2],
        ),
        ([transcript("ABBEY", [*LOST[:4], "ABBEY"], ["ROBOT"])], [transcript("ABBEY", LOST, ["ROBOT"])], [-1]),
        # The same game: nothing saved.
        ([transcript("ABBEY", ["ABBEY"])], [transcript("ABBEY", ["ABBEY"])], [0]),
    ],
)
def test_guesses_saved_game_by_game_on_fixed_transcripts(start, trained, saved):
    result = guesses_saved(start, trained)
    assert result == mean_ci(saved) and result["mean"] == saved[0]


def test_guesses_saved_interval_and_guesses_per_win_on_fixed_transcripts():
    secrets = select_secrets(20)
    assert not {"CRANE", "SLATE"} & set(secrets)
    quick = [transcript(s, ["CRANE", s]) for s in secrets]
    slow = quick[:2] + [transcript(s, ["CRANE", "SLATE", s]) for s in secrets[2:]]
    # 18 of 20 games one guess quicker, two the same: a mean of 0.9, its interval inside [0.75, 1].
    saved = guesses_saved(slow, quick, seed=3)
    assert saved["n"] == 20 and saved["mean"] == pytest.approx(0.9) and 0.75 <= saved["low"] < 0.9 < saved["high"] <= 1
    assert saved == guesses_saved(slow, quick, seed=3)  # seeded
    assert guesses_saved(quick, slow, seed=3)["mean"] == pytest.approx(-0.9)
    # Guesses per win, and per game with a loss counted 7, each with its interval.
    games = [*quick[:3], transcript("ZESTY", LOST, ["ROBOT"])]
    m = compute_metrics(games)
    assert m["mean_guesses_won"] == mean_ci([2, 2, 2]) and m["mean_guesses"] == mean_ci([2, 2, 2, 7])
    assert m["mean_guesses"]["mean"] == pytest.approx(13 / 4)
    assert m["mean_guesses"]["low"] < 13 / 4 < m["mean_guesses"]["high"]


def test_plainly_says_what_training_changed_against_the_start():
    start = [transcript("ABBEY", ["CRANE", "SLATE", "ABBEY"]), transcript("ZESTY", LOST, ["ROBOT"])]
    trained = [transcript("ABBEY", ["CRANE", "ABBEY"]), transcript("ZESTY", ["CRANE", "ZESTY"], ["ROBOT"])]
    before = PlayerResult("before", "model", compute_metrics(start), start)
    after = PlayerResult("after", "model", compute_metrics(trained) | {"guesses_saved": guesses_saved(start, trained)})
    baseline = PlayerResult("solver", "baseline", compute_metrics(trained))
    [line] = plainly([before, after, baseline])
    # ABBEY in 2 instead of 3, ZESTY won in 3 instead of lost (7): 1 and 4 saved, 2.5 a game.
    assert line.startswith("From its own opening: +2.50 [+1.00, +4.00] guesses a game against the start")
    assert "the start already won 50.0% [" in line and "after training 100.0% [" in line
    assert plainly([before, baseline]) == []  # nothing compared with the start: nothing said


@pytest.mark.parametrize(
    "trained",
    [
        [transcript("ABBEY", ["ABBEY"]), transcript("CRANE", ["CRANE"])],  # other secrets
        [transcript("ABBEY", ["ABBEY"], ["ROBOT"])],  # the same secret from another opening
        [],  # fewer games
    ],
)
def test_guesses_saved_needs_the_same_games(trained):
    with pytest.raises(ValueError, match="did not play the same games"):
        guesses_saved([transcript("ABBEY", ["ABBEY"])], trained)


def test_reward_means_on_a_fixed_transcript():
    game = Game(
        "CRANE",
        [
            Turn(1, "broken", "format", None, None),
            Turn(2, "<think>x</think><guess>SLATE</guess>", "valid", "SLATE", score_guess("SLATE", "CRANE")),
            Turn(3, "<think>x</think><guess>CRANE</guess>", "valid", "CRANE", "GGGGG"),
        ],
    )
    means = reward_means([game])
    assert means["format_reward"]["mean"] == pytest.approx(2 / 3)
    assert means["win_reward"]["mean"] == pytest.approx(1 / 3)
    # Each state is scored by the reward itself, with the valid history before the turn.
    history = [["SLATE", score_guess("SLATE", "CRANE")]]
    expected = REWARD_FUNCS["feedback_reward"](
        ["broken", game.turns[1].reply, game.turns[2].reply], past_guess_history=[[], [], history]
    )
    assert means["feedback_reward"]["mean"] == pytest.approx(sum(expected) / 3)
    assert set(means) == set(TURN_REWARDS)


# --- the choice among what is still possible ----------------------------------------------------------


def test_information_states_are_seeded_choices_among_three_or_more_answers():
    states = information_states(train_secrets("val")[:40], per_secret=3, seed=5)
    assert states == information_states(train_secrets("val")[:40], per_secret=3, seed=5)
    assert states != information_states(train_secrets("val")[:40], per_secret=3, seed=6)
    assert 60 <= len(states) < 120  # of 120 draws, those with three or more answers left
    for secret, history in states:
        assert secret in train_secrets("val") and secret not in [g for g, _ in history]  # not yet won
        assert all(score_guess(g, secret) == p for g, p in history) and 1 <= len(history) <= 3
        assert len(candidates(history)) >= 3


def test_information_of_players_on_fixed_states():
    states = information_states(train_secrets("val")[:30])
    best = information_of(SolverPlayer("candidates"), states)
    random_pick = information_of(RandomCandidatePlayer(0), states)
    broken = information_of(ScriptedPlayer(["<guess>CRANE</guess>"]), states)
    for (secret, history), value in zip(states, best["per_state"], strict=True):
        cands = candidates(history)
        top = max(information(w, cands)[1] for w in cands.words())
        assert value == pytest.approx(top)  # the most any still-possible answer tells
    assert all(r <= b + 1e-9 for r, b in zip(random_pick["per_state"], best["per_state"], strict=True))
    assert random_pick["mean"] < best["mean"] and best["low"] <= best["mean"] <= best["high"]
    assert broken["per_state"] == [0.0] * len(states) and broken["mean"] == 0.0


# --- the CLI ---------------------------------------------------------------------------------------


def cli_error(capsys, *argv: str) -> str:
    assert evaluate_cli.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error: ") == 1, err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--constrain", "words"], "unknown --constrain 'words'; valid: allowed, candidates"),
        (["--games", "0"], "--games must be at least 1"),
        (["--split", "test"], "unknown --split 'test'; valid: heldout, val"),
        (["--games", "many"], "invalid int value"),
        (["--sample", "--temperature", "0"], "--temperature must be positive"),
        (["--frobnicate", "1"], "unknown argument '--frobnicate'"),
        (["--train_log", "/nonexistent/trainer_state.json"], "neither a trainer_state.json"),
        (["--model", "/nonexistent/model"], "model path /nonexistent/model does not exist"),
    ],
)
def test_cli_errors_are_one_line(capsys, argv, expected):
    assert expected in cli_error(capsys, *argv)


def test_cli_adapter_errors(capsys, tmp_path, tiny_ci):
    assert "does not exist" in cli_error(capsys, "--model", str(tiny_ci), "--adapter", str(tmp_path / "none"))
    assert "no adapter_config.json" in cli_error(capsys, "--model", str(tiny_ci), "--adapter", str(tmp_path))


def test_cli_writes_json_markdown_and_plots(tmp_path, tiny_ci, capsys):
    out = tmp_path / "eval"
    argv = ["--model", str(tiny_ci), "--games", "3", "--constrain", "allowed", "--out", str(out), "--replays", "1"]
    assert evaluate_cli.main(argv) == 0
    assert {p.name for p in out.iterdir()} == {"eval.json", "eval.md", "guesses.png", "by_turn.png"}
    settings, results = read_json(out / "eval.json")
    assert settings["games"] == 3 and len(settings["secrets"]) == 3
    assert [r.kind for r in results] == ["model", "constrained", *["baseline"] * 5]
    assert [r.label for r in results][2:] == [
        "solver",
        "entropy over answers",
        "entropy over candidates",
        "random candidate",
        "random allowed",
    ]
    md = (out / "eval.md").read_text()
    assert "| model (constrained: allowed words) |" in md and "## Replays: model" in md


# --- a real evaluation ------------------------------------------------------------------------------


def test_real_evaluation_of_a_tiny_model_is_consistent_with_its_transcripts(tiny_loaded):
    model, tokenizer = tiny_loaded
    secrets = select_secrets(10)
    [result] = evaluate_model(model, tokenizer, secrets, Decoding(max_new_tokens=24))
    m, games = result.metrics, result.games
    assert [g.secret for g in games] == list(secrets) and m["games"] == 10
    turns = [t for g in games for t in g.turns]
    assert m["turns"] == len(turns) and all(g.won or g.guesses == 6 for g in games)
    for t in turns:  # every recorded verdict is the one the parser gives
        assert classify_reply(t.reply) == (t.status, t.guess)
        assert t.guess is None or t.guess == normalize_word(parse_completion(t.reply))
    assert m["format_failure_rate"]["k"] == sum(t.status == "format" for t in turns)
    assert m["nonword_rate"]["k"] == sum(t.status == "nonword" for t in turns)
    assert m["win_rate"]["k"] == sum(g.won for g in games) == 10 - m["distribution"]["fail"]
    assert sum(m["distribution"].values()) == 10
    assert m["rewards"]["format_reward"]["n"] == len(turns)
    json.dumps(result.to_dict())  # the JSON report holds it as is
    # Greedy play is deterministic: the same games again.
    [again] = evaluate_model(model, tokenizer, secrets, Decoding(max_new_tokens=24))
    assert [g.to_dict() for g in again.games] == [g.to_dict() for g in games]


def test_sampling_is_seeded(tiny_loaded):
    model, tokenizer = tiny_loaded
    runs = [
        play(ModelPlayer(model, tokenizer, Decoding(max_new_tokens=24, sample=True, seed=s)), SECRETS[:4])
        for s in (3, 3, 4)
    ]
    dicts = [[g.to_dict() for g in games] for games in runs]
    assert dicts[0] == dicts[1] and dicts[0] != dicts[2]


def test_grpo_train_evaluates_before_and_after_and_reuses_before_on_resume(tmp_path, monkeypatch):
    out = tmp_path / "out"
    argv = [
        "--profile",
        "cpu",
        "--train_rows",
        "8",
        "--per_device_train_batch_size",
        "4",
        "--num_generations",
        "4",
        "--max_steps",
        "1",
        "--save_steps",
        "1",
        "--disable_tqdm",
        "true",
        "--eval_games",
        "3",
        "--output_dir",
        str(out),
        *TURN_MODE,
    ]
    trainer = grpo_train.train(resolve(argv))
    directory = out / before_after.EVAL_DIR
    assert {p.name for p in directory.iterdir()} == {
        "before.json",
        "after.json",
        "eval.md",
        "guesses.png",
        "by_turn.png",
        "rewards.png",
        "log_history.json",
    }
    _, before = read_json(directory / "before.json")
    players = ["before", "solver", "entropy over answers", "entropy over candidates", "random candidate"]
    players.append("random allowed")
    assert [(r.label, r.opening) for r in before] == [(p, o) for o in ("own", "answer") for p in players]
    _, after = read_json(directory / "after.json")
    assert [(r.label, r.opening) for r in after] == [("after", "own"), ("after", "answer")]
    # The same random answer opens a secret's game before and after training: the two tables compare like for like,
    # game by game.
    assert [g.start for g in before[6].games] == [g.start for g in after[1].games] and after[1].games[0].start
    for was, now in ((before[0], after[0]), (before[6], after[1])):
        assert now.metrics["guesses_saved"] == guesses_saved(was.games, now.games, seed=42)
        assert "guesses_saved" not in was.metrics
    assert "guesses saved vs start" in (directory / "eval.md").read_text()
    # In plain figures, per opening, in eval.md and on the adapter's card.
    for text in ((directory / "eval.md").read_text(), (out / "README.md").read_text()):
        assert text.count("guesses a game against the start on the same games") == 2
        assert "From a random answer played first: " in text

    # evaluate.py on the run's directory plays the start without the adapter: the very games of before.json, and
    # the guesses the adapter saves against them.
    cli = tmp_path / "cli"
    assert evaluate_cli.main(["--adapter", str(out), "--no_baselines", "--replays", "0", "--out", str(cli)]) == 0
    _, played = read_json(cli / "eval.json")
    assert [(r.label, r.opening) for r in played] == [
        (label, o) for o in ("own", "answer") for label in ("model", "model + adapter")
    ]
    for start, trained, was, now in ((played[0], played[1], before[0], after[0]), (*played[2:], before[6], after[1])):
        assert [g.to_dict() for g in start.games] == [g.to_dict() for g in was.games]
        assert [g.to_dict() for g in trained.games] == [g.to_dict() for g in now.games]
        assert trained.metrics["guesses_saved"] == now.metrics["guesses_saved"]
    assert json.loads((directory / "log_history.json").read_text()) == trainer.state.log_history
    assert "| before |" in (directory / "eval.md").read_text() and "| after |" in (directory / "eval.md").read_text()

    # On --resume the saved evaluation stands for the starting model: no game is played again.
    calls = []
    real = before_after.evaluate_model
    monkeypatch.setattr(before_after, "evaluate_model", lambda *a, **k: calls.append(k["label"]) or real(*a, **k))
    grpo_train.train(resolve([*argv, "--max_steps", "2", "--resume"]))
    assert calls == ["after", "after"]  # once per opening


def test_markdown_labels_a_constrained_row_as_such():
    games = play(ConstantPlayer("CRANE"), ["CRANE", "SLATE"])

    rows = [
        PlayerResult("model", "model", compute_metrics(games), games),
        PlayerResult("model (constrained: allowed words)", "constrained", compute_metrics(games), games),
    ]
    md = markdown(rows, replays=1)
    assert md.count("\n| model") == 2 and "not its own skill" in md
    assert "## Replays: model (constrained: allowed words)" in md


@pytest.mark.parametrize(
    ("typed", "url"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),  # no scheme
        ("http://gpu-box:8000/v1", "http://gpu-box:8000"),  # the OpenAI base URL
        ("https://host/v1/ ", "https://host"),
    ],
)
def test_a_vllm_server_url_as_users_type_it(typed, url):
    assert server_url(typed) == url


def test_the_served_model_is_checked_by_name_or_by_directory(tmp_path):
    (tmp_path / "qwen").mkdir()
    assert same_model("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct")
    assert same_model(str(tmp_path / "qwen"), str(tmp_path / "." / "qwen"))
    assert not same_model("Qwen/Qwen2.5-0.5B-Instruct", str(tmp_path / "qwen"))
    assert not same_model(str(tmp_path / "qwen"), str(tmp_path))
