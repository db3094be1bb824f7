"""Game mode (``--rollout game``): the sample layout, placeholders that carry no reward, advantage or
gradient, the same games for the same seed and step (also after --resume), the rewards' ordering
on whole games, and a real game-mode run of the embedded model."""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

import grpo_train
from evaluation.play import RandomCandidatePlayer
from rewards import GAME_WEIGHTS, REWARD_FUNCS, REWARD_RANGES, get_reward_funcs
from settings.arguments import CONFIG_FILE, SLOTS
from settings.config import resolve
from settings.errors import ConfigError
from settings.summary import summary
from training.data import make_row
from training.game_stats import lone_turn_share
from training.rollout import TOKEN_NORMALISED_LOSSES, GameBatch, GameRollout, KeptRows, kept_rows
from training.trainer import live_length_metrics, take_rows, trim_padding
from wordle import MAX_GUESSES, allowed, candidates, history_for, render_prompt, train_secrets
from wordle.completion import completion_text
from wordle.game import Game, classify_reply, format_reply, play
from wordle.openings import RANDOM_ANSWER

# Two steps of 2 start states x 4 games each (48 turn samples), micro-batches of 8.
GAME = [
    "--profile",
    "cpu",
    "--rollout",
    "game",
    "--num_generations",
    "4",
    "--per_device_train_batch_size",
    "8",
    "--gradient_accumulation_steps",
    "6",
    "--save_steps",
    "2",
    "--disable_tqdm",
    "true",
    "--seed",
    "5",
    "--skip_eval",
    "true",
]


def scripted_game(secret: str, words: list[str], start: tuple = ()) -> Game:
    """A game played with ``words`` in turn: ``!XXXXX`` a non-word, ``?`` a reply that does not parse, a
    string starting with ``<`` a raw reply."""

    class Script:
        name = "script"

        def replies(self, views):
            return [self.reply(v.turn - len(start) - 1) for v in views]

        def reply(self, i):
            word = words[min(i, len(words) - 1)]
            if word == "?":
                return "<guess>oops"
            return word if word.startswith("<") else format_reply(word.lstrip("!"))

    [game] = play(Script(), [secret], [start])
    return game


def records_for(games: list[Game]) -> dict:
    return {(i, t.turn): ([1, 2, i], [7, t.turn, 0], [-0.5, -0.25, -0.1]) for i, g in enumerate(games) for t in g.turns}


def columns(out: dict) -> dict:
    return {k: v for k, v in out.items() if k not in ("prompt_ids", "completion_ids", "logprobs", "env_mask")}


def test_layout_is_slot_groups_of_games_with_masked_placeholders():
    games = [
        scripted_game("CRANE", ["SLATE", "CRANE"]),  # won in 2
        scripted_game("CRANE", ["CRANE"]),  # won in 1
        scripted_game("CRANE", ["SLATE", "!ZZZZZ", "BRINE", "CRANE"]),  # a non-word, won in 4
        scripted_game("CRANE", ["SLATE"]),  # lost: six turns
    ]
    out = GameRollout().layout(games, records_for(games), generations=4, eos_id=0)
    assert all(len(v) == SLOTS * 4 for v in out.values())
    for slot in range(SLOTS):
        for g, game in enumerate(games):
            i = slot * 4 + g
            live = slot < len(game.turns)
            assert out["game_turn"][i] == (slot + 1 if live else None)
            assert out["env_mask"][i] == ([1, 1, 1] if live else [0])
            assert out["completion_ids"][i] == ([7, slot + 1, 0] if live else [0])
            assert out["game_won"][i] == game.won and out["game_guesses"][i] == game.guesses
    # The history shown before turn 3 of game 2 holds only its valid guesses.
    assert out["past_guess_history"][2 * 4 + 2] == [["SLATE", "BBGBG"]]
    assert sum(t is None for t in out["game_turn"]) == 4 * SLOTS - (2 + 1 + 4 + 6)
    # vLLM's sampling log-probabilities go to TRL per token, 0 on a placeholder; model.generate's turns have none,
    # and then the batch has none, as TRL's own turns (its importance sampling falls back to the scoring pass).
    assert out["logprobs"][0] == [-0.5, -0.25, -0.1] and out["logprobs"][3 * 4 + 1] == [0.0]
    without = {key: (prompt, completion, None) for key, (prompt, completion, _) in records_for(games).items()}
    assert GameRollout().layout(games, without, generations=4, eos_id=0)["logprobs"] is None


