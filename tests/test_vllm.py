"""vLLM for real, on its CPU build: colocated generation while training (TRL's colocate mode).

Skipped where vLLM is not installed, as in the main suite; ``.ci/run`` runs this file again in a second
environment with vLLM's CPU build (docs/several-gpus.md, "vLLM generation"). Each training runs the embedded model 2 steps and
checks, at every generation after the first optimizer step, that the weights vLLM generates with are
the trained LoRA merged into the base: a sync that stopped sending weights fails here.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
from conftest import TURN_MODE

vllm_generation = pytest.importorskip("trl.generation.vllm_generation")
pytest.importorskip("vllm")

# After the skips: the main suite has no vLLM.
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

import grpo_train
from evaluation.run import evaluate_model, select_secrets, without_adapter
from evaluation.vllm_backend import LocalEngine, ServerEngine, ServerError
from models.loading import load_for_inference, load_generation_side, load_vllm
from settings.config import resolve
from tinymodel import MODEL_DIR
from wordle import allowed, candidates
from wordle.completion import parse_completion
from wordle.decoding import Decoding
from wordle.openings import Opening

# The embedded model, 2 prompts of 2 completions a step (game mode: 2 games of up to 6 turns), nothing else.
QUICK = ["--profile", "cpu", "--train_rows", "16", "--per_device_train_batch_size", "4", "--num_generations", "2"]
QUICK += ["--save_steps", "100", "--disable_tqdm", "true", "--seed", "3", "--skip_eval", "true", "--max_steps", "2"]
QUICK += TURN_MODE  # a test's own --rollout comes later and wins

# The training's own layer names -> how vLLM fuses them (Qwen2: q, k and v in one matrix, gate and up in another).
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def vllm_params(generation) -> dict[str, torch.Tensor]:
    """The weights the colocated engine generates with, under vLLM's names (TRL writes them there)."""
    model = generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
    return {name: p.detach() for name, p in model.named_parameters()}


def merged_params(policy) -> dict[str, torch.Tensor]:
    """The policy's weights with its LoRA merged, under the base model's names: merged on a copy by PEFT
    itself, not by TRL's sync, so that a fault in that sync cannot hide in both sides of the comparison."""
    merged = copy.deepcopy(policy).merge_and_unload()
    return {name: p.detach() for name, p in merged.named_parameters()}


def as_vllm(merged: dict[str, torch.Tensor], name: str) -> torch.Tensor | None:
    """The merged weight that vLLM's parameter ``name`` should hold (None: not one the model trains)."""
    for fused, parts in FUSED.items():
        if f".{fused}." in name:
            pieces = [merged.get(name.replace(fused, part)) for part in parts]
            return None if any(p is None for p in pieces) else torch.cat(pieces)
    return merged.get(name)


class Watch:
    """Wraps TRL's colocated ``generate`` (called right after TRL's weight sync): compares vLLM's weights
    with the merged policy's, and keeps every reply and the token ids sampled."""

    def __init__(self, monkeypatch) -> None:
        self.checks: list[tuple[int, float, bool]] = []  # (step, largest difference, LoRA already trained)
        self.replies: list[str] = []
        self.tokens: set[int] = set()  # every token id vLLM sampled
        self.trainer = None
        real = vllm_generation.VLLMGeneration.generate
        watch = self

        def generate(generation, *args, **kwargs):
            watch.check(generation)
            out = real(generation, *args, **kwargs)
            watch.replies += watch.trainer.processing_class.batch_decode(out[1], skip_special_tokens=True)
            watch.tokens.update(t for ids in out[1] for t in ids)
            return out

        monkeypatch.setattr(vllm_generation.VLLMGeneration, "generate", generate)
        real_init = grpo_train.WordleGRPOTrainer.__init__

        def init(trainer, *args, **kwargs):
            watch.trainer = trainer
            real_init(trainer, *args, **kwargs)

        monkeypatch.setattr(grpo_train.WordleGRPOTrainer, "__init__", init)

    def check(self, generation) -> None:
        policy = self.trainer.model
        merged, served = merged_params(policy), vllm_params(generation)
        trained = any(p.abs().sum() > 0 for n, p in policy.named_parameters() if "lora_B" in n)
        worst, compared = 0.0, 0
        for name, tensor in served.items():
            expected = as_vllm(merged, name)
            if expected is None:
                continue
            if name.endswith(("embed_tokens.weight", "lm_head.weight")):  # vLLM pads the vocabulary's rows
                tensor = tensor[: expected.shape[0]]
            assert expected.shape == tensor.shape, name
            # vLLM runs a float32 checkpoint in bfloat16 on CPU (its default): TRL's sync casts as it loads.
            worst = max(worst, (expected.to(tensor.dtype).float() - tensor.float()).abs().max().item())
            compared += 1
        assert compared >= 10, f"only {compared} of vLLM's weights matched a policy weight: names changed?"
        self.checks.append((self.trainer.state.global_step, worst, trained))


