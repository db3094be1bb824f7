"""Game mode through TRL's own vLLM generation code, with fakes for vLLM itself.

Server mode on several processes: each turn's generate call is a collective (the main process sends every
process's prompts to the server and hands each its share back), but games end at different turns on
different processes. Two real gloo processes play through TRL's ``_generate_single_turn`` and
``VLLMGeneration.generate``; a fake client on the main process records what it was sent.

Sleep mode (colocated vLLM): TRL puts vLLM to sleep after every generate call and pushes the weights again
at the next one; a game step calls it once per turn. A fake engine counts the pushes.
"""

from __future__ import annotations

import json
import os
import socket
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp
from accelerate import PartialState
from trl import GRPOTrainer
from trl.generation.vllm_generation import VLLMGeneration

from training.rollout import GameRollout, PolicyPlayer
from wordle import MAX_GUESSES
from wordle.game import play

# The fake policy guesses these in order, whatever the feedback: a game's length is set by its secret.
POLICY = ["SLATE", "CRANE", "BRINE", "PLUMB", "GHOST", "WHICH"]
EOS = 0


def reply(prompt_ids: list[int]) -> list[int]:
    """The policy's reply to a prompt (its bytes): the next word of POLICY that it does not show yet."""
    shown = bytes(prompt_ids).decode()
    word = next((w for w in POLICY if w not in shown), POLICY[-1])
    return list(f"<think>next</think><guess>{word}</guess>".encode()) + [EOS]


class Tokenizer:
    def batch_decode(self, ids, skip_special_tokens=True):
        return [bytes(t for t in row if t != EOS).decode() for row in ids]


class FakeTrainer:
    """What TRL's ``_generate_single_turn`` (vLLM branch) and ``PolicyPlayer`` read of a GRPOTrainer."""

    _generate_single_turn = GRPOTrainer._generate_single_turn  # TRL's own

    def __init__(self, generation: VLLMGeneration, mode: str) -> None:
        self.vllm_generation, self.use_vllm = generation, True
        self.accelerator = generation.accelerator
        self.args = SimpleNamespace(report_to=[], vllm_mode=mode, vllm_tensor_parallel_size=1, seed=0)
        self.state, self._last_loaded_step = SimpleNamespace(global_step=0), 0  # this step's weights are in
        self.eos_token_ids, self.processing_class, self.calls = [EOS], Tokenizer(), 0
        self.loss_type = "dapo"  # TRL's default; GameRollout reads it to choose which rows the loss keeps

    def _tokenize_prompts(self, prompts):
        self.calls += 1
        return ([list(json.dumps(p).encode()) for p in prompts],)


def generation(accelerator, mode: str, **fields) -> VLLMGeneration:
    """TRL's VLLMGeneration without its vLLM: its own generate and sync_weights, on fakes."""
    gen = object.__new__(VLLMGeneration)
    settings = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0, "logprobs": 0}
    settings |= {"max_completion_length": 48, "structured_outputs_regex": None, "generation_kwargs": {}}
    settings |= {"tensor_parallel_size": 1, "enable_sleep_mode": False, "_llm_weights_sleeping": False}
    vars(gen).update(settings, mode=mode, accelerator=accelerator, **fields)
    return gen