def test_lone_turns_are_counted_per_start_state_and_slot():
    won_in_2 = scripted_game("CRANE", ["SLATE", "CRANE"])
    won_in_1 = scripted_game("CRANE", ["CRANE"])
    lost = scripted_game("CRANE", ["SLATE"])
    # Turns after the first: turn 2 of both games (not lone), then lost's turns 3-6 (lone).
    assert lone_turn_share([won_in_2, lost], generations=2) == pytest.approx(4 / 6)
    assert lone_turn_share([won_in_2, won_in_2, won_in_1, won_in_1], generations=2) == 0
    assert lone_turn_share([won_in_2, won_in_1, lost, won_in_1], generations=2) == 1  # each later turn alone
    assert lone_turn_share([won_in_1, won_in_1], generations=2) == 0  # no later turn at all


def test_every_reward_is_none_on_a_placeholder_and_in_range_elsewhere():
    games = [scripted_game("CRANE", ["SLATE", "CRANE"]), scripted_game("CRANE", ["?", "SLATE", "TRACE"])]
    out = GameRollout().layout(games, records_for(games), generations=2, eos_id=0)
    replies = [
        games[i % 2].turns[s].reply if out["game_turn"][s * 2 + i % 2] else "" for s in range(SLOTS) for i in (0, 1)
    ]
    for name, func in REWARD_FUNCS.items():
        scores = func(replies, **columns(out))
        low, high = REWARD_RANGES[name]
        for score, turn in zip(scores, out["game_turn"], strict=True):
            assert (score is None) == (turn is None), name
            assert score is None or low <= score <= high, name


def total(game: Game, turn: int, weights=GAME_WEIGHTS) -> float:
    """The weighted total of ``game``'s turn ``turn`` (1-based among the played turns), as TRL sums it."""
    out = GameRollout(slots=MAX_GUESSES).layout([game], records_for([game]), generations=1, eos_id=0)
    reply = game.turns[turn - 1].reply
    cols = {k: [v[turn - 1]] for k, v in columns(out).items()}
    return sum(w * f([reply], **cols)[0] for f, w in zip(get_reward_funcs(list(weights)), weights.values()))


# The hacks a policy will try at turn 2 of a game against CRANE, each followed by the same honest play.
HACKS = ["?", "!ZZZZZ", "<think></think><guess>CRANE</guess><guess>SLATE</guess>"]


@pytest.mark.parametrize("hack", HACKS)
def test_no_hack_in_a_game_scores_above_an_honest_guess(hack):
    hacked = scripted_game("CRANE", ["SLATE", hack, "BRINE", "CRANE"])
    assert hacked.turns[1].status != "valid" and hacked.won and hacked.guesses == 4
    # In the same state, an honest guess that reuses absent letters (and so helps nothing) beats the hack.
    poor = scripted_game("CRANE", ["SLATE", "STEAL", "BRINE", "CRANE"])
    assert poor.guesses == hacked.guesses
    assert total(hacked, 2) < total(poor, 2)
    # The hack also costs its game a guess: the same opening turn totals less than in the honest game.
    honest = scripted_game("CRANE", ["SLATE", "BRINE", "CRANE"])
    assert total(hacked, 1) < total(honest, 1)


def test_the_winning_turn_beats_any_other_reply_in_its_state_whose_game_is_lost():
    won = scripted_game("CRANE", ["SLATE", "CRANE"])
    for other in ["TRACE", "BRINE", "SLATE", "!ZZZZZ", "?"]:
        lost = scripted_game("CRANE", ["SLATE", other, "BRINE"])
        assert total(won, 2) > total(lost, 2), other