@pytest.fixture
def environ():
    """TRL's colocate mode sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in os.environ for vLLM: put
    the environment back, or a later test's subprocess would take itself for a distributed worker."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def colocate(tmp_path, *extra: str):
    argv = [*QUICK, "--output_dir", str(tmp_path / "out"), "--use_vllm", "true", "--vllm_mode", "colocate", *extra]
    return grpo_train.train(resolve(argv))


@pytest.mark.parametrize("rollout", ["turn", "game"])
@pytest.mark.parametrize("constrain", [False, True], ids=["free", "constrained"])
def test_colocated_vllm_generates_with_the_trained_weights(rollout, constrain, tmp_path, monkeypatch, environ):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    watch = Watch(monkeypatch)
    extra = ["--rollout", rollout, *(["--constrain_vllm", "allowed"] if constrain else [])]
    trainer = colocate(tmp_path, *extra)
    assert trainer.state.global_step == 2 and watch.replies
    after_update = [(step, worst) for step, worst, trained in watch.checks if step >= 1 and trained]
    assert after_update, f"no generation after an optimizer step that changed the LoRA: {watch.checks}"
    assert all(worst == 0.0 for _, worst in after_update), (
        f"vLLM's weights differ from the trained ones: {watch.checks}"
    )
    if constrain:  # the grammar holds whatever the weights: every reply parses as an allowed guess
        words = set(allowed())
        bad = [r for r in watch.replies if (parse_completion(r) or "").upper() not in words]
        assert not bad, f"{len(bad)} of {len(watch.replies)} constrained replies are not an allowed guess: {bad[:3]}"


def test_colocated_vllm_never_samples_what_the_model_suppresses(tmp_path, monkeypatch, environ):
    # TRL hands generation_kwargs to vLLM's SamplingParams: the mask must arrive there, as the allow list that
    # transformers' suppress list is (the embedded model suppresses the 3263 of its 5817 tokens that only
    # prompts use). Then, at vLLM's highest temperature, no sampled token is one of them.
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    watch = Watch(monkeypatch)
    received = []
    real = vllm_generation.SamplingParams

    def sampling_params(**kwargs):
        received.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(vllm_generation, "SamplingParams", sampling_params)
    colocate(tmp_path, "--temperature", "2.0", "--max_steps", "1")
    suppressed = set(watch.trainer.model.generation_config.suppress_tokens)
    vocabulary = set(range(len(watch.trainer.processing_class)))
    assert received and all(set(k.get("allowed_token_ids") or ()) == vocabulary - suppressed for k in received)
    assert watch.replies and watch.tokens and not watch.tokens & suppressed


# Each process of a torchrun launch: the training above, watched, its checks written where the test reads them.
WATCHED_WORKER = """
import json, os, sys
sys.path[:0] = [{root!r}, {tests!r}]
import pytest
import grpo_train
from test_vllm import Watch

