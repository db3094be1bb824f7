"""The players of ``wordle.game.play``: a model, the solver, random baselines, scripted ones.

The game loop itself (turns, reply classification, the views a player sees) is ``wordle.game``,
the same loop the training rollout drives.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Literal

import torch
from transformers import GenerationConfig, LogitsProcessorList

from wordle import Solver, allowed, candidates
from wordle.game import GameView, format_reply

Constrain = Literal["allowed", "candidates"]
CONSTRAIN_CHOICES: tuple[str, ...] = ("allowed", "candidates")


# --- baselines and scripted players ---------------------------------------------------------------


class SolverPlayer:
    """Greedy maximum-entropy play (``wordle.Solver``): the ceiling."""

    name = "solver"

    def __init__(self) -> None:
        self.solver = Solver()

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


# --- the model ------------------------------------------------------------------------------------


class ModelPlayer:
    """A causal LM replying to ``render_prompt(history)``, generated and decoded as TRL's GRPO trainer does.

    Greedy by default; ``sample=True`` draws at ``temperature`` with top-k and top-p off (GRPO's
    sampling), seeded by ``seed`` once per :func:`play`. ``constrain`` ("allowed" or "candidates")
    masks logits so that the whole reply is ``<think>…</think><guess>WORD</guess>`` with WORD such a
    word (see :mod:`evaluation.constrain`): that measures something else than the model's own skill
    and is always reported as a separate row.
    ``max_new_tokens`` defaults to the model's generation_config, else 256.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        sample: bool = False,
        temperature: float = 1.0,
        seed: int = 0,
        constrain: Constrain | None = None,
        batch_size: int = 64,
        max_new_tokens: int | None = None,
        name: str | None = None,
    ) -> None:
        if constrain is not None and constrain not in CONSTRAIN_CHOICES:
            raise ValueError(f"unknown constrain {constrain!r}; valid: {', '.join(CONSTRAIN_CHOICES)}")
        self.model, self.tokenizer = model, tokenizer
        self.sample, self.temperature, self.seed = sample, temperature, seed
        self.constrain, self.batch_size = constrain, batch_size
        self.name = name or ("model" if constrain is None else f"model, constrained to {constrain} words")
        self.max_new_tokens = max_new_tokens or getattr(model.generation_config, "max_new_tokens", None) or 256
        self._constraint = None
        if constrain is not None:
            from evaluation.constrain import GuessConstraint

            self._constraint = GuessConstraint(tokenizer, self._eos_ids())
            self._constraint.check_budget(self.max_new_tokens)  # before any game, not at the first turn

    def _eos_ids(self) -> list[int]:
        # As TRL: the tokenizer's eos first, then any the model's generation_config adds.
        ids = self.model.generation_config.eos_token_id
        ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
        if self.tokenizer.eos_token_id not in ids:
            ids = [self.tokenizer.eos_token_id, *ids]
        return ids

    def generation_config(self) -> GenerationConfig:
        """TRL's GRPOTrainer generation config (transformers backend), greedy unless sampling.

        ``generate`` fills every field left None from ``model.generation_config`` (Qwen's samples at
        temperature 0.7, top-p 0.8, top-k 20 and penalises repeats), so each of these is set: greedy gets
        transformers' neutral values, which it neither uses nor warns about; sampling gets exactly
        ``temperature`` with top-k and top-p off.
        """
        kwargs: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "do_sample": self.sample,
            "pad_token_id": self.tokenizer.pad_token_id,
            "bos_token_id": self.tokenizer.bos_token_id,
            "eos_token_id": self._eos_ids(),
            "use_cache": True,
            "repetition_penalty": 1.0,
        }
        if self.sample:
            kwargs.update(temperature=self.temperature, top_p=1.0, top_k=0)
        else:
            kwargs.update(temperature=1.0, top_p=1.0, top_k=50)
        return GenerationConfig(**kwargs, disable_compile=True)

    def start(self) -> None:
        if self.sample:
            torch.manual_seed(self.seed)  # generate() samples from torch's global RNG

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
            if self.constrain == "allowed":
                targets = [None] * len(views)  # None: every allowed word
            else:
                targets = [tuple(candidates(v.history).words()) for v in views]
            processors.append(self._constraint.for_batch(prompt_len, targets, config.max_new_tokens))
        output = self.model.generate(**batch, generation_config=config, logits_processor=processors)
        return self.tokenizer.batch_decode(output[:, prompt_len:], skip_special_tokens=True)