def totals(replies: list[str], secret: str, history: list, won: bool, guesses: int) -> list[float]:
    """Each reply's weighted total in one state, its game won in ``guesses`` or lost, as TRL sums it."""
    n = len(replies)
    columns_ = {
        "secret": [secret] * n,
        "past_guess_history": [history] * n,
        "game_turn": [len(history) + 1] * n,
        "game_won": [won] * n,
        "game_guesses": [guesses] * n,
    }
    funcs = get_reward_funcs(list(GAME_WEIGHTS))
    per_func = [f(replies, **columns_) for f in funcs]
    return [sum(w * scores[i] for w, scores in zip(GAME_WEIGHTS.values(), per_func, strict=True)) for i in range(n)]


def real_states() -> list[tuple[str, list]]:
    """Game states a consistent player meets: a random still-possible answer from a random answer played first,
    on validation secrets, each state before a turn with two or more answers left; and the state where the old
    claim failed (THESE after THETA and FUROR: guessing THEME collected 2.07 of shaping)."""
    secrets = list(train_secrets("val")[:40])
    games = play(RandomCandidatePlayer(3), secrets, RANDOM_ANSWER.starts(secrets, seed=3))
    states = [("THESE", history_for("THESE", ["THETA", "FUROR"]))]
    for game in games:
        for history in game.histories():
            if len(history) < MAX_GUESSES and len(candidates(history)) >= 2:
                states.append((game.secret, list(history)))
    return states


def test_game_weights_order_replies_as_their_docstring_says_in_real_game_states():
    """The winning reply outweighs any reply whose game is lost, whatever shaping that reply collects; a reply
    whose game is won one guess later outweighs the winning one by at most its information less 0.2."""
    rng = random.Random(0)
    words = allowed()
    checked = 0
    for secret, history in real_states():
        turn = len(history) + 1
        [win] = totals([format_reply(secret)], secret, history, True, turn)
        others = [w for w in candidates(history).words() if w != secret]
        replies = [format_reply(w) for w in [*others, *rng.sample(words, 40)]] + ["<guess>oops", format_reply("ZZZZZ")]
        assert max(totals(replies, secret, history, False, MAX_GUESSES)) < win, (secret, history)
        if turn < MAX_GUESSES:
            later = totals([format_reply(w) for w in others], secret, history, True, turn + 1)
            info = REWARD_FUNCS["info_gain_reward"](
                [format_reply(w) for w in others],
                past_guess_history=[history] * len(others),
                secret=[secret] * len(others),
            )
            assert all(a - win <= i - 0.2 + 1e-9 for a, i in zip(later, info, strict=True)), (secret, history)
        checked += 1
    assert checked > 100


SHAPING = {name: weight for name, weight in GAME_WEIGHTS.items() if name != "game_reward"}


@pytest.mark.parametrize("other", ["TRACE", "BRINE", "CRATE"])
def test_the_game_return_pays_the_win_not_a_turns_lottery(other):
    """win_reward weighs 0 in game mode: the turn that wins and a turn whose game wins one guess later differ by
    their own shaping and by the return of the guess it cost (2.0 x 0.1), and by no prize for the draw."""
    assert GAME_WEIGHTS["win_reward"] == 0.0
    won = scripted_game("CRANE", ["SLATE", "CRANE"])
    later = scripted_game("CRANE", ["SLATE", other, "CRANE"])
    assert later.won and later.guesses == won.guesses + 1
    difference = total(won, 2) - total(later, 2)
    assert difference == pytest.approx(total(won, 2, SHAPING) - total(later, 2, SHAPING) + 2.0 * 0.1)


