"""Supervised training of the embedded model: cross-entropy on the reply, a soft target for the answer."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import datasets
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast, Trainer, TrainerCallback, TrainingArguments

from tinymodel.data import collate
from tinymodel.tokenizer import THINK_LETTERS

MARGIN = 8.0  # logits the best candidate keeps over the likeliest think letter at the word (SoftTargetTrainer)
WEIGHT_DECAY = 0.01  # AdamW's, in the slowed optimizer (on its matrices) and in the Trainer's own


class WallClock(TrainerCallback):
    """Stops training once ``deadline`` (a time.monotonic() value) has passed."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.stopped_early = False

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() > self.deadline:
            self.stopped_early = True
            control.should_training_stop = True
        return control


class StopAfter(TrainerCallback):
    """Stops training after ``steps`` steps, wherever the learning-rate schedule is then."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.steps:
            control.should_training_stop = True
        return control


def think_letter_hinge(word_logits: torch.Tensor, listed: torch.Tensor, think_ids: list[int]) -> torch.Tensor:
    """Per row, what the gap from the best candidate's logit down to the likeliest think letter's lacks of ``MARGIN``
    (0 once the letter trails by ``MARGIN`` or more). ``word_logits``: rows x vocabulary at the word step; ``listed``:
    each row's candidate ids, padded with -1."""
    valid = listed >= 0
    best = word_logits.gather(-1, listed.clamp(min=0)).masked_fill(~valid, float("-inf")).max(-1).values
    letter = word_logits[:, think_ids].max(-1).values
    return torch.relu(MARGIN - (best - letter))


class SoftTargetTrainer(Trainer):
    """Cross-entropy on the reply's tokens, except that the guessed answer is scored against the
    uniform distribution over *all* candidate answers of the state rather than the one sampled:
    every row then teaches the whole set of words that fit (no previous guess among them), where a
    sampled target teaches one, noisily. Measured: docs/embedded-model.md, the table of tries.

    A hinge at the word keeps the likeliest think letter's logit ``MARGIN`` under the best candidate's. Each think
    letter's output row points toward the answers with that letter in its column, so GRPO's steps toward those
    answers lift the letter too, until it takes the guess; cross-entropy stops pushing once the letter is unlikely,
    and the hinge leaves it room (docs/research-log.md)."""

    def __init__(self, *args, think_ids: list[int], **kwargs):
        super().__init__(*args, **kwargs)
        self.think_ids = think_ids

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        word_pos, cands, labels = inputs.pop("word_pos"), inputs.pop("candidates"), inputs.pop("labels")
        outputs = model(**inputs)
        logp = outputs.logits[:, :-1].float().log_softmax(-1)
        targets = labels[:, 1:]
        mask = targets != -100
        token_nll = -logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)[mask]
        rows = (word_pos > 0).nonzero().squeeze(-1)
        word_logp = logp[rows, word_pos[rows] - 1]  # the distribution the answer token is drawn from
        listed = cands[rows]
        valid = listed >= 0
        soft = -(word_logp.gather(-1, listed.clamp(min=0)) * valid).sum(-1) / valid.sum(-1).clamp(min=1)
        hinge = think_letter_hinge(outputs.logits[rows, word_pos[rows] - 1].float(), listed, self.think_ids)
        loss = (token_nll.sum() + soft.sum() + hinge.sum()) / (mask.sum() + len(rows)).clamp(min=1)
        return (loss, outputs) if return_outputs else loss


def slowed_optimizer(
    model: PreTrainedModel,
    learning_rate: float,
    slow_prefixes: Sequence[str],
    slow_rows: Sequence[int],
    rate: float,
) -> torch.optim.AdamW:
    """AdamW (``WEIGHT_DECAY`` on matrices) whose parameters named ``slow_prefixes…`` and embedding rows ``slow_rows``
    take ``rate`` times the step of the rest.

    A parameter group gives the layers their rate; an embedding row cannot have a group of its own, so a step hook
    keeps ``rate`` of what the step moved those rows by, in the input and (untied) the output embeddings. Why: the
    wired guess bag (layer 0's mean over the prompt) reads the feedback from any opening, and SFT at the full rate
    undoes it (docs/research-log.md); the reply's own tokens (tags, eos, think letters) and the later layers learn the
    format at the full rate.
    """
    named = [(name.startswith(tuple(slow_prefixes)), p) for name, p in model.named_parameters()]
    groups = [
        {
            "params": params,
            "lr": learning_rate * (rate if is_slow else 1.0),
            "weight_decay": WEIGHT_DECAY if matrix else 0.0,
        }
        for is_slow in (True, False)
        for matrix in (True, False)
        if (params := [p for slow, p in named if slow == is_slow and (p.ndim >= 2) == matrix])
    ]
    optimizer = torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.999), eps=1e-8)
    embeddings, outputs = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    matrices = [embeddings] if outputs is embeddings else [embeddings, outputs]
    rows = torch.tensor(sorted(set(slow_rows)), dtype=torch.long)
    before: list[torch.Tensor] = []

    def keep(opt, args, kwargs):
        before[:] = [m.data[rows].clone() for m in matrices]

    def slow_down(opt, args, kwargs):
        for m, b in zip(matrices, before):
            m.data[rows] = b + rate * (m.data[rows] - b)

    if len(rows) and rate != 1.0:
        optimizer.register_step_pre_hook(keep)
        optimizer.register_step_post_hook(slow_down)
    return optimizer


def train(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    encoded: datasets.Dataset,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    clock: WallClock,
    scratch: str,
    stop_after: int,
    optimizer: torch.optim.Optimizer | None = None,
) -> tuple[int, float]:
    """Supervised training on the replies (see :class:`SoftTargetTrainer`) on a ``steps``-long schedule,
    stopped after ``stop_after`` steps (``steps`` runs it to its end), with ``optimizer`` if given (see
    :func:`slowed_optimizer`; the Trainer's AdamW otherwise); returns the steps taken and the mean training loss."""
    config = TrainingArguments(
        output_dir=scratch,
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=min(100, steps // 10),
        weight_decay=WEIGHT_DECAY,
        train_sampling_strategy="group_by_length",  # prompts run from 8 to 68 tokens: batch like with like
        remove_unused_columns=False,
        use_cpu=True,
        seed=seed,
        data_seed=seed,
        save_strategy="no",
        report_to="none",
        logging_steps=max(1, steps // 10),
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = SoftTargetTrainer(
        model=model,
        think_ids=tokenizer.convert_tokens_to_ids(list(THINK_LETTERS)),
        args=config,
        optimizers=(optimizer, None),
        train_dataset=encoded,
        data_collator=functools.partial(collate, pad_id=tokenizer.pad_token_id),
        callbacks=[clock, StopAfter(stop_after)],
    )
    result = trainer.train()
    return trainer.state.global_step, result.training_loss
