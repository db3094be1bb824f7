"""Full-game rollouts (``--rollout game``): TRL's ``rollout_func`` plays whole games with the policy.

Each step, every start state of the batch (a training secret with an empty history, or a
``--dataset`` row that starts mid-way) is played ``num_generations`` times to the end with the
current policy, through ``wordle.game.play``: the loop the evaluation drives, with each turn's
prompt exactly the one the evaluation renders for that state.

TRL groups samples by ``num_generations`` consecutive entries and compares each sample with its
group. The layout makes a group one turn slot of one start state's games:

    start state 0: [turn 1 of games 0..G-1] [turn 2 of games 0..G-1] ... [turn 6 of games 0..G-1]
    start state 1: ...

A game that ended before a slot fills it with a placeholder (prompt and completion one eos token,
loss mask 0) whose rewards are all None: TRL leaves it out of its group's mean and std, gives it
advantage 0, and it adds no loss token. So turn t's advantage is its total (its own shaping plus
its game's return) against the mean over the games still alive at turn t: a per-slot baseline
that knows how far the game got. Rewards are scaled by the batch's std (or not at all), never the
group's: a late slot with two live games would turn any difference into +-0.71
(``settings.game.game_objective``).

The trainer's sampler repeats each start state ``SLOTS x num_generations`` times, so the rows of a
batch arrive whole (``WordleGRPOTrainer``); TRL passes only the prompts to ``rollout_func``, so the
trainer hands the rollout the batch's rows. Games are sampled from a torch generator state seeded
by the run's seed, the step and the process, so a resumed run plays the same games.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import GenerationConfig
from trl.models.utils import unwrap_model_for_generation
from trl.trainer.utils import pad

from runtime import distributed
from settings.arguments import SLOTS
from training.game_stats import game_rates, log_game_metrics
from wordle import render_prompt, row_history, row_secret
from wordle.decoding import Decoding
from wordle.game import Game, GameView, play
from wordle.openings import OWN, RANDOM_ANSWER


class PolicyPlayer:
    """A ``wordle.game`` player that generates with the trainer's policy and keeps each turn's tokens.

    Sampled exactly as TRL samples (its tokenizer call, its generation config, its model
    unwrapping; vLLM when the trainer uses it), or with ``decoding``'s settings (the held-out check). ``records``
    maps ``(game index, turn)`` to ``(prompt_ids, completion_ids, logprobs)``: vLLM's sampling log-probabilities
    of the chosen tokens (its importance-sampling correction needs them), or None with ``model.generate``, as in
    TRL's own turns (what would use them falls back to the scoring pass's). Keeping ``generate``'s scores would
    hold a reply's every step over the whole vocabulary: 2.5 GB for 16 replies of 256 tokens of Qwen's.
    """

    name = "policy"

    def __init__(self, trainer: Any, decoding: Decoding | None = None) -> None:
        self.trainer, self.decoding = trainer, decoding
        self.records: dict[tuple[int, int], tuple[list[int], list[int], list[float] | None]] = {}
        self.lockstep = self.decoding is None and in_lockstep(trainer)

    def replies(self, views: Sequence[GameView]) -> list[str]:
        trainer = self.trainer
        prompt_ids = trainer._tokenize_prompts([v.prompt for v in views])[0]
        if self.lockstep:
            completion_ids, logprobs = self._generate_in_lockstep(prompt_ids)
        elif trainer.use_vllm and self.decoding is None:
            completion_ids, logprobs = trainer._generate_single_turn(prompt_ids, None, {}, 1)
        else:
            completion_ids, logprobs = self._generate(prompt_ids), [None] * len(prompt_ids)
        for view, prompt, completion, logps in zip(views, prompt_ids, completion_ids, logprobs, strict=True):
            self.records[(view.game, view.turn)] = (
                list(prompt),
                list(completion),
                None if logps is None else list(logps),
            )
        return trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)

    def _generate_in_lockstep(self, prompt_ids: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
        # TRL's generate call is a collective here that splits its result as if every process had sent as
        # many prompts: each turn, every process sends the most any process has, padded with copies.
        width = self._turn_width(len(prompt_ids))
        padded = prompt_ids + [prompt_ids[0]] * (width - len(prompt_ids))
        completion_ids, logprobs = self.trainer._generate_single_turn(padded, None, {}, 1)
        return completion_ids[: len(prompt_ids)], logprobs[: len(prompt_ids)]

    def finish(self) -> None:
        """In lockstep, take part in the turns that other processes' games still play, with placeholder
        prompts, until every process's games are over (the turns of a game end when it is won)."""
        if not self.lockstep:
            return
        placeholder = [self.trainer.eos_token_ids[0]]
        while width := self._turn_width(0):
            self.trainer._generate_single_turn([placeholder] * width, None, {}, 1)

    @staticmethod
    def _turn_width(prompts: int) -> int:
        """The most prompts any process sends this turn (0 once every process's games are over)."""
        return int(distributed.max_over_processes(prompts))

    def _config(self) -> GenerationConfig:
        config = GenerationConfig.from_dict(self.trainer.generation_config.to_dict())
        if self.decoding is not None:
            config.update(**self.decoding.generation_kwargs())
        return config

    @torch.no_grad()
    def _generate(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        trainer = self.trainer
        # Left padding, so that every row's prompt ends where generation starts (TRL's own helper).
        rows = [torch.tensor(ids) for ids in prompt_ids]
        input_ids = pad(rows, padding_value=trainer._tokenizer.pad_token_id, padding_side="left")
        mask = pad([torch.ones_like(r) for r in rows], padding_value=0, padding_side="left")
        width = input_ids.shape[1]
        device = trainer.accelerator.device
        with (
            trainer.generating(),
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                generation_kwargs=trainer.generation_kwargs,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model,
        ):
            out = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=mask.to(device),
                generation_config=self._config(),
            )
        eos = set(trainer.eos_token_ids)
        completions = []
        for row in out[:, width:].tolist():
            end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))  # up to and with the first eos
            completions.append(row[:end])
        return completions