def test_dry_run_shows_games_per_step_and_raises_the_accumulation():
    resolved = resolve(["--profile", "cpu", "--rollout", "game", "--num_generations", "4", "--dry-run"])
    rollout = summary(resolved)["rollout"]
    samples = resolved.training.per_device_train_batch_size * resolved.training.gradient_accumulation_steps
    assert samples % (SLOTS * 4) == 0
    assert rollout["mode"] == "game" and rollout["games_per_step"] == samples // SLOTS
    assert rollout["samples_per_step"] == samples
    assert "game_reward" in resolved.weights
    with pytest.raises(ConfigError, match="needs --rollout game"):
        resolve(["--profile", "cpu", "--rollout", "turn", "--rewards", "format_reward", "game_reward"])
    with pytest.raises(ConfigError, match="unknown rollout 'games'"):
        resolve(["--profile", "cpu", "--rollout", "games"])


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ([], []),
        (["--train_rows", "64"], ["--train_rows"]),
        (["--explore", "0.5", "--train_rows", "64"], ["--explore", "--train_rows"]),
    ],
)
def test_game_mode_says_which_turn_mode_flags_it_ignores(flags, said):
    notes = resolve(["--profile", "cpu", "--rollout", "game", *flags, "--dry-run"]).notes
    ignored = sorted(n.split()[0] for n in notes if "does nothing with --rollout game" in n)
    assert ignored == said
    # Turn mode uses them, and so does a game run that builds its --dataset file.
    for other in (["--rollout", "turn"], ["--rollout", "game", "--dataset", "rows.jsonl"]):
        assert not any(
            "does nothing with --rollout game" in n
            for n in resolve(["--profile", "cpu", *other, *flags, "--dry-run"]).notes
        )


# --scale_rewards, wherever it came from -> what game mode trains with (a TRL group is one turn slot's live games).
SCALES = [
    (["--profile", "cuda"], "batch"),  # TRL's default, group: game mode's choice instead, and it says so
    (["--profile", "cpu"], "batch"),  # the embedded model's settings: game mode's choice too
    (["--profile", "cpu", "--scale_rewards", "none"], "none"),  # no scaling: honoured
    (["--profile", "cuda", "--scale_rewards", "batch"], "batch"),
    (["--profile", "cpu", "--scale_rewards", "group"], "refused"),  # asked for by name: refused in one line
    (["--profile", "cpu", "--scale_rewards", "true"], "refused"),  # TRL's alias of group: refused as well
    (["--profile", "cpu", "--scale_rewards", "False"], "none"),  # TRL's alias of none, as a flag's text
]


@pytest.mark.parametrize(("flags", "trains_with"), SCALES)
def test_game_mode_scales_rewards_by_the_batch_or_not_at_all(flags, trains_with):
    argv = [*flags, "--rollout", "game", "--dry-run"]
    if trains_with == "refused":
        with pytest.raises(ConfigError, match="divides each turn slot's rewards by their own std"):
            resolve(argv)
        return
    resolved = resolve(argv)
    assert resolved.training.scale_rewards == trains_with
    chose = any("scale_rewards batch" in note for note in resolved.notes)
    assert chose == ("--scale_rewards" not in flags)
    if chose:  # turn mode keeps TRL's default
        assert resolve([*flags, "--rollout", "turn", "--dry-run"]).training.scale_rewards == "group"


def test_turn_mode_takes_trls_own_spellings_of_scale_rewards():
    for spelled, scale in (("true", "group"), ("TRUE", "group"), ("false", "none"), ("batch", "batch")):
        resolved = resolve(["--profile", "cpu", "--rollout", "turn", "--scale_rewards", spelled, "--dry-run"])
        assert resolved.training.scale_rewards == scale


def train(out: Path, *extra: str):
    return grpo_train.train(resolve([*GAME, "--output_dir", str(out), *extra]))


def game_logs(trainer_or_history) -> list[dict]:
    history = getattr(getattr(trainer_or_history, "state", None), "log_history", trainer_or_history)
    return [{k: v for k, v in h.items() if k.startswith("game/")} for h in history if "game/win_rate" in h]


