"""Game mode's settings (``--rollout game``): a step of whole games, and TRL's objective kept as TRL computes it over
turn-slot groups and micro-batches. Called by ``settings.checks.choose_rewards``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from settings.arguments import SLOTS, ScriptArguments
from settings.errors import ConfigError, unknown

# TRL's own spellings of scale_rewards besides its names: a bool, which the command line gives as text.
SCALE_ALIASES = {"true": "group", "false": "none"}
SCALES = ("group", "batch", "none")


def scale_rewards(train_kw: dict[str, Any]) -> str | None:
    """``--scale_rewards true|false`` as TRL reads the bools (group, none): argparse hands them over as text, which
    TRL would refuse only at the first step, after the model loaded and the games before were played. Returns the
    value as the user spelled it."""
    spelled = train_kw.get("scale_rewards")
    if spelled is None:
        return None
    spelled = str(spelled).lower() if isinstance(spelled, bool) else str(spelled)
    value = SCALE_ALIASES.get(spelled.lower(), spelled)
    if value not in SCALES:
        raise unknown("scale_rewards", spelled, [*SCALES, *SCALE_ALIASES], "--scale_rewards")
    train_kw["scale_rewards"] = value
    return spelled


# How long games last, in turns: the embedded model's start on the 300 held-out secrets from its own opening (the
# README's first table: won in 2, 3, 4, 5, 6 guesses, and lost). A hub model's games are its own; this is the guide.
GAME_LENGTHS = {2: 15, 3: 91, 4: 108, 5: 62, 6: 16 + 8}


def lone_turns_expected(generations: int) -> float:
    """The share of turns after the first that are their slot's only live game (``training.game_stats``'s
    ``lone_turn_share``), for ``generations`` games per start state lasting as ``GAME_LENGTHS`` says. Such a turn is
    its own group's mean: advantage 0, no signal."""
    games = sum(GAME_LENGTHS.values())
    alive = [sum(n for length, n in GAME_LENGTHS.items() if length >= turn) / games for turn in range(2, SLOTS + 1)]
    lone = sum(generations * s * (1 - s) ** (generations - 1) for s in alive)
    return lone / sum(generations * s for s in alive)


def game_batch(script: ScriptArguments, train_kw: dict[str, Any], notes: list[str]) -> None:
    """Game mode's batch: one optimizer step sees whole games, each as one sample per turn slot.

    The rollout lays out each start state's games as ``SLOTS`` consecutive groups (turn 1's
    num_generations samples, then turn 2's, ...), so a step's samples must be a multiple of
    ``SLOTS x num_generations``. ``per_device_train_batch_size`` stays the memory knob; the gradient
    accumulation is raised until a step holds whole games. Also refuses, or notes, the flags that game mode
    does not use."""
    for key in ("generation_batch_size", "steps_per_generation"):
        if train_kw.get(key) is not None:
            raise ConfigError(f"--rollout game sets the generation batch itself (whole games per step): drop --{key}")
    for key in ("use_transformers_continuous_batching", "use_transformers_paged"):
        if train_kw.get(key):  # TRL's settings for its own generate call, which a game's turns do not go through
            raise ConfigError(
                f"--{key} does nothing with --rollout game (each turn generates with model.generate, or vLLM): "
                "drop it, or use --rollout turn"
            )
    if not script.dataset:
        # They shape built rows: a game run without --dataset starts a game from every training secret instead
        # (training.run.training_rows); with a --dataset file still to build, they shape that file's rows.
        for field_ in dataclasses.fields(ScriptArguments):
            if field_.name in ("train_rows", "explore") and getattr(script, field_.name) != field_.default:
                notes.append(
                    f"--{field_.name} does nothing with --rollout game (it shapes the rows --rollout turn builds)"
                )
    generations = train_kw["num_generations"]
    if generations < 4:
        notes.append(
            f"--rollout game with num_generations {generations}: about {lone_turns_expected(generations):.0%} of the "
            f"turns after the first are their slot's only live game, which teaches nothing; 4 leaves "
            f"{lone_turns_expected(4):.0%}: raise --num_generations where memory allows"
        )
    block = SLOTS * generations
    per_device = train_kw["per_device_train_batch_size"]
    accumulation = train_kw["gradient_accumulation_steps"]
    needed = math.lcm(block, per_device) // per_device
    if accumulation % needed:
        raised = needed * -(-accumulation // needed)
        notes.append(
            f"--rollout game: gradient_accumulation_steps {accumulation} -> {raised}, so that a step holds whole "
            f"games ({SLOTS} turn slots x num_generations {generations} samples per start state)"
        )
        train_kw["gradient_accumulation_steps"] = raised


# The losses game mode gives TRL's own update with, besides its default dapo (tests/test_rollout.py).
OTHER_LOSSES = ("grpo", "dr_grpo", "sapo", "luspo", "cispo", "vespo")


def game_objective(
    train_kw: dict[str, Any], given: frozenset[str], notes: list[str], spelled: str | None = None
) -> None:
    """Game mode's objective is TRL's: refuse in one line what its turn-slot groups and micro-batches would change.

    TRL shuffles a generation batch before splitting it, so each micro-batch is a random mix of its rows; game mode
    keeps them in turn-slot order (WordleGRPOTrainer.micro_batches), so what normalises by a micro-batch's own
    tokens would weigh the few live turns of late slots up to 8x. A TRL group is one turn slot's live games, as few
    as two late in a game, so a std per group turns any difference into +-0.71: rewards are scaled by the batch's
    std (game mode's choice where none was given), or not at all."""
    per_micro_batch = (
        ("loss_type", train_kw.get("loss_type") == "bnpo", "normalises by a micro-batch's own tokens"),
        ("entropy_coef", train_kw.get("entropy_coef", 0) != 0, "adds an entropy bonus averaged per micro-batch"),
        (
            "use_adaptive_entropy",
            train_kw.get("use_adaptive_entropy"),
            "adds an entropy bonus averaged per micro-batch",
        ),
        ("top_entropy_quantile", train_kw.get("top_entropy_quantile", 1) < 1, "keeps each micro-batch's top entropies"),
    )
    for key, applies, what in per_micro_batch:
        if applies:
            value = train_kw[key]
            instead = "use dapo (the batch's token mean), " + ", ".join(OTHER_LOSSES)
            instead = instead if key == "loss_type" else "drop it, or use --rollout turn"
            raise ConfigError(
                f"--{key} {str(value).lower() if isinstance(value, bool) else value} {what}, and with --rollout game "
                f"a micro-batch is one turn slot: {instead}"
            )
    if train_kw.get("multi_objective_aggregation") == "normalize_then_sum":
        raise ConfigError(
            "--multi_objective_aggregation normalize_then_sum scales each reward by its group's std, and with "
            "--rollout game a group is one turn slot's live games (two, late on): use sum_then_normalize"
        )
    if train_kw.get("scale_rewards") == "group":
        if "scale_rewards" in given:
            spelled = "group" if spelled in (None, "group") else f"{spelled} (group)"
            raise ConfigError(
                f"--scale_rewards {spelled} divides each turn slot's rewards by their own std, and with --rollout game a "
                "slot may hold two live games (any difference becomes +-0.71): use batch or none"
            )
        train_kw["scale_rewards"] = "batch"
        notes.append("--rollout game: scale_rewards batch (a turn slot's group may hold two live games)")