@contextmanager
def awake_for_the_step(trainer: Any) -> Iterator[None]:
    """Colocated vLLM in sleep mode stays awake for all the turns of a game step, then sleeps.

    TRL puts it to sleep after every generate call (level 2, which discards the weights) and pushes
    the weights again at the next one: a step that plays six turns would pay six pushes. TRL has
    pushed this step's weights before it called the rollout (``_generate``); the pushes are counted in
    tests/test_lockstep.py.
    """
    vllm = getattr(trainer, "vllm_generation", None) if trainer.use_vllm else None
    if vllm is None or vllm.mode != "colocate" or not vllm.enable_sleep_mode:
        yield
        return
    if vllm._llm_weights_sleeping:
        vllm.sync_weights()  # wakes the weights and pushes the current ones
    vllm.llm.wake_up(tags=["kv_cache"])
    vllm.enable_sleep_mode = False  # so that TRL's generate neither wakes nor sleeps between turns
    try:
        yield
    finally:
        vllm.enable_sleep_mode = True
        vllm.llm.sleep(level=2)
        vllm._llm_weights_sleeping = True


def in_lockstep(trainer: Any) -> bool:
    """Whether every turn's generate call is a collective across processes: TRL's vLLM server mode (the
    main process sends every process's prompts and hands each its share back) and colocated vLLM split
    over several devices (tensor parallel). Otherwise each process generates alone, for as many turns
    as its own games last."""
    args = trainer.args
    shared = args.vllm_mode == "server" or args.vllm_tensor_parallel_size > 1
    return bool(trainer.use_vllm) and shared and trainer.accelerator.num_processes > 1


def _generator_seed(seed: int, step: int, process: int) -> int:
    return (seed * 1_000_003 + step * 7_919 + process) % 2**63


@dataclass
class GameBatch:
    """One generation batch, as the trainer and the rollout share it: TRL passes ``rollout_func`` the
    prompts alone, and hands the trainer's scoring pass and loss nothing of what the games left out."""

    rows: list[dict]  # the batch's dataset rows: the games start from them (the trainer's, in)
    kept: KeptRows | None = None  # the rows each micro-batch keeps; None: every row (the rollout's, out)
    prompts: list[list[dict[str, str]]] = field(default_factory=list)  # each row's own turn state (out)