def test_a_game_mode_run_trains_logs_games_and_resumes_with_the_same_games(tmp_path, monkeypatch):
    full = train(tmp_path / "full", "--max_steps", "3", "--game_eval_steps", "3", "--game_eval_games", "4")
    logs = game_logs(full)
    assert len(logs) == 3
    for log in logs:
        assert 0 <= log["game/win_rate"] <= 1 and 0 <= log["game/invalid_rate"] <= 1
    history = full.state.log_history
    checks = [h for h in history if "val/win_rate" in h]
    assert [h["step"] for h in checks] == [0, 3]  # the learning curve starts before the first step
    assert all(0 <= h["val_opening/win_rate"] <= 1 and 0 <= h["val/invalid_rate"] <= 1 for h in checks)
    assert not any(key.startswith("heldout") for h in history for key in h)  # the held-out secrets are never played
    assert any("lora_B" in n and p.abs().sum() > 0 for n, p in full.model.named_parameters())  # it learnt

    # Killed after step 2's checkpoint, resumed to 3: step 3 plays the same games as the run straight through.
    # The cut run keeps max_steps 3, as a killed one does: a shorter run has a shorter rate schedule, so its
    # second step would already train differently.
    class Kill(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step == 2

    make_trainer = grpo_train.make_trainer

    def killed_after_step_2(*args):
        trainer = make_trainer(*args)
        trainer.add_callback(Kill())
        return trainer

    with monkeypatch.context() as patch:
        patch.setattr(grpo_train, "make_trainer", killed_after_step_2)
        killed = train(tmp_path / "cut", "--max_steps", "3")
    assert killed.state.global_step == 2 and (tmp_path / "cut" / "checkpoint-2").is_dir()
    resumed = train(tmp_path / "cut", "--max_steps", "3", "--resume", "true")
    assert game_logs(resumed)[-1] == logs[-1]
    adapter = "adapter_model.safetensors"
    assert (tmp_path / "cut" / adapter).read_bytes() == (tmp_path / "full" / adapter).read_bytes()


def test_a_run_stopped_by_sigterm_saves_says_how_to_finish_and_resumes_to_the_same_adapter(tmp_path, capsys):
    """Preemption mid-step: the step finishes, its checkpoint is saved (checkpoint-2 is the regular one), the line
    gives the --resume command, and the resumed run ends with the adapter of a run that was never stopped."""
    full = train(tmp_path / "full", "--max_steps", "4")
    assert full.state.global_step == 4

    class Preempt(TrainerCallback):  # the cluster's SIGTERM, while step 3 runs
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 2:
                os.kill(os.getpid(), signal.SIGTERM)

    make_trainer = grpo_train.make_trainer

    def preempted(*args):
        trainer = make_trainer(*args)
        trainer.add_callback(Preempt())
        return trainer

    out = tmp_path / "cut"
    argv = [*GAME, "--output_dir", str(out), "--max_steps", "4"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grpo_train, "make_trainer", preempted)
        assert grpo_train.main(argv) == 128 + signal.SIGTERM
    line = capsys.readouterr().err.strip().splitlines()[-1]
    again = shlex.join(["python", "grpo_train.py", *argv, "--resume"])
    assert line == f"stopped: SIGTERM at step 3 of 4, checkpoint-3 saved in {out}; to finish: {again}"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is gone with the run
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    assert not (out / CONFIG_FILE).exists()

    assert grpo_train.main(shlex.split(again)[2:]) == 0
    adapter = "adapter_model.safetensors"
    assert (out / adapter).read_bytes() == (tmp_path / "full" / adapter).read_bytes()


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A trainer after one game step, and one more game batch (2 start states) generated and scored by it,
    with a KL anchor so that scoring runs the reference pass (the cpu profile's beta 0 skips it)."""
    trainer = train(tmp_path_factory.mktemp("scored") / "out", "--max_steps", "1", "--beta", "0.04")
    trainer.model.train()
    # A game that starts with one guess left has one live turn and five placeholders, whatever is played: its
    # first micro-batch (slots 1-2) mixes both, and the next two are placeholders alone.
    last_turn = ["SLATE", "BRINE", "TRACE", "GRACE", "BRAKE"]
    starts = [make_row(s, history_for(s, g)) for s, g in (("CRANE", last_turn), ("PLUMB", ["SOARE"]))]
    batch = [row for row in starts for _ in range(SLOTS * 4)]
    return trainer, trainer._generate_and_score_completions(batch)


def test_placeholders_get_advantage_zero_and_no_gradient(scored):
    trainer, out = scored
    # TRL pads env_mask with 1s; the loss counts completion_mask x env_mask, which is all 0 on a placeholder.
    placeholder = (out["completion_mask"] * out["tool_mask"]).sum(1) == 0
    assert placeholder.any() and (~placeholder).any()
    assert torch.all(out["advantages"][placeholder] == 0)
    # A micro-batch of placeholders alone gives every trainable weight a zero gradient.
    rows = placeholder.nonzero().squeeze(1)[:8]
    micro = {k: (v[rows] if torch.is_tensor(v) and v.ndim > 0 else v) for k, v in out.items()}
    trainer.model.zero_grad()
    trainer.compute_loss(trainer.model, micro).backward()
    grads = [p.grad for p in trainer.model.parameters() if p.requires_grad]
    assert grads and all(g is None or torch.count_nonzero(g) == 0 for g in grads)


def test_scoring_trims_and_skips_each_chunk_as_the_loss_does_its_micro_batch(scored):
    trainer, out = scored
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    mask = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    width, size = out["completion_ids"].size(1), trainer.args.per_device_train_batch_size
    live = (out["completion_mask"] * out["tool_mask"]).any(1)
    tokens = out["completion_mask"].bool() & live[:, None]
    # The rollout told the scoring pass which rows are placeholders: beside live rows the reference log-probs are
    # 0 there (a micro-batch of placeholders alone is scored whole, as the loss takes it whole; all masked out).
    assert trainer._scoring is None  # and only for that pass
    beside_live = live.view(-1, size).any(1).repeat_interleave(size)
    assert not out["ref_per_token_logps"][~live & beside_live].any() and out["ref_per_token_logps"][tokens].any()
    chosen = KeptRows.of(live.tolist(), size)
    with torch.no_grad():
        trainer._scoring = GameBatch([], chosen)
        try:
            scored_logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, width, size)
        finally:
            trainer._scoring = None
        padded, _, _ = GRPOTrainer._get_per_token_logps_and_entropies(trainer, trainer.model, ids, mask, width, size)
        # The same log-probs as TRL's padded pass over every row, up to float rounding ...
        assert torch.allclose(scored_logps[tokens], padded[tokens], atol=1e-4)
        assert not scored_logps[~live & beside_live].any()
        # ... and bit for bit those of the loss's micro-batches, so the KL term compares like with like.
        mixed = 0
        for k, micro in enumerate(split_tensor_dict(out, trainer.args.steps_per_generation)):
            chunk, kept = scored_logps[k * size : (k + 1) * size], live[k * size : (k + 1) * size]
            micro = trim_padding(take_rows(micro, chosen.rows(k)))
            assert len(micro["prompt_ids"]) == (int(kept.sum()) or size)  # a chunk of placeholders stays whole
            mixed += 0 < kept.sum() < size
            micro_ids = torch.cat([micro["prompt_ids"], micro["completion_ids"]], 1)
            micro_mask = torch.cat([micro["prompt_mask"], micro["completion_mask"]], 1)
            got, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, micro_ids, micro_mask, micro["completion_ids"].size(1)
            )
            rows = chunk[kept] if kept.any() else chunk
            assert torch.equal(got, rows[:, : got.size(1)])
            assert not rows[:, got.size(1) :].any()  # padding columns: zeros
    assert mixed  # the batch did hold micro-batches of live rows and placeholders