class FakeClient:
    """TRL's VLLMClient on the main process: what it was sent, and the policy's replies."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def generate(self, prompts, n, **kwargs):
        assert n == 1
        self.sent.append(len(prompts))
        completions = [reply(p) for p in prompts]
        return {
            "prompt_ids": prompts,
            "completion_ids": completions,
            "logprobs": [[[-0.5]] * len(c) for c in completions],
        }


# Process 0's games end at turns 1 and 3, process 1's at turns 2 and 6 (a secret never guessed).
SECRETS = [["SLATE", "BRINE"], ["CRANE", "QUERY"]]


def _server_worker(rank: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank))
    os.environ.update(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    state = PartialState(cpu=True)
    client = FakeClient() if state.is_main_process else None
    trainer = FakeTrainer(generation(state, "server", vllm_client=client), mode="server")
    player = PolicyPlayer(trainer)
    games = play(player, SECRETS[rank])
    player.finish()
    results[rank] = {
        "lockstep": player.lockstep,
        "guesses": [[t.guess for t in g.turns] for g in games],
        "won": [g.won for g in games],
        "calls": trainer.calls,
        "sent": None if client is None else client.sent,
        "records": len(player.records),
    }
    torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_mode_on_two_processes_plays_each_game_with_its_own_replies():
    results = mp.Manager().dict()
    mp.spawn(_server_worker, args=(free_port(), results), nprocs=2, join=True)
    first, second = results[0], results[1]
    assert first["lockstep"] and second["lockstep"]
    # Every game got the replies to its own prompts: the policy's words in order, up to its secret.
    assert first["guesses"] == [POLICY[:1], POLICY[:3]] and first["won"] == [True, True]
    assert second["guesses"] == [POLICY[:2], POLICY] and second["won"] == [True, False]
    # Process 0 ran out of games after turn 3 and took part in the other three turns with placeholders:
    # every turn the server was sent the same number of prompts from each process, the most either had.
    assert first["calls"] == 3 and second["calls"] == MAX_GUESSES  # turns with games of their own
    assert first["sent"] == [2 * 2, 2 * 2, 2 * 1, 2 * 1, 2 * 1, 2 * 1]
    assert second["sent"] is None  # only the main process talks to the server
    assert first["records"] == 1 + 3 and second["records"] == 2 + 6  # placeholders are not recorded


class Engine:
    """vLLM's LLM in colocate mode: counts the weight pushes, and refuses to generate while asleep."""

    def __init__(self) -> None:
        self.pushes, self.asleep, self.generated = 0, set(), 0
        model = SimpleNamespace(load_weights=self._load)
        self.llm_engine = SimpleNamespace(
            model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=model)))
        )

    def _load(self, weights):
        assert "weights" not in self.asleep, "weights pushed into sleeping memory"
        self.pushes += 1

    def sleep(self, level):
        assert level == 2
        self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags):
        self.asleep -= set(tags)

    def reset_prefix_cache(self):
        pass

    def generate(self, prompts, sampling_params, use_tqdm):
        assert not self.asleep, f"generate while {self.asleep} sleep"
        self.generated += 1
        outputs = []
        for p in prompts:
            tokens = reply(p["prompt_token_ids"])
            logprobs = [{t: SimpleNamespace(logprob=-0.5, rank=1)} for t in tokens]
            completion = SimpleNamespace(token_ids=tokens, logprobs=logprobs)
            outputs.append(SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=[completion]))
        return outputs


def test_sleep_mode_pushes_the_weights_once_per_game_step():
    pytest.importorskip("vllm")  # TRL's colocate path builds vLLM's SamplingParams
    engine = Engine()
    gen = generation(
        PartialState(cpu=True), "colocate", llm=engine, enable_sleep_mode=True, model=torch.nn.Linear(1, 1)
    )
    gen._iter_named_params = lambda: iter([("weight", torch.zeros(1))])
    trainer = FakeTrainer(gen, mode="colocate")
    trainer.num_generations = 1
    trainer._log_metric = lambda name, value: None
    trainer.args.per_device_train_batch_size = MAX_GUESSES
    rollout = GameRollout()
    rollout.begin([{"secret": "QUERY", "past_guess_history": []}] * MAX_GUESSES)
    for step in (1, 2):
        trainer.state.global_step = step
        gen.sync_weights()  # what TRL's _generate does before it calls rollout_func, once per step
        trainer._last_loaded_step = step
        out = rollout([None] * MAX_GUESSES, trainer)
        assert sum(m[0] for m in out["env_mask"]) == MAX_GUESSES  # one game, six turns: six generate calls
        assert engine.generated == MAX_GUESSES * step and engine.pushes == step  # one push per step, not per turn
        assert engine.asleep == {"weights", "kv_cache"}  # asleep between steps, as TRL leaves it