class GameRollout:
    """``rollout_func(prompts, trainer)`` for TRL's GRPOTrainer: whole games, one sample per turn slot.

    The trainer opens each generation batch with :meth:`begin`; the games fill in its ``kept`` rows."""

    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        self.batch = GameBatch([])

    def begin(self, rows: list[dict]) -> GameBatch:
        self.batch = GameBatch(rows)
        return self.batch

    def __call__(self, prompts: list, trainer: Any) -> dict[str, list]:
        rows = self.batch.rows
        generations = trainer.num_generations
        block = self.slots * generations
        if len(prompts) != len(rows) or len(rows) % block:
            raise ValueError(
                f"a game batch needs whole blocks of {block} rows (got {len(rows)}, {len(prompts)} prompts)"
            )
        starts = [rows[i] for i in range(0, len(rows), block) for _ in range(generations)]
        secrets = [row_secret(f"row {i}", row["secret"]) for i, row in enumerate(starts)]
        histories = [row_history(f"row {i}", row["past_guess_history"]) for i, row in enumerate(starts)]
        player = PolicyPlayer(trainer)
        step, process = trainer.state.global_step, trainer.accelerator.process_index
        with torch.random.fork_rng(devices=_rng_devices(trainer)), awake_for_the_step(trainer):
            torch.manual_seed(_generator_seed(trainer.args.seed, step, process))
            games = play(player, secrets, histories)
            player.finish()
        log_game_metrics(trainer, games, generations)
        out = self.layout(games, player.records, generations, trainer.eos_token_ids[0])
        # For the trainer's scoring pass, which skips placeholders as the loss does (its inputs hold no env_mask,
        # and with mask_truncated_completions a live turn cut off has no loss token either).
        live = [bool(mask[0]) for mask in out["env_mask"]]
        self.batch.kept = KeptRows.of(live, trainer.args.per_device_train_batch_size, trainer.loss_type)
        self.batch.prompts = [render_prompt(history) for history in out["past_guess_history"]]
        return out

    def layout(self, games: Sequence[Game], records: dict, generations: int, eos_id: int) -> dict[str, list]:
        """The samples in TRL's order: per start state, slot by slot, game by game."""
        out: dict[str, list] = {
            key: []
            for key in (
                "prompt_ids",
                "completion_ids",
                "logprobs",
                "env_mask",
                "secret",
                "past_guess_history",
                "game_turn",
                "game_won",
                "game_guesses",
            )
        }
        for first in range(0, len(games), generations):
            group = games[first : first + generations]
            shown = [game.histories() for game in group]
            for slot in range(self.slots):
                for offset, game in enumerate(group):
                    live = slot < len(game.turns)
                    if live:
                        turn = game.turns[slot]
                        prompt, completion, logps = records[(first + offset, turn.turn)]
                        before = shown[offset][slot]
                    else:  # the game ended: a placeholder, scored None and masked out of the loss
                        prompt, completion, logps, before = [eos_id], [eos_id], [0.0], game.history
                    out["prompt_ids"].append(prompt)
                    out["completion_ids"].append(completion)
                    out["logprobs"].append(logps)
                    out["env_mask"].append([int(live)] * len(completion))
                    out["secret"].append(game.secret)
                    out["past_guess_history"].append([list(pair) for pair in before])
                    out["game_turn"].append(game.turns[slot].turn if live else None)
                    out["game_won"].append(game.won)
                    out["game_guesses"].append(game.guesses)
        if any(logps is None for logps in out["logprobs"]):  # model.generate's turns: none, as TRL's own
            out["logprobs"] = None
        return out


# TRL's losses whose normaliser counts the loss tokens of the whole generation batch (num_items_in_batch): a row
# without one adds 0 to the sum and to the count, so the placeholders of ended games can leave the micro-batches.
# grpo, sapo, luspo and dr_grpo divide by a micro-batch's rows: there every row stays, as in TRL's own batch.
TOKEN_NORMALISED_LOSSES = ("dapo", "cispo", "vespo")