# (reply lengths, live turn?, cut off at the length limit?) -> TRL's completion-length metrics over live turns.
LENGTHS = [
    # every row a live turn that ended: TRL's own figures
    ([3, 5], [1, 1], [0, 0], {"mean_length": 4, "min_length": 3, "max_length": 5, "clipped_ratio": 0}),
    # the placeholders of ended games (length 0) neither set the minimum nor dilute the mean
    ([3, 0, 5, 0], [1, 0, 1, 0], [0, 0, 0, 0], {"mean_length": 4, "min_length": 3, "mean_terminated_length": 4}),
    # a live turn cut off counts in the lengths and the clipped ratio, not in the terminated lengths
    (
        [3, 8, 0],
        [1, 1, 0],
        [0, 1, 0],
        {"mean_length": 5.5, "max_length": 8, "clipped_ratio": 0.5, "max_terminated_length": 3},
    ),
    # every live turn cut off: no terminated reply, which reads 0 as TRL's does
    ([8, 8, 0], [1, 1, 0], [1, 1, 0], {"clipped_ratio": 1, "mean_terminated_length": 0, "min_length": 8}),
    # no live turn at all: zeros, not a crash
    ([0, 0], [0, 0], [0, 0], {"mean_length": 0, "min_length": 0, "clipped_ratio": 0}),
]