watch = Watch(pytest.MonkeyPatch())
code = grpo_train.main(sys.argv[1:])
with open(os.path.join({out!r}, "checks-" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump({{"checks": watch.checks, "replies": len(watch.replies)}}, f)
sys.exit(code)
"""


def test_game_mode_with_colocated_vllm_on_two_processes_trains_with_the_trained_weights(tmp_path):
    root = Path(__file__).resolve().parent.parent
    out, worker = tmp_path / "out", tmp_path / "worker.py"
    worker.write_text(WATCHED_WORKER.format(root=str(root), tests=str(root / "tests"), out=str(tmp_path)))
    argv = [*QUICK, "--rollout", "game", "--save_steps", "2", "--output_dir", str(out), "--use_vllm", "true"]
    argv += ["--vllm_mode", "colocate"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    proc = subprocess.run(
        [*launcher, str(worker), *argv], cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):  # each process's own vLLM, synced with the weights both processes trained alike
        record = json.loads((tmp_path / f"checks-{rank}.json").read_text())
        after_update = [(step, worst) for step, worst, trained in record["checks"] if step >= 1 and trained]
        assert record["replies"] and after_update, record
        assert all(worst == 0.0 for _, worst in after_update), f"process {rank}: {record['checks']}"
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "game/win_rate" in e] == [1, 2]


# --- evaluate.py --backend vllm ---------------------------------------------------------------------

GAMES = select_secrets(40)  # spread over the held-out secrets


def replies(results) -> list[list[str]]:
    """Each game's replies, in order: what two backends must agree on, game for game."""
    return [[turn.reply for turn in game.turns] for game in results[0].games]


@pytest.fixture(scope="module")
def adapter(tmp_path_factory) -> Path:
    """A LoRA on the embedded model with random, non-zero weights, saved as grpo_train saves one."""
    base = AutoModelForCausalLM.from_pretrained(MODEL_DIR)
    config = LoraConfig(r=16, lora_alpha=32, target_modules=["v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(base, config)
    torch.manual_seed(0)
    with torch.no_grad():  # LoRA B starts at zero: a small random one makes the adapter change some games
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    out = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def engines(adapter):
    """One vLLM engine (LoRA enabled) serving the base model and the base + adapter, as evaluate.py builds them."""
    source, adapter_dir, tokenizer, generation = load_generation_side("tiny", adapter)
    llm, lora = load_vllm(source, adapter_dir)
    return LocalEngine(llm, generation, None), LocalEngine(llm, generation, lora), tokenizer


@pytest.mark.parametrize("with_adapter", [False, True], ids=["base", "adapter"])
def test_vllm_greedy_games_equal_the_hf_backends(with_adapter, engines, adapter):
    base_engine, lora_engine, tokenizer = engines
    model, hf_tokenizer = load_for_inference("tiny", adapter if with_adapter else None, device="cpu")
    hf = replies(evaluate_model(model, hf_tokenizer, GAMES))
    served = replies(evaluate_model(lora_engine if with_adapter else base_engine, tokenizer, GAMES))
    assert served == hf
    if with_adapter:  # the adapter is in play on both sides: some games differ from the base model's
        assert served != replies(evaluate_model(base_engine, tokenizer, GAMES))
        # evaluate.py's start row: the same engine without the adapter plays the base model's games, as the HF
        # backend's PEFT model does with its adapter disabled.
        with without_adapter(lora_engine) as start, without_adapter(model) as hf_start:
            assert replies(evaluate_model(start, tokenizer, GAMES)) == replies(
                evaluate_model(hf_start, hf_tokenizer, GAMES)
            )
            assert replies(evaluate_model(start, tokenizer, GAMES)) == replies(
                evaluate_model(base_engine, tokenizer, GAMES)
            )


@pytest.mark.parametrize("spec", ["answer", "allowed:2"])
def test_vllm_games_from_an_opening_equal_the_hf_backends(spec, engines):
    base_engine, _, tokenizer = engines
    model, hf_tokenizer = load_for_inference("tiny", device="cpu")
    opening = Opening.parse(spec)
    [hf] = evaluate_model(model, hf_tokenizer, GAMES, opening=opening)
    [served] = evaluate_model(base_engine, tokenizer, GAMES, opening=opening)
    assert replies([served]) == replies([hf]) and served.opening == hf.opening == opening.spec
    assert [g.start for g in served.games] == opening.starts(GAMES) and all(g.start for g in served.games)
    assert served.metrics["contradiction_rate"] == hf.metrics["contradiction_rate"]


def test_vllm_sampling_is_seeded_and_constraints_hold(engines):
    base_engine, _, tokenizer = engines
    sampled = Decoding(max_new_tokens=16, sample=True, temperature=1.0, seed=1)
    first = replies(evaluate_model(base_engine, tokenizer, GAMES, sampled))
    assert first == replies(evaluate_model(base_engine, tokenizer, GAMES, sampled))
    assert first != replies(evaluate_model(base_engine, tokenizer, GAMES, sampled.replace(seed=2)))
    assert first != replies(evaluate_model(base_engine, tokenizer, GAMES, Decoding(max_new_tokens=16)))

    words = set(allowed())
    for constrain in ("allowed", "candidates"):
        [_, constrained] = evaluate_model(base_engine, tokenizer, GAMES, sampled, constrain=constrain)
        for game in constrained.games:
            for turn, history in zip(game.turns, game.histories(), strict=True):
                guess = (parse_completion(turn.reply) or "").upper()
                assert guess in words, turn.reply
                if constrain == "candidates":  # a word the feedback so far still allows
                    assert guess in candidates(history).words(), (game.secret, history, turn.reply)


@pytest.fixture(scope="module")
def server(adapter):
    """vLLM's OpenAI-compatible server on the embedded model (float32, as the HF backend on CPU) with the
    adapter, on loopback. Started as a module: the ``vllm serve`` command of the CPU build looks for a
    package named vllm and stops (its package is vllm-cpu); on GPUs ``vllm serve`` is the same server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL_DIR)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"]
    command += ["--enable-lora", "--max-lora-rank", "16", "--lora-modules", f"adapter={adapter}"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                urllib.request.urlopen(url + "/health", timeout=2).close()
                break
            except OSError:
                time.sleep(1)
        else:
            proc.kill()
            pytest.fail(f"vllm serve did not start: {proc.communicate()[1][-2000:]}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_games_through_a_vllm_server_equal_the_hf_backends(server, adapter):
    _, adapter_dir, tokenizer, generation = load_generation_side("tiny", adapter)
    for served_adapter in (None, adapter_dir):
        engine = ServerEngine(server, generation, served_adapter)
        model, hf_tokenizer = load_for_inference("tiny", served_adapter, device="cpu")
        games = GAMES[:10]
        assert replies(evaluate_model(engine, tokenizer, games)) == replies(evaluate_model(model, hf_tokenizer, games))
        if served_adapter is not None:  # evaluate.py's start row: the server's base model, the adapter's start
            with without_adapter(engine) as start, without_adapter(model) as hf_start:
                assert replies(evaluate_model(start, tokenizer, games)) == replies(
                    evaluate_model(hf_start, hf_tokenizer, games)
                )
    with pytest.raises(ServerError, match="serves no LoRA adapter from"):
        ServerEngine(server, generation, MODEL_DIR)
    # As users type the URL, and the model checked against --model: other weights are refused in one line.
    as_typed = server.removeprefix("http://") + "/v1/"
    assert ServerEngine(as_typed, generation, model=("tiny", str(MODEL_DIR))).url == server
    with pytest.raises(ServerError, match=r"serves .*tinymodel/model, not --model Qwen/Qwen2\.5-0\.5B-Instruct"):
        ServerEngine(server, generation, model=("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"))
