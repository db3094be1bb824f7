"""The memory preflight against hand-computed parts and real parameter counts, and the rollback advisor
on simulated steps. How the estimate compares with measured peaks is benchmarks/bench_memory.py's job."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

from models import memory
from models.memory import GIB, QWEN2_5_3B, Run, Shape, estimate, peak
from training.rollback import RollbackAdvisor

SMALL = Shape(vocab=1000, hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, tied=True)


def test_small_shape_parts_by_hand():
    # per layer: q 64x64, k and v 64x32, o 64x64, gate/up 64x128, down 128x64 = 36,864 weights;
    # embeddings 64,000; per layer 2 norms (128) and q/k/v biases (64 + 32 + 32); the final norm 64
    assert SMALL.linear_params() == 2 * 36_864
    assert SMALL.other_params() == 64_000 + 2 * 256 + 64
    run = Run(dtype="float32", lora_r=4, batch=2, generation_batch=3, prompt_tokens=10, completion_tokens=6)
    parts = estimate(SMALL, run, runtime=100)
    assert parts["runtime"] == 100
    assert parts["weights"] == (2 * 36_864 + 64_576) * 4
    assert parts["reference model"] == 0  # LoRA: the reference is the adapter switched off
    # LoRA r4 on the 7 projections: 4 x (in + out) each, per layer; fp32 weight, gradient, two AdamW moments
    lora = 2 * 4 * (128 + 96 + 96 + 128 + 192 + 192 + 192)
    assert parts["trainable state"] == lora * 16
    tokens = 2 * 16
    assert parts["activations"] == 2 * tokens * (9 * 64 + 4 * 128) * 4
    assert parts["logits"] == int(tokens * 1000 * 4 * memory._LOGIT_TILE_COPIES)
    assert parts["kv cache"] == 3 * 16 * 2 * 2 * 32 * 4
    assert peak(parts) == 100 + parts["weights"] + lora * 16 + parts["activations"] + parts["logits"]


def test_triton_scores_completion_tokens_only():
    run = Run(dtype="bfloat16", batch=2, prompt_tokens=10, completion_tokens=6, triton=True)
    assert estimate(SMALL, run)["logits"] == 2 * 6 * 1000 * 2 * memory._LOGIT_TILE_COPIES_TRITON


def test_checkpointing_keeps_layer_inputs_and_one_layer():
    run = Run(batch=1, prompt_tokens=100, completion_tokens=28)
    full = estimate(SMALL, run)["activations"]
    checkpointed = estimate(SMALL, Run(batch=1, prompt_tokens=100, completion_tokens=28, checkpointing=True))
    assert checkpointed["activations"] == 2 * 128 * 64 * 4 + full // 2


def test_full_fine_tuning_with_kl_holds_a_reference_copy():
    parts = estimate(SMALL, Run(lora_r=None, beta=0.04))
    assert parts["reference model"] == parts["weights"]
    assert parts["trainable state"] == SMALL.params() * 12  # fp32 gradient and two AdamW moments


def test_four_bit_quantises_the_decoder_linears_only():
    parts = estimate(SMALL, Run(dtype="bfloat16", load_in_4bit=True, double_quant=False))
    assert parts["weights"] == int(SMALL.linear_params() * (0.5 + 4 / 64)) + SMALL.other_params() * 2


def test_merged_generation_holds_the_whole_model_again_in_the_compute_dtype():
    plain = estimate(SMALL, Run(dtype="bfloat16", load_in_4bit=True))
    parts = estimate(SMALL, Run(dtype="bfloat16", load_in_4bit=True, merged_copy=True))
    assert plain["merged copy"] == 0
    assert parts["merged copy"] == SMALL.params() * 2  # dequantised: bf16, not 4-bit
    assert peak(parts) - peak(plain) == SMALL.params() * 2


@pytest.mark.parametrize("tied", [True, False])
def test_parameter_count_matches_transformers(tied):
    config = Qwen2Config(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )
    shape = Shape.from_config(config.to_dict())
    model = Qwen2ForCausalLM(config)
    assert shape.params() == model.num_parameters()
    targets = ("v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    lora = get_peft_model(model, LoraConfig(r=8, target_modules=list(targets)))
    trainable, _ = lora.get_nb_trainable_parameters()
    assert estimate(shape, Run(lora_r=8, lora_targets=targets))["trainable state"] == trainable * 16


def test_qwen_3b_shape():
    shape = Shape.from_config(QWEN2_5_3B)
    assert 3.0e9 < shape.params() < 3.1e9  # Qwen2.5-3B: 3.09B parameters
    # the mps profile: fp32, LoRA r16, one 128-token completion per micro-batch, checkpointing
    mps = estimate(shape, Run(batch=1, generation_batch=2, prompt_tokens=300, checkpointing=True))
    assert 11.4 * GIB < mps["weights"] < 11.6 * GIB  # 4 bytes each
    assert peak(mps) < 16 * GIB  # the seeds' 16-20 GIB is the whole Mac's use, beside the OS and the apps
    # the cuda profile's QLoRA: NF4 with double quantisation, bf16 embeddings
    cuda = estimate(shape, Run(dtype="bfloat16", load_in_4bit=True, double_quant=True, optim="paged_adamw_8bit"))
    assert 1.9 * GIB < cuda["weights"] < 2.1 * GIB


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _advisor(clock, **kw):
    settings = {
        "max_completion_length": 128,
        "num_generations": 4,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "output_dir": "outputs/mps",
        "limit_bytes": 16 * GIB,
        "clock": clock,
    }
    return RollbackAdvisor(**{**settings, **kw})


class _State:
    global_step = 0


def _steps(advisor, clock, seconds, state=None):
    state = state or _State()
    for s in seconds:
        state.global_step += 1
        advisor.on_step_begin(None, state, None)
        clock.now += s
        advisor.on_step_end(None, state, None)


def test_advisor_logs_the_seed_rollback_once_on_a_slow_step(caplog):
    clock = FakeClock()
    advisor, state = _advisor(clock), _State()
    with caplog.at_level(logging.WARNING, logger="training.rollback"):
        _steps(advisor, clock, [9.0, 1.0, 1.2, 0.9, 1.1, 1.0, 1.05, 2.5], state)  # the first step compiles: left out
        assert advisor.advice is None
        _steps(advisor, clock, [226.0, 300.0], state)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "step 9 took 226 s" in message
    # the seed's order: completion length, then generations, then batch (same completions per step)
    assert message.index("--max-completion 96 --resume") < message.index("--num_generations 2 --resume")
    assert message.index("--num_generations 2") < message.index(
        "--per_device_train_batch_size 1 --gradient_accumulation_steps 4 --resume"
    )
    assert "outputs/mps" in message


def test_advisor_skips_rungs_already_taken_and_watches_memory():
    clock = FakeClock()
    used = {"bytes": 1 * GIB}
    advisor = _advisor(
        clock, max_completion_length=96, num_generations=2, memory_bytes=lambda: used["bytes"], limit_bytes=16 * GIB
    )
    _steps(advisor, clock, [1.0, 1.0])
    assert advisor.advice is None
    used["bytes"] = 15 * GIB  # past 90% of 16 GIB
    _steps(advisor, clock, [1.0])
    assert advisor.advice.startswith("memory at 15.0 GiB of 16.0 GiB")
    assert advisor.advice.endswith("--per_device_train_batch_size 1 --gradient_accumulation_steps 4 --resume")


def test_advisor_with_nothing_left_to_roll_back():
    clock = FakeClock()
    advisor = _advisor(clock, max_completion_length=64, num_generations=2, per_device_train_batch_size=1)
    _steps(advisor, clock, [1.0] * 7 + [50.0])
    assert "every rollback is already taken" in advisor.advice


def test_dry_run_prints_the_estimate_for_the_embedded_model(capsys):
    import grpo_train

    assert grpo_train.main(["--profile", "cpu", "--dry-run"]) in (0, None)
    out = capsys.readouterr().out
    assert "memory_estimate:" in out
    assert "45 prompt + 16 completion tokens, micro-batch 8" in out  # five past guesses, unspelled (recipe 12)
    assert "limit_is: system RAM" in out


def test_colocated_vllm_reserves_its_share_awake_or_only_while_generating():
    awake = estimate(SMALL, Run(vllm_fraction=0.25), device_bytes=16 * GIB)
    assert awake["vllm"] == 4 * GIB and awake["kv cache"] == 0  # vLLM's KV cache lives inside its reservation
    fixed = awake["runtime"] + awake["weights"] + awake["trainable state"]
    assert peak(awake) == fixed + 4 * GIB + awake["activations"] + awake["logits"]
    asleep = estimate(SMALL, Run(vllm_fraction=0.25, vllm_sleep=True), device_bytes=16 * GIB)
    # the loss runs while vLLM sleeps, and needs less than its 4 GIB
    assert peak(asleep, vllm_sleeps=True) == fixed + 4 * GIB


@pytest.mark.parametrize(("config", "mode"), [("colocate", "colocate"), ("server", "server")])
def test_shipped_vllm_configs_resolve_on_the_cuda_profile(config, mode):
    from settings.config import resolve

    path = Path(__file__).resolve().parents[1] / "configs" / "vllm" / f"{config}.yaml"
    resolved = resolve(["--profile", "cuda", "--config", str(path), "--dry-run"])
    t = resolved.training
    assert t.use_vllm and t.vllm_mode == mode
    run = memory.run_settings(resolved, prompt_tokens=216)
    assert run.vllm_fraction == (0.35 if mode == "colocate" else 0.0) and run.vllm_sleep == (mode == "colocate")


def test_colocated_vllm_on_cpu_counts_its_kv_cache_and_weight_copy_not_a_share_of_ram(monkeypatch):
    from settings.config import resolve

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    path = Path(__file__).resolve().parents[1] / "configs" / "vllm" / "colocate.yaml"
    run = memory.run_settings(resolve(["--profile", "cpu", "--config", str(path), "--dry-run"]), prompt_tokens=216)
    assert run.vllm_cpu_kv_gib == 2.0
    shape = Shape.from_config(QWEN2_5_3B)
    parts = estimate(shape, run, device_bytes=64 * GIB)
    assert parts["vllm"] == shape.params() * 2 + 2 * GIB  # not 0.35 x 64 GIB of RAM
    assert parts["kv cache"] == 0  # vLLM's KV cache is inside its part


def test_a_cpu_run_without_vllm_counts_and_names_no_vllm():
    from settings.config import resolve

    run = memory.run_settings(resolve(["--profile", "cpu", "--dry-run"]), prompt_tokens=68)
    assert run.vllm_fraction == 0.0 and run.vllm_cpu_kv_gib == 0.0
    out = memory.report(Shape.from_config(QWEN2_5_3B), run, "cpu", runtime=0)
    assert "vLLM" not in out["assumes"] and "vllm" not in out["parts_gib"]