@pytest.mark.parametrize(("lengths", "live", "clipped", "expected"), LENGTHS)
def test_completion_lengths_count_live_turns_only(lengths, live, clipped, expected):
    metrics = live_length_metrics(torch.tensor(lengths), torch.tensor(live).bool(), torch.tensor(clipped).bool())
    assert {f"completions/{key}": value for key, value in expected.items()}.items() <= metrics.items()


def test_the_logged_completion_lengths_are_those_of_the_live_turns(scored):
    trainer, out = scored
    lengths = (out["completion_mask"] * out["tool_mask"]).sum(1)
    live = lengths[lengths > 0].float()  # a turn cut off keeps its mask (mask_truncated_completions is off)
    logged = {key: values[-1] for key, values in trainer._metrics["train"].items() if key.startswith("completions/")}
    assert (lengths == 0).any()  # the batch has placeholders, which TRL counted as replies of length 0
    assert logged["completions/min_length"] == live.min().item() > 0
    assert logged["completions/mean_length"] == pytest.approx(live.mean().item())
    assert logged["completions/max_length"] == live.max().item()


@pytest.mark.parametrize(
    ("live", "keep", "rows"),
    [
        ("1101", 3, [0, 1, 3]),  # one process: its live rows
        ("1101", 4, None),  # every row
        ("1000", 3, [0, 1, 2]),  # another process has 3 live rows here: 2 placeholders join, in order
        ("0010", 2, [0, 2]),
        ("0000", 2, [0, 1]),  # no live row here, 2 on another process: 2 placeholders
        ("0000", 0, None),  # no live row on any process: kept whole, so that no pass is empty
        ("1111", 4, None),
    ],
)
def test_each_micro_batch_keeps_as_many_rows_as_the_fullest_process(live, keep, rows):
    got = kept_rows(torch.tensor([c == "1" for c in live]), keep)
    assert (got if got is None else got.tolist()) == rows
    kept = KeptRows.of([c == "1" for c in live * 2], size=4)  # one process: each micro-batch's own count
    assert kept.counts == [live.count("1")] * 2


def test_the_completions_table_pairs_each_turn_with_its_own_state(scored):
    """TRL logs, and hands the reward functions, one prompt per row: each turn's, not its game's start state's."""
    trainer, out = scored
    rows, games = len(out["advantages"]), 4
    prompts, replies = list(trainer._logs["prompt"])[-rows:], list(trainer._logs["completion"])[-rows:]
    live = (out["completion_mask"] * out["tool_mask"]).any(1)
    later = 0
    for g in range(games):  # the second start state, PLUMB after SOARE: its rows are the batch's second half
        guesses = ["SOARE"]
        for slot in range(SLOTS):
            row = rows // 2 + slot * games + g
            if not live[row]:
                break
            assert prompts[row] == render_prompt(history_for("PLUMB", guesses))
            status, word = classify_reply(completion_text(replies[row]))
            guesses += [word] if status == "valid" else []  # an invalid turn is not shown to the next
            later += slot > 0
    assert later  # turns after the first were checked, whose states the start state's prompt does not show


# Every loss TRL 1.16 offers, and what game mode does with it: its micro-batches leave out the placeholders of
# ended games where the normaliser counts the whole batch's tokens, keep every row where it counts a micro-batch's
# rows, and refuse it where it counts a micro-batch's own tokens (which TRL's shuffle mixes and game mode's slot
# order does not).
LOSSES = [
    ("dapo", "drops"),
    ("cispo", "drops"),
    ("vespo", "drops"),
    ("grpo", "keeps"),
    ("dr_grpo", "keeps"),
    ("sapo", "keeps"),
    ("luspo", "keeps"),
    ("bnpo", "refused"),
]


def truncated(out: dict, rows: list[int]) -> dict:
    """``out`` as TRL leaves it with mask_truncated_completions when ``rows`` were cut off at the length limit:
    their completion and tool masks zeroed, and the batch's loss tokens counted again."""
    out = {k: v.clone() if torch.is_tensor(v) else v for k, v in out.items()}
    for key in ("completion_mask", "tool_mask"):
        out[key][rows] = 0
    out["num_items_in_batch"] = (out["completion_mask"] * out["tool_mask"]).sum()
    return out


