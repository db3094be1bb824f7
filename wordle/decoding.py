"""How a model player turns a prompt into a reply: one settings object wherever a model plays games.

A run's before/after evaluation and its held-out check (``training``), ``evaluate.py`` and the
evaluation's players (``evaluation``) all take a :class:`Decoding`, so the reply limit, the
sampling and the constraint are named once. Pure data: each player turns it into its library's
generation settings with :meth:`Decoding.generation_kwargs`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Constrain = Literal["allowed", "candidates"]
CONSTRAIN_CHOICES: tuple[str, ...] = ("allowed", "candidates")


@dataclass(frozen=True)
class Decoding:
    """``max_new_tokens`` None: the model's generation_config, else 256. Greedy unless ``sample``;
    sampling draws at ``temperature`` with top-k and top-p off (GRPO's sampling), seeded by ``seed``
    once per game set. ``constrain`` masks logits so that the reply is a well-formed guess of such a
    word (``evaluation.constrain``): a different measurement from the model's own skill."""

    max_new_tokens: int | None = None
    sample: bool = False
    temperature: float = 1.0
    seed: int = 0
    constrain: Constrain | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if self.sample and self.temperature <= 0:
            raise ValueError(f"temperature must be positive when sampling, got {self.temperature}")
        if self.constrain is not None and self.constrain not in CONSTRAIN_CHOICES:
            raise ValueError(f"unknown constrain {self.constrain!r}; valid: {', '.join(CONSTRAIN_CHOICES)}")

    def replace(self, **changes: Any) -> Decoding:
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        how = f"sampled at temperature {self.temperature}, seed {self.seed}" if self.sample else "greedy"
        return how if self.constrain is None else f"{how}, constrained to {self.constrain} words"

    def generation_kwargs(self) -> dict[str, Any]:
        """transformers ``GenerationConfig`` fields. Every sampling field is set, because ``generate``
        fills a field left None from the model's own generation_config (Qwen's samples at temperature
        0.7, top-p 0.8, top-k 20 and penalises repeats); greedy gets transformers' neutral values,
        which it neither uses nor warns about."""
        kwargs: dict[str, Any] = {"do_sample": self.sample, "repetition_penalty": 1.0, "min_p": None}
        if self.sample:
            kwargs.update(temperature=self.temperature, top_p=1.0, top_k=0)
        else:
            kwargs.update(temperature=1.0, top_p=1.0, top_k=50)
        if self.max_new_tokens is not None:
            kwargs["max_new_tokens"] = self.max_new_tokens
        return kwargs


GREEDY = Decoding()  # the evaluation's default: greedy, the model's own reply limit
