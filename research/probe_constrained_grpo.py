"""GRPO as if the start separated the candidates perfectly: the main job's training with every game turn's reply
constrained to the answers still possible (``evaluation.constrain``, the decoding ``evaluate.py --constrain
candidates`` uses), so that every sampled choice is among the candidates and the rewards compare only strategy
(e112). Prints what the trainer prints, never asserts; the adapter goes to ``--output_dir`` as the main job's does.

    python research/probe_constrained_grpo.py --profile cpu --skip_eval true --output_dir OUT   # any grpo_train flags
    python evaluate.py --adapter OUT --split val --no_baselines --openings own answer allowed answer:2 \
        --constrain candidates

Only the rollout's own ``model.generate`` (the transformers path of ``training.rollout.PolicyPlayer``) is
constrained; the policy's log-probabilities are still scored unconstrained, so the update raises the chosen candidates
against every token, as an unconstrained run's would.
"""

from __future__ import annotations

import functools
import runpy
from contextlib import contextmanager
from pathlib import Path

from transformers import LogitsProcessorList

from evaluation.constrain import GuessConstraint
from training import rollout
from wordle import candidates

_unwrap = rollout.unwrap_model_for_generation
_replies = rollout.PolicyPlayer.replies
_turn: dict = {}  # the tokenizer and each row's candidates, for the generate call under way


def replies(self, views):
    _turn.update(tokenizer=self.trainer.processing_class, targets=[tuple(candidates(v.history).words()) for v in views])
    try:
        return _replies(self, views)
    finally:
        _turn.pop("targets")


class Constrained:
    """The unwrapped model, whose ``generate`` writes a word of its row's candidates."""

    def __init__(self, model, constraint: GuessConstraint) -> None:
        self.model, self.constraint = model, constraint

    def generate(self, input_ids, generation_config, **kwargs):
        width, limit = input_ids.shape[1], generation_config.max_new_tokens
        processors = LogitsProcessorList([self.constraint.for_batch(width, _turn["targets"], limit)])
        return self.model.generate(
            input_ids=input_ids, generation_config=generation_config, logits_processor=processors, **kwargs
        )


@functools.cache
def constraint(tokenizer, eos: tuple[int, ...]) -> GuessConstraint:
    return GuessConstraint(tokenizer, [tokenizer.eos_token_id, *eos])


@contextmanager
def unwrap(model_wrapped, accelerator, **kwargs):
    with _unwrap(model_wrapped, accelerator, **kwargs) as model:
        if "targets" not in _turn:  # not a game turn (the periodic check, say): as the trainer has it
            yield model
            return
        eos = model.generation_config.eos_token_id
        eos = (eos,) if isinstance(eos, int) else tuple(eos or ())
        yield Constrained(model, constraint(_turn["tokenizer"], eos))


if __name__ == "__main__":
    rollout.unwrap_model_for_generation = unwrap
    rollout.PolicyPlayer.replies = replies
    # The entry point itself, as a user runs it (a script of the root: nothing imports it), with the patches above.
    runpy.run_path(str(Path(__file__).resolve().parent.parent / "grpo_train.py"), run_name="__main__")