@pytest.mark.parametrize(("loss_type", "handling"), LOSSES)
def test_every_loss_gives_trl_s_update_on_the_same_rows(scored, monkeypatch, loss_type, handling):
    if handling == "refused":
        with pytest.raises(ConfigError, match=f"--loss_type {loss_type} normalises by a micro-batch's own tokens"):
            resolve([*GAME, "--loss_type", loss_type])
        return
    trainer, out = scored
    size = trainer.args.per_device_train_batch_size
    live = (out["completion_mask"] * out["tool_mask"]).any(1)  # before any reply is masked as cut off
    # Rows cut off at the length limit (mask_truncated_completions): every live row of the first micro-batch,
    # which leaves it no loss token at all, and one row of a later micro-batch beside live ones.
    first = live[:size].nonzero().flatten().tolist()
    later = next(k for k in range(1, len(live) // size) if live[k * size : (k + 1) * size].sum() > 1)
    out = truncated(out, [*first, int(live[later * size :].nonzero()[0]) + later * size])
    # Distinct advantages on the live rows (a tiny model ties many groups); the placeholders keep their 0.
    out["advantages"] = torch.where(live, torch.linspace(-1.5, 1.5, len(live)), 0.0)
    monkeypatch.setattr(trainer, "loss_type", loss_type)
    monkeypatch.setattr(trainer, "importance_sampling_level", "sequence" if loss_type == "luspo" else "token")

    def accumulated(micro_batches):
        trainer.model.zero_grad()
        total = 0.0
        for micro in micro_batches:
            loss = trainer.compute_loss(trainer.model, micro)
            loss.backward()
            total += loss.item()
        return total, [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]

    # TRL's way: the generation batch shuffled, then split into micro-batches that keep every row.
    with torch.random.fork_rng():
        torch.manual_seed(0)
        mixed = shuffle_sequence_dict(out)
    reference, reference_grads = accumulated(split_tensor_dict(mixed, trainer.args.steps_per_generation))
    kept = KeptRows.of(live.tolist(), size, loss_type)  # what the rollout hands the trainer
    assert (kept is not None) == (handling == "drops") == (loss_type in TOKEN_NORMALISED_LOSSES)
    ours = trainer.micro_batches(out, kept)
    rows = sum(len(m["prompt_ids"]) for m in ours)
    assert rows < len(live) if handling == "drops" else rows == len(live)
    loss, grads = accumulated(ours)
    # The scoring pass takes the same chunks, one of them with no loss token left (TRL would score it whole).
    trainer._scoring = GameBatch([], kept)
    try:
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        mask = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
        with torch.no_grad():
            scored_logps, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, mask, out["completion_ids"].size(1), size
            )
    finally:
        trainer._scoring = None
    assert scored_logps.shape == out["completion_ids"].shape
    assert reference != 0 and loss == pytest.approx(reference, rel=1e-5, abs=1e-7)
    assert len(grads) == len(reference_grads)
    for got, want in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())  # summed in another order


def test_the_same_seed_and_step_play_the_same_games(tmp_path):
    a = game_logs(train(tmp_path / "a", "--max_steps", "2"))
    b = game_logs(train(tmp_path / "b", "--max_steps", "2"))
    assert a == b
    c = game_logs(train(tmp_path / "c", "--max_steps", "2", "--seed", "6"))
    assert c != a


def test_dataset_rows_start_games_mid_way(tmp_path):
    rows = tmp_path / "rows.jsonl"
    starts = [("CRANE", ["SLATE", "BRINE"]), ("PLUMB", ["SOARE"])]  # a step takes 2 start states
    rows.write_text(
        "".join(json.dumps({"secret": s, "past_guess_history": history_for(s, g)}) + "\n" for s, g in starts)
    )
    trainer = train(tmp_path / "out", "--max_steps", "1", "--dataset", str(rows))
    [log] = game_logs(trainer)
    assert 0 <= log["game/win_rate"] <= 1
