"""What GRPO gets from a warm start, before it runs: how many turn slots will carry signal.

A GRPO group whose ``num_generations`` replies all score alike has advantage 0 and teaches nothing (TRL logs the
share of such groups as ``frac_reward_zero_std``). From a start that clips every reply, or that already answers every
state one way at GRPO's temperature, most groups are such. ``grpo_train.py --dry-run --adapter DIR`` samples the
adapter on a few validation states, as GRPO will, and says how many groups would have carried signal.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from peft import PeftModel

from evaluation.play import ModelPlayer
from models.loading import load_model, load_tokenizer
from rewards import GAME_ONLY, total_reward
from settings.config import Resolved
from wordle import parse_completion, spread, train_secrets
from wordle.decoding import Decoding
from wordle.game import GameView
from wordle.openings import Opening

logger = logging.getLogger(__name__)

# The openings the evaluation plays, in turn: states from its own opening and from guesses it did not choose.
OPENINGS = ("own", "answer", "allowed", "answer:2")


def signal_preview(resolved: Resolved, source: str, states: int = 8) -> dict[str, Any]:
    """Sample ``num_generations`` replies at GRPO's temperature on ``states`` validation states with the adapter of
    ``--adapter``, score them with the run's per-turn rewards and weights, and count the groups whose totals differ."""
    t, script = resolved.training, resolved.script
    tokenizer = load_tokenizer(source, resolved)
    model = PeftModel.from_pretrained(load_model(source, resolved), script.adapter)
    model.to(t.device)
    secrets = spread(train_secrets("val"), states)
    histories = [Opening.parse(OPENINGS[i % len(OPENINGS)]).start(s, t.seed) for i, s in enumerate(secrets)]
    g = t.num_generations
    decoding = Decoding(max_new_tokens=t.max_completion_length, sample=True, temperature=t.temperature, seed=t.seed)
    player = ModelPlayer(model, tokenizer, decoding)
    player.start()
    views = [GameView(history, len(history) + 1) for history in histories for _ in range(g)]
    replies = player.replies(views)
    weights = {n: w for n, w in resolved.weights.items() if n not in GAME_ONLY}
    totals = total_reward(
        replies,
        weights,
        secret=[s for s in secrets for _ in range(g)],
        past_guess_history=[[list(p) for p in h] for h in histories for _ in range(g)],
    )
    groups = np.array(totals, dtype=float).reshape(len(secrets), g)
    signal = int((groups.std(axis=1) > 1e-9).sum())
    return {
        "states": len(secrets),
        "num_generations": g,
        "temperature": t.temperature,
        "groups_with_signal": f"{signal} of {len(secrets)}",
        "frac_reward_zero_std": round(1 - signal / len(secrets), 3),
        "replies_that_parse": round(float(np.mean([parse_completion(r) is not None for r in replies])), 3),
        "rewards": f"{', '.join(weights)} (the per-turn ones, with the run's weights)",
        "note": "from sampling the adapter on validation states: --dry-run with --adapter loads the model",
    }
