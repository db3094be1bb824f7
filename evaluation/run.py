"""A model and its baselines, end to end: what ``evaluate.py`` and ``grpo_train.py`` call.

Programmatic use, on any loaded causal LM and its tokenizer::

    from evaluation.run import evaluate_model, select_secrets
    results = evaluate_model(model, tokenizer, select_secrets(300))
    results[0].win_rate                 # the model's own row; a constrained row follows if asked for

It never loads a model itself (that is ``models.loading``'s; ``evaluate.py`` loads, then calls
this), so that evaluation and training never import each other.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from evaluation.metrics import compute_metrics
from evaluation.play import ModelPlayer, RandomAllowedPlayer, RandomCandidatePlayer, SolverPlayer
from evaluation.report import PlayerResult
from evaluation.vllm_backend import Engine, VLLMPlayer
from wordle import eval_secrets, spread, train_secrets
from wordle.decoding import GREEDY, Constrain, Decoding
from wordle.game import Player, play
from wordle.openings import OWN, Opening

logger = logging.getLogger(__name__)


SPLITS = ("heldout", "val")


def select_secrets(games: int | None = None, split: str = "heldout") -> tuple[str, ...]:
    """``games`` of the held-out secrets (or of the validation secrets, ``split="val"``), evenly spread
    over the alphabetical list (all of them by default), so that a short evaluation is not all words
    starting with A."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    return spread(eval_secrets() if split == "heldout" else train_secrets("val"), games)


def evaluate_player(
    player: Player,
    secrets: Sequence[str],
    kind: str = "baseline",
    label: str | None = None,
    seed: int = 0,
    opening: Opening = OWN,
) -> PlayerResult:
    """``player``'s games on ``secrets``, each from ``opening`` (drawn with ``seed``), and their metrics."""
    started = time.monotonic()
    games = play(player, secrets, opening.starts(secrets, seed))
    result = PlayerResult(label or player.name, kind, compute_metrics(games, seed=seed), games, opening.spec)
    logger.info(
        "%s (%s): %d games in %.1f s, win rate %.3f",
        result.label,
        opening.label,
        len(games),
        time.monotonic() - started,
        result.win_rate,
    )
    return result


def evaluate_baselines(secrets: Sequence[str], seed: int = 0, opening: Opening = OWN) -> list[PlayerResult]:
    """The solver (the ceiling), the greedy entropy players that say answers only (any answer, or one still
    possible), a random still-possible answer, a random allowed word (the floor)."""
    players = (
        SolverPlayer(),
        SolverPlayer("answers"),
        SolverPlayer("candidates"),
        RandomCandidatePlayer(seed),
        RandomAllowedPlayer(seed),
    )
    return [evaluate_player(p, secrets, seed=seed, opening=opening) for p in players]


@contextmanager
def without_adapter(model: Any) -> Iterator[Any]:
    """``model`` (a PEFT model or a vLLM engine with an adapter) playing without its adapter: the start it was
    trained from."""
    if isinstance(model, Engine):
        yield model.without_adapter()
        return
    with model.disable_adapter():
        yield model


def evaluate_model(
    model: Any,
    tokenizer: Any,
    secrets: Sequence[str] | None = None,
    decoding: Decoding = GREEDY,
    *,
    constrain: Constrain | None = None,
    batch_size: int = 64,
    label: str = "model",
    opening: Opening = OWN,
) -> list[PlayerResult]:
    """The model's own row, then (with ``constrain``) the same model constrained, as a second row; every game
    from ``opening``, drawn with the decoding's seed.

    ``model`` is a transformers model, or a vLLM engine (``evaluation.vllm_backend``), which batches itself."""
    secrets = select_secrets() if secrets is None else tuple(secrets)

    def player(decoding: Decoding, name: str) -> Player:
        if isinstance(model, Engine):
            return VLLMPlayer(model, tokenizer, decoding, name=name)
        return ModelPlayer(model, tokenizer, decoding, batch_size, name=name)

    players = [(player(decoding, label), "model")]
    if constrain is not None:  # built before any game: it checks that max_new_tokens holds a reply
        name = f"{label} (constrained: {constrain} words)"
        players.append((player(decoding.replace(constrain=constrain), name), "constrained"))
    return [evaluate_player(player, secrets, kind, seed=decoding.seed, opening=opening) for player, kind in players]
