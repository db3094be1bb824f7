"""TRL's GRPOTrainer with the run visible, and with whole games as rollouts when asked.

- Every training log gets ``peak_memory_mb`` and where the step's time went (``StepClock``: generation,
  scoring, update), and the progress bar writes one readable line per log.
- ``rollout=GameRollout()`` (``--rollout game``) passes it to TRL as ``rollout_func``, hands it each
  batch's dataset rows, samples each start state ``SLOTS x num_generations`` times in a row
  (see ``training/rollout.py``), and scores and trains on the batch in chunks trimmed of their
  padding; ``check=GameCheck(...)`` adds greedy games on the validation secrets (from its own opening and a
  random one) to the logs every ``check_steps`` steps, and at the start. TRL's ``completions/*`` lengths count
  the live turns alone, not the placeholders of games that had ended, and its completions table pairs each
  reply with its own turn's state.

``merged_generation=True`` (``--merged_generation``) generates from a copy with the LoRA merged in
(``training/merged.py``), refreshed once per optimizer step.

Generation, loss and optimisation are TRL's own (``benchmarks/bench_step.py`` measures the
difference against a bare GRPOTrainer).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import ProgressCallback, TrainerCallback
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler, split_tensor_dict

from runtime.device import memory_source
from training.merged import MergedCopy
from training.rollout import GameBatch, GameCheck, GameRollout, KeptRows, quiet_placeholder_warning
from training.watch import RunProgress, Watched


class WordleGRPOTrainer(Watched, GRPOTrainer):
    """TRL's GRPOTrainer, watched (``training.watch``: the peak memory in every log, whole checkpoints), with the
    game rollout, the periodic games and the merged copy when asked (TRL already logs ``step_time``, rewards,
    lengths and clipping)."""

    def __init__(
        self,
        *args,
        rollout: GameRollout | None = None,
        check: GameCheck | None = None,
        check_steps: int = 0,
        merged_generation: bool = False,
        **kwargs,
    ) -> None:
        self.game_rollout = rollout
        self._scoring: GameBatch | None = None  # the generation batch whose scoring pass runs now
        if rollout is not None:
            # TRL warns once that rollout_func is experimental; this project pins the TRL it was built on.
            os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
            quiet_placeholder_warning()
            kwargs["rollout_func"] = rollout
        super().__init__(*args, **kwargs)
        self.merged: MergedCopy | None = None
        self._merged_step: int | None = None  # the optimizer step whose weights the copy holds
        if merged_generation:
            dtype = self.model.get_input_embeddings().weight.dtype  # the compute dtype, also beside 4-bit weights
            self.merged = MergedCopy(self.accelerator.unwrap_model(self.model), dtype)
        self.clock = StepClock(self)
        self.add_callback(self.clock)
        self.remove_callback(ProgressCallback)
        if not self.args.disable_tqdm:
            self.add_callback(RunProgress(format_log))
        self.watch_games(check, check_steps)

    def _get_train_sampler(self, dataset=None):
        if self.game_rollout is None:
            return super()._get_train_sampler(dataset)
        # Each start state is repeated for all its turn slots and games, so a batch's rows arrive whole.
        block = self.num_generations * self.game_rollout.slots
        return RepeatSampler(
            data_source=self.train_dataset if dataset is None else dataset,
            mini_repeat_count=block,
            batch_size=self.args.generation_batch_size // block,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    def _prepare_inputs(self, generation_batch):
        if self.game_rollout is None or not self.model.training:
            return super()._prepare_inputs(generation_batch)
        every = self.args.steps_per_generation * self.num_iterations
        if self._step % every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            self._buffered_inputs = self.micro_batches(batch, self.game_rollout.batch.kept)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def micro_batches(self, batch: dict, kept: KeptRows | None) -> list[dict]:
        """A game batch's micro-batches: TRL's, less the shuffle, each without the rows ``kept`` leaves out and
        trimmed. One optimizer step takes the whole generation batch (settings.config sets the accumulation so),
        and every loss game mode runs sums its micro-batches into an update that their order cannot change
        (settings.checks refuses what normalises by a micro-batch's own tokens: bnpo, the entropy bonus, the
        entropy quantile mask). Kept in slot order, a micro-batch holds turns of one slot, whose prompts are of
        similar length, and trimming the columns that are padding in all of its rows stops a turn-1 prompt paying
        for a turn-6 one's width, and a micro-batch of placeholders from costing anything."""
        return [
            trim_padding(take_rows(micro, None if kept is None else kept.rows(k)))
            for k, micro in enumerate(split_tensor_dict(batch, self.args.steps_per_generation))
        ]

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, **kwargs
    ):
        # Any keyword but the two flags is an image model's per-sample input, which these chunks would not slice.
        per_sample = any(value is not None for key, value in kwargs.items() if key not in _FLAGS)
        if self.game_rollout is None or per_sample:
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, **kwargs
            )
        # TRL's, chunk by chunk, each chunk without the columns that are padding in all of its rows, as the
        # loss's micro-batches are (trim_padding): the scoring pass (the reference model's log-probs) cost a
        # third less on the main job. Its chunks are those micro-batches (the same per_device_train_batch_size
        # rows, in order), so reference and policy see identical inputs and the first step's KL is exactly 0.
        batch_size = batch_size or input_ids.size(0)
        kept = None if self._scoring is None else self._scoring.kept  # the loss's micro-batches are cut already
        if kept is not None and (len(kept.live) != input_ids.size(0) or kept.size != batch_size):
            kept = None
        logps, entropies, aux = [], [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
            size = len(ids)
            # The placeholders of games that had ended are left out as the loss leaves them out
            # (micro_batches), so that both passes still see identical inputs; their log-probs are
            # masked out of every sum, so zeros stand in for them.
            rows = None if kept is None else kept.rows(start // batch_size)
            if rows is not None:
                ids, mask = ids[rows], mask[rows]
            used = mask.any(0).nonzero()
            # At least the first completion column: with mask_truncated_completions a chunk's rows may all be
            # masked there, and logits_to_keep 0 would mean every position to the model.
            first, last = int(used[0]), max(int(used[-1]) + 1, ids.size(1) - logits_to_keep + 1)
            cut = ids.size(1) - last
            chunk_logps, chunk_entropies, chunk_aux = super()._get_per_token_logps_and_entropies(
                model, ids[:, first:last], mask[:, first:last], logits_to_keep - cut, **kwargs
            )
            logps.append(_widen(chunk_logps, cut, rows, size))
            if chunk_entropies is not None:
                entropies.append(_widen(chunk_entropies, cut, rows, size))
            if chunk_aux is not None:
                aux.append(chunk_aux)
        return (
            torch.cat(logps),
            torch.cat(entropies) if entropies else None,
            torch.stack(aux).mean() if aux else None,
        )

    @contextmanager
    def generating(self) -> Iterator[None]:
        """While generating, ``model_wrapped`` (which TRL's HF path and the game turns unwrap and call ``generate``
        on) is the merged copy where ``--merged_generation`` asks for one, refreshed once per optimizer step."""
        if self.merged is None:
            yield
            return
        if self._merged_step != self.state.global_step:
            self.merged.refresh()
            self._merged_step = self.state.global_step
        wrapped, self.model_wrapped = self.model_wrapped, self.merged.model
        try:
            yield
        finally:
            self.model_wrapped = wrapped

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        with self.generating():
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)

    def _generate(self, prompts: list):
        with self.clock.part("generation"):
            out = super()._generate(prompts)
        if self.game_rollout is not None:
            _, completion_ids, env_mask = out[:3]
            self._count_live_turns(completion_ids, env_mask)
            # TRL logs (the completions table, the trackers), and hands the reward functions, the prompts it
            # passed here: the dataset rows' start states. Each row is a turn of a game, so it gets that turn's
            # state instead; the list is the one TRL goes on to use (tests/test_rollout.py holds it to that).
            prompts[:] = self.game_rollout.batch.prompts
        return out

    def _count_live_turns(self, completion_ids: list[list[int]], env_mask: list[list[int]]) -> None:
        """TRL's ``completions/*`` length metrics over live turns alone. TRL counts every row, and in game
        mode a game that ended fills its later turn slots with placeholders of length 0 (env_mask 0): the
        minimum read 0 and the means were diluted by them. TRL has just appended this batch's values; they
        are replaced (its other metrics, and the loss, were right already)."""
        device = self.accelerator.device
        ends = [*self.eos_token_ids, self._tokenizer.pad_token_id]
        live = torch.tensor([bool(mask[0]) for mask in env_mask], device=device)
        lengths = torch.tensor([sum(mask) for mask in env_mask], device=device)
        clipped = torch.tensor([ids[-1] not in ends for ids in completion_ids], device=device)
        gather = self.accelerator.gather  # a collective, as TRL's own gather of the lengths just before
        metrics = self._metrics["train" if self.model.training else "eval"]
        for key, value in live_length_metrics(gather(lengths), gather(live), gather(clipped)).items():
            metrics[key][-1] = value

    def _generate_and_score_completions(self, inputs):
        with self.clock.part("generation_and_scoring"):
            if self.game_rollout is None:
                return super()._generate_and_score_completions(inputs)
            self._scoring = self.game_rollout.begin(inputs)
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self._scoring = None


class StepClock(TrainerCallback):
    """Where each optimizer step's wall time goes, as ``time/generation``, ``time/scoring`` and ``time/update``
    (seconds, averaged over a log's steps like TRL's own metrics); the three add up to the step.

    - generation: TRL's ``_generate``: ``model.generate``, vLLM, or the game rollout's turns (with their
      bookkeeping, a few ms);
    - scoring: the rest of ``_generate_and_score_completions``: the old and reference log-probabilities, the
      rewards and the advantages;
    - update: the rest: the loss's forward and backward passes and the optimizer step.

    A step that trains on a generation batch made earlier (``steps_per_generation``) spends nothing on the first
    two. On an accelerator each boundary waits for the queued work (a few syncs per step), or the time of
    asynchronous kernels would land in whichever part next waits for them."""

    def __init__(self, trainer: GRPOTrainer) -> None:
        self.trainer = trainer
        self.parts: dict[str, float] = defaultdict(float)
        self.started: float | None = None

    def _now(self) -> float:
        device = self.trainer.accelerator.device
        if device.type in ("cuda", "mps", "xpu"):
            getattr(torch, device.type).synchronize()
        return time.perf_counter()

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        start = self._now()
        try:
            yield
        finally:
            self.parts[name] += self._now() - start

    def on_step_begin(self, args, state, control, **kwargs):
        self.parts.clear()
        self.started = self._now()

    def on_step_end(self, args, state, control, **kwargs):
        if self.started is None:
            return
        total, generation = self._now() - self.started, self.parts["generation"]
        scoring = self.parts["generation_and_scoring"] - generation
        metrics = self.trainer._metrics["train"]
        for name, value in (("generation", generation), ("scoring", scoring), ("update", total - generation - scoring)):
            metrics[f"time/{name}"].append(value)
        self.started = None


# The keyword arguments of GRPOTrainer._get_per_token_logps_and_entropies that are flags, not per-sample inputs.
_FLAGS = ("compute_entropy", "compute_aux_loss")


def _widen(values: torch.Tensor, cut: int, rows: torch.Tensor | None, size: int) -> torch.Tensor:
    """A chunk's per-token values back at its full width (zeros in the padding columns cut off) and
    height (zeros in the rows left out): positions every loss and metric masks out."""
    values = torch.nn.functional.pad(values, (0, cut))
    if rows is None:
        return values
    full = values.new_zeros((size, values.size(1)))
    full[rows] = values
    return full


def live_length_metrics(lengths: torch.Tensor, live: torch.Tensor, clipped: torch.Tensor) -> dict[str, float]:
    """TRL's completion-length metrics (its names and meanings) over the live rows of a game batch: each
    row's reply length, whether it is a live turn, and whether it was cut off at the length limit. A
    batch without a live row (no game had a turn to play) or without a terminated reply reads 0, as TRL's does."""
    turns, ended = lengths[live].float(), lengths[live & ~clipped].float()
    metrics = {"completions/clipped_ratio": clipped[live].float().mean().item() if len(turns) else 0.0}
    for name, values in (("length", turns), ("terminated_length", ended)):
        values = values if len(values) else values.new_zeros(1)
        metrics |= {
            f"completions/mean_{name}": values.mean().item(),
            f"completions/min_{name}": values.min().item(),
            f"completions/max_{name}": values.max().item(),
        }
    return metrics


def take_rows(batch: dict, rows: torch.Tensor | None) -> dict:
    """The micro-batch with only ``rows`` (``KeptRows.rows``: its live turns, and as many placeholders as
    keep it as tall as the fullest process's), or whole with None. A placeholder of a game that had ended
    carries no loss token, yet costs a forward and a backward pass at the micro-batch's width; leaving it
    out changes no update where the loss's normaliser counts the batch's tokens (``drops_placeholders``)."""
    if rows is None:
        return batch
    size = batch["completion_mask"].size(0)
    out = dict(batch)
    for key, value in batch.items():
        if torch.is_tensor(value) and value.ndim > 0 and value.size(0) == size:
            out[key] = value[rows]
        elif isinstance(value, list) and len(value) == size:
            out[key] = [value[i] for i in rows.tolist()]
    return out


def trim_padding(batch: dict) -> dict:
    """The micro-batch without the prompt columns that are left padding in every row, nor the
    completion columns that are right padding in every row (the per-token tensors alike)."""
    prompt_mask, completion_mask = batch["prompt_mask"], batch["completion_mask"]
    start = int(prompt_mask.any(0).nonzero()[0])
    # At least one completion column: with mask_truncated_completions every row of a micro-batch can be masked.
    used = completion_mask.any(0).nonzero()
    end = int(used[-1]) + 1 if len(used) else 1
    width = completion_mask.shape[1]
    out = dict(batch)
    for key in ("prompt_ids", "prompt_mask"):
        out[key] = batch[key][:, start:]
    for key, value in batch.items():
        per_token = torch.is_tensor(value) and value.ndim == 2 and value.shape[1] == width
        if per_token and key not in ("prompt_ids", "prompt_mask"):
            out[key] = value[:, :end]
    return out


_GAME_PARTS = (("guesses", "guesses"), ("invalid_rate", "invalid"), ("contradiction_rate", "contradict"))


def format_log(logs: dict[str, float], step: int, max_steps: int, device: str = "cpu") -> str | None:
    """One line per training log: the total reward, each reward by name, then length, time (and where it went)
    and the peak memory of ``device``, the one the run trains on. A step that generated nothing (``num_iterations``
    > 1, or ``steps_per_generation`` > 1: it trains on replies generated before) has its loss instead."""
    if "reward" not in logs:
        if "loss" not in logs:
            return None  # the end-of-training summary: transformers renders it
        parts = [f"step {step}/{max_steps}", f"loss {logs['loss']:.4f} (on replies generated at an earlier step)"]
        return " | ".join([*parts, *_time_and_memory(logs, device)])
    parts = [f"step {step}/{max_steps}", f"reward {logs['reward']:.3f} ± {logs.get('reward_std', 0.0):.3f}"]
    rewards = [
        f"{key[len('rewards/') : -len('_reward/mean')]} {value:.3f}"
        for key, value in logs.items()
        if key.startswith("rewards/") and key.endswith("/mean") and value is not None
    ]
    parts.append(" ".join(rewards))
    if "completions/mean_length" in logs:
        parts.append(
            f"len {logs['completions/mean_length']:.1f} clipped {logs.get('completions/clipped_ratio', 0):.2f}"
        )
    if "game/win_rate" in logs:
        game = [f"games won {logs['game/win_rate']:.2f}"]
        game += [f"{name} {logs[f'game/{key}']:.2f}" for key, name in _GAME_PARTS if f"game/{key}" in logs]
        parts.append(" ".join(game))
    if "val/win_rate" in logs:
        check = [f"validation won {logs['val/win_rate']:.2f}"]
        check += [f"{name} {logs[f'val/{key}']:.2f}" for key, name in _GAME_PARTS if f"val/{key}" in logs]
        if "val_opening/win_rate" in logs:
            check.append(f"(from a random opener {logs['val_opening/win_rate']:.2f})")
        parts.append(" ".join(check))
    return " | ".join([*parts, *_time_and_memory(logs, device)])


def _time_and_memory(logs: dict[str, float], device: str) -> list[str]:
    parts = []
    split = [logs.get(f"time/{name}") for name in ("generation", "scoring", "update")]
    if None not in split:  # StepClock's: the whole step, optimizer included
        generation, scoring, update = split
        parts.append(
            f"{generation + scoring + update:.2f} s/step (generate {generation:.2f}, score {scoring:.2f}, "
            f"update {update:.2f})"
        )
    elif "step_time" in logs:  # TRL's: generation, rewards, loss and backward, without the optimizer update
        parts.append(f"{logs['step_time']:.2f} s/step")
    if "peak_memory_mb" in logs:
        parts.append(f"peak {logs['peak_memory_mb']:.0f} MB {memory_source(device)}")
    return parts