@dataclass(frozen=True)
class KeptRows:
    """The rows of a game batch that the loss's micro-batches (and the scoring pass's chunks, alike) keep.

    A placeholder carries no loss token, yet costs a forward and a backward pass at its micro-batch's
    width, so each micro-batch of ``size`` rows leaves its placeholders out. But TRL's loss gathers one
    value per row across processes (its clipping metrics), and games end at different turns on
    different processes: every process keeps as many rows as the one with the most live rows, its own
    live rows and then placeholders. On one process that is its live rows, no more.
    """

    live: list[bool]  # per row of the batch: a live turn (True) or a placeholder
    counts: list[int]  # per micro-batch: how many rows it keeps
    size: int  # rows per micro-batch

    @classmethod
    def of(cls, live: Sequence[bool], size: int, loss_type: str = "dapo") -> KeptRows | None:
        """The rows kept when ``live`` is this process's batch (a collective: every process calls it); None, every
        row, where ``loss_type``'s normaliser counts rows (``TOKEN_NORMALISED_LOSSES``)."""
        if loss_type not in TOKEN_NORMALISED_LOSSES:
            return None
        own = [sum(live[start : start + size]) for start in range(0, len(live), size)]
        counts = [int(n) for n in distributed.max_each_over_processes(own)]
        return cls(list(live), counts, size)

    def rows(self, chunk: int) -> torch.Tensor | None:
        """The indices the ``chunk``-th micro-batch keeps, or None when it keeps every row."""
        live = self.live[chunk * self.size : (chunk + 1) * self.size]
        return kept_rows(torch.tensor(live), self.counts[chunk])


def kept_rows(live: torch.Tensor, keep: int) -> torch.Tensor | None:
    """The indices of ``keep`` rows of a micro-batch: its live rows, then the first placeholders, in
    their order; or None to keep it whole. Whole when it would keep every row, and when no process has
    a live row there (a micro-batch of placeholders alone, two tokens wide once trimmed, so that no pass
    is empty)."""
    if keep == 0 or keep >= len(live):
        return None
    placeholders = (~live).nonzero().flatten()
    rows = torch.cat([live.nonzero().flatten(), placeholders[: keep - int(live.sum())]])
    return rows.sort().values


def _rng_devices(trainer: Any) -> list:
    device = trainer.accelerator.device
    return [device] if device.type == "cuda" else []


class GameCheck:
    """A cheap learning curve: greedy games on validation secrets (``train_secrets("val")``, which no
    training plays: settings are chosen on these), from the model's own opening (``val/*``) and from a
    random answer played first (``val_opening/*``: does it read the feedback, or follow its opening?). The
    held-out secrets are never played here: they are read once, by the final evaluation."""

    def __init__(self, validation: Sequence[str], decoding: Decoding, seed: int = 0) -> None:
        self.validation, self.decoding, self.seed = list(validation), decoding, seed

    def player(self, trainer: Any) -> Any:
        """Who plays: the trainer's policy, generating as its rollouts do."""
        return PolicyPlayer(trainer, self.decoding)

    def __call__(self, trainer: Any) -> dict[str, float]:
        player = self.player(trainer)
        was_training = trainer.model.training
        trainer.model.eval()
        rates: dict[str, float] = {}
        try:  # each process plays its share of the secrets
            secrets = distributed.shard(self.validation)
            for opening, prefix in ((OWN, "val"), (RANDOM_ANSWER, "val_opening")):
                games = distributed.unshard(play(player, secrets, opening.starts(secrets, self.seed)))
                rates |= game_rates(games, prefix=prefix)
        finally:
            trainer.model.train(was_training)
        return rates


class _DropPlaceholderWarning(logging.Filter):
    """TRL warns, dumping the whole row, whenever every reward of a sample is None: in game mode
    that is every placeholder, every step. Only those records are dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("All reward functions returned None" in message and "'game_turn': None" in message)


def quiet_placeholder_warning() -> None:
    logger = logging.getLogger("trl.trainer.grpo_trainer")
    if not any(isinstance(f, _DropPlaceholderWarning) for f in logger.filters):
        logger.addFilter(_DropPlaceholderWarning())
