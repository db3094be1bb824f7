"""The players of ``wordle.game.play``: a model, the solver and the random baselines.

The game loop itself (turns, reply classification, the views a player sees) is ``wordle.game``,
the same loop the training rollout drives.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch
from transformers import GenerationConfig, LogitsProcessorList

from evaluation.constrain import GuessConstraint
from wordle import Solver, allowed, candidates
from wordle.decoding import GREEDY, Decoding
from wordle.game import GameView, format_reply

# --- baselines ------------------------------------------------------------------------------------


_SOLVER_NAMES = {"allowed": "solver", "answers": "entropy over answers", "candidates": "entropy over candidates"}


class SolverPlayer:
    """Greedy maximum-entropy play (``wordle.Solver``) over every allowed word (the ceiling), every answer, or the
    answers still possible: the last two are the fair references for a player that can only say answers."""

    def __init__(self, pool: str = "allowed") -> None:
        self.solver = Solver(pool)
        self.name = _SOLVER_NAMES[pool]

    def replies(self, views: Sequence[GameView]) -> list[str]:
        return [format_reply(self.solver.next_guess(v.history), "entropy") for v in views]


class _SeededPlayer:
    """A player drawing from its own generator, reseeded at the start of every :func:`play`."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.start()

    def start(self) -> None:
        self.rng = random.Random(self.seed)


class RandomCandidatePlayer(_SeededPlayer):
    """A uniformly random answer still consistent with the feedback: consistent but unplanned play."""

    name = "random candidate"

    def replies(self, views: Sequence[GameView]) -> list[str]:
        return [format_reply(self.rng.choice(candidates(v.history).words()), "random candidate") for v in views]


class RandomAllowedPlayer(_SeededPlayer):
    """A uniformly random allowed word, ignoring feedback: the floor."""

    name = "random allowed"

    def replies(self, views: Sequence[GameView]) -> list[str]:
        words = allowed()
        return [format_reply(self.rng.choice(words), "random word") for v in views]


# --- the model ------------------------------------------------------------------------------------


class ModelPlayer:
    """A causal LM replying to ``render_prompt(history)``, generated and decoded as TRL's GRPO trainer does,
    with the reply limit, sampling and constraint of ``decoding`` (greedy by default). A constrained
    player measures something else than the model's own skill and is always reported as a separate row.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        decoding: Decoding = GREEDY,
        batch_size: int = 64,
        name: str | None = None,
    ) -> None:
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        default_limit = getattr(model.generation_config, "max_new_tokens", None) or 256
        self.decoding = decoding if decoding.max_new_tokens else decoding.replace(max_new_tokens=default_limit)
        constrain = decoding.constrain
        self.name = name or ("model" if constrain is None else f"model, constrained to {constrain} words")
        self._constraint = None
        if constrain is not None:
            self._constraint = GuessConstraint(tokenizer, self._eos_ids())
            self._constraint.check_budget(self.decoding.max_new_tokens)  # before any game, not at the first turn

    def _eos_ids(self) -> list[int]:
        # As TRL: the tokenizer's eos first, then any the model's generation_config adds.
        ids = self.model.generation_config.eos_token_id
        ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
        if self.tokenizer.eos_token_id not in ids:
            ids = [self.tokenizer.eos_token_id, *ids]
        return ids

    def generation_config(self) -> GenerationConfig:
        """TRL's GRPOTrainer generation config (transformers backend), with ``decoding``'s settings."""
        return GenerationConfig(
            pad_token_id=self.tokenizer.pad_token_id,
            bos_token_id=self.tokenizer.bos_token_id,
            eos_token_id=self._eos_ids(),
            use_cache=True,
            disable_compile=True,
            # Tokens the model itself says it never writes (the embedded model: those only prompts use).
            suppress_tokens=getattr(self.model.generation_config, "suppress_tokens", None),
            **self.decoding.generation_kwargs(),
        )

    def start(self) -> None:
        if self.decoding.sample:
            torch.manual_seed(self.decoding.seed)  # generate() samples from torch's global RNG

    @torch.no_grad()
    def replies(self, views: Sequence[GameView]) -> list[str]:
        was_training = self.model.training
        self.model.eval()
        config = self.generation_config()
        out: list[str] = []
        try:
            for start in range(0, len(views), self.batch_size):
                out.extend(self._generate(views[start : start + self.batch_size], config))
        finally:
            self.model.train(was_training)
        return out

    def _generate(self, views: Sequence[GameView], config: GenerationConfig) -> list[str]:
        texts = self.tokenizer.apply_chat_template(
            [v.prompt for v in views], add_generation_prompt=True, tokenize=False
        )
        # Left padding, so that every row's prompt ends where generation starts.
        batch = self.tokenizer(texts, padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt")
        batch = batch.to(self.model.device)
        prompt_len = batch["input_ids"].shape[1]
        processors = LogitsProcessorList()
        if self._constraint is not None:
            if self.decoding.constrain == "allowed":
                targets = [None] * len(views)  # None: every allowed word
            else:
                targets = [tuple(candidates(v.history).words()) for v in views]
            processors.append(self._constraint.for_batch(prompt_len, targets, config.max_new_tokens))
        output = self.model.generate(**batch, generation_config=config, logits_processor=processors)
        return self.tokenizer.batch_decode(output[:, prompt_len:], skip_special_tokens=True)
