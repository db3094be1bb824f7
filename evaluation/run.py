"""A model and its baselines, end to end: what ``evaluate.py`` and ``grpo_train.py`` call.

Programmatic use::

    from evaluation.run import evaluate_model_dir
    results = evaluate_model_dir("tiny", adapter="outputs/cpu", games=300)
    results[0].win_rate                 # the model's own row; a constrained row follows if asked for
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evaluation.metrics import compute_metrics
from evaluation.play import (
    Constrain,
    ModelPlayer,
    Player,
    RandomAllowedPlayer,
    RandomCandidatePlayer,
    SolverPlayer,
    play,
)
from evaluation.report import PlayerResult

logger = logging.getLogger(__name__)


def select_secrets(games: int | None = None) -> tuple[str, ...]:
    """``games`` of the held-out secrets, evenly spread over the alphabetical list (all 300 by default),
    so that a short evaluation is not all words starting with A."""
    from training.data import eval_secrets

    secrets = eval_secrets()
    if games is None or games >= len(secrets):
        return secrets
    if games < 1:
        raise ValueError(f"games must be at least 1, got {games}")
    return tuple(secrets[i * len(secrets) // games] for i in range(games))


def evaluate_player(
    player: Player, secrets: Sequence[str], kind: str = "baseline", label: str | None = None, seed: int = 0
) -> PlayerResult:
    started = time.monotonic()
    games = play(player, secrets)
    result = PlayerResult(label or player.name, kind, compute_metrics(games, seed=seed), games)
    logger.info(
        "%s: %d games in %.1f s, win rate %.3f", result.label, len(games), time.monotonic() - started, result.win_rate
    )
    return result


def evaluate_baselines(secrets: Sequence[str], seed: int = 0) -> list[PlayerResult]:
    """The solver (the ceiling), a random still-possible answer, a random allowed word (the floor)."""
    return [
        evaluate_player(p, secrets, seed=seed)
        for p in (SolverPlayer(), RandomCandidatePlayer(seed), RandomAllowedPlayer(seed))
    ]


def evaluate_model(
    model: Any,
    tokenizer: Any,
    secrets: Sequence[str] | None = None,
    *,
    sample: bool = False,
    temperature: float = 1.0,
    seed: int = 0,
    constrain: Constrain | None = None,
    batch_size: int = 64,
    max_new_tokens: int | None = None,
    label: str = "model",
) -> list[PlayerResult]:
    """The model's own row, then (with ``constrain``) the same model constrained, as a second row."""
    secrets = select_secrets() if secrets is None else tuple(secrets)
    settings = {
        "sample": sample,
        "temperature": temperature,
        "seed": seed,
        "batch_size": batch_size,
        "max_new_tokens": max_new_tokens,
    }
    players = [(ModelPlayer(model, tokenizer, **settings, name=label), "model")]
    if constrain is not None:  # built before any game: it checks that max_new_tokens holds a reply
        name = f"{label} (constrained: {constrain} words)"
        players.append((ModelPlayer(model, tokenizer, **settings, constrain=constrain, name=name), "constrained"))
    return [evaluate_player(player, secrets, kind, seed=seed) for player, kind in players]


def evaluate_model_dir(
    model: str | Path,
    adapter: str | Path | None = None,
    games: int | None = None,
    *,
    baselines: bool = False,
    device: str | None = None,
    **settings: Any,
) -> list[PlayerResult]:
    """Load ``model`` ("tiny", a directory or a hub id) with an optional LoRA ``adapter`` and
    evaluate it on ``games`` held-out secrets; ``settings`` go to :func:`evaluate_model`."""
    from training.modeling import load_for_inference

    loaded, tokenizer = load_for_inference(str(model), adapter, device=device)
    secrets = select_secrets(games)
    results = evaluate_model(loaded, tokenizer, secrets, **settings)
    if baselines:
        results += evaluate_baselines(secrets, seed=settings.get("seed", 0))
    return results
