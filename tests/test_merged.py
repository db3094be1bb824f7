"""``--merged_generation``: the merged copy computes what the PEFT model computes, follows every optimizer step, and is
what generates in a real run, in turn mode and in game mode."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from conftest import TURN_MODE
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from trl import GRPOTrainer

import grpo_train
from settings.config import resolve
from tinymodel import MODEL_DIR
from training import merged as merged_module
from training.merged import MergedCopy

EMBEDDED_TARGETS = ["v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # the cpu profile's: q and k stay base
EVERY_PROJECTION = ["q_proj", "k_proj", *EMBEDDED_TARGETS]


def embedded(**lora) -> torch.nn.Module:
    base = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32)
    return get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=EMBEDDED_TARGETS, **lora))


def four_bit(model_dir: Path) -> torch.nn.Module:
    quantization = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
    )
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, quantization_config=quantization)
    return get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=EVERY_PROJECTION))


@torch.no_grad()
def train_a_step(model: torch.nn.Module, seed: int) -> None:
    """What an optimizer step does to the weights that train: every trainable tensor moves."""
    generator = torch.Generator().manual_seed(seed)
    for param in model.parameters():
        if param.requires_grad:
            noise = torch.randn(param.shape, generator=generator) * 0.05
            param.add_(noise.to(param.dtype))


@torch.no_grad()
def logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    model.eval()
    return model(ids).logits.float()


def bnb_repacks(monkeypatch: pytest.MonkeyPatch, repacks: bool) -> None:
    """Decide for the 4-bit layers built next whether bitsandbytes repacks their weights for CPU inference at their
    first eval-mode forward, which it does where the CPU has AVX512-BF16, into a layout its own dequantisation
    misreads."""
    import bitsandbytes as bnb

    monkeypatch.setattr(bnb.nn.modules, "has_avx512bf16", lambda: repacks)


def cpu_has_avx512bf16() -> bool:
    from bitsandbytes.functional import has_avx512bf16

    return bool(has_avx512bf16())


def four_bit_as_on(repacks: bool):
    def make(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> torch.nn.Module:
        bnb_repacks(monkeypatch, repacks)
        return four_bit(model_dir)

    return make


# The repacked layout runs only through bitsandbytes' AVX512-BF16 kernels: forced on a CPU without them (an AVX2-only
# EPYC), its products are garbage whatever the copy does, so that case runs only where the CPU has the instructions.
NEEDS_AVX512BF16 = pytest.mark.skipif(
    not cpu_has_avx512bf16(),
    reason="bitsandbytes repacks 4-bit weights only on CPUs with AVX512-BF16, and this one has none",
)

# (the PEFT model, the copy's dtype, the tolerance relative to the largest logit, whether bitsandbytes repacked)
# The copy holds base + delta rounded to bf16 once; the 4-bit forward adds the LoRA's fp32 output to bf16.
CASES = [
    pytest.param(lambda *_: embedded(), torch.float32, 1e-5, None, id="fp32, the embedded model"),
    pytest.param(
        lambda *_: embedded(modules_to_save=["lm_head"]), torch.float32, 1e-5, None, id="fp32, a trained lm_head"
    ),
    # What bitsandbytes does on this CPU, whichever it is: the production path.
    pytest.param(lambda path, _: four_bit(path), torch.bfloat16, 2e-2, None, id="4-bit NF4, as this CPU runs it"),
    # What an AVX2-only CPU runs, on any CPU: the weights stay in bitsandbytes' plain layout.
    pytest.param(four_bit_as_on(False), torch.bfloat16, 2e-2, False, id="4-bit NF4, unpacked as without AVX512-BF16"),
    pytest.param(four_bit_as_on(True), torch.bfloat16, 2e-2, True, id="4-bit NF4, repacked", marks=NEEDS_AVX512BF16),
]


@pytest.mark.parametrize(("make", "dtype", "tolerance", "packed"), CASES)
def test_the_copy_computes_what_the_peft_model_does_and_follows_each_step(
    qwen_dir, monkeypatch, make, dtype, tolerance, packed
):
    torch.manual_seed(0)
    model = make(qwen_dir, monkeypatch)
    train_a_step(model, seed=1)  # LoRA's B starts at zero: moved, the adapter changes what the model computes
    ids = torch.randint(3, 1000, (2, 24))
    copy = MergedCopy(model, dtype)
    assert not any(isinstance(m, torch.nn.Linear) and "lora" in n for n, m in copy.model.named_modules())
    assert all(type(m.weight).__name__ == "Parameter" for m in copy.model.modules() if isinstance(m, torch.nn.Linear))
    assert next(copy.model.parameters()).dtype == dtype
    scale = logits(model, ids).abs().max()
    torch.testing.assert_close(logits(copy.model, ids), logits(model, ids), rtol=0, atol=float(tolerance * scale))

    train_a_step(model, seed=2)
    stale = (logits(copy.model, ids) - logits(model, ids)).abs().max()
    assert stale > 10 * tolerance * scale, "the step changed nothing the copy computes: the test would prove nothing"
    copy.refresh()
    torch.testing.assert_close(logits(copy.model, ids), logits(model, ids), rtol=0, atol=float(tolerance * scale))
    if packed is not None:  # the refresh read the layout the case names
        assert packed == any(
            getattr(getattr(p, "quant_state", None), "packing_format_for_cpu", False) for p in model.parameters()
        )


def test_the_copy_is_refreshed_from_the_unchanged_base_not_from_itself():
    """Refreshing twice gives the same weights: nothing accumulates (an in-place merge and unmerge would)."""
    torch.manual_seed(0)
    model = embedded()
    train_a_step(model, seed=1)
    copy = MergedCopy(model, torch.float32)
    first = {name: p.clone() for name, p in copy.model.named_parameters()}
    copy.refresh()
    for name, param in copy.model.named_parameters():
        torch.testing.assert_close(param, first[name], rtol=0, atol=0, msg=name)


def test_trls_hf_generation_calls_generate_on_model_wrapped():
    """WordleGRPOTrainer.generating() stands the copy in for ``model_wrapped``, which TRL's HF path unwraps; a TRL that
    read another attribute would quietly generate from the unmerged model."""
    source = inspect.getsource(GRPOTrainer._generate_single_turn)
    assert source.count("unwrap_model_for_generation(\n                    self.model_wrapped,") == 2


QUICK = ["--profile", "cpu", "--train_rows", "16", "--max_steps", "2", "--save_steps", "100", "--seed", "3"]
QUICK += ["--disable_tqdm", "true", "--skip_eval", "true"]
MODES = {
    "turn mode": [*TURN_MODE, "--per_device_train_batch_size", "8", "--num_generations", "4"],
    "game mode": ["--gradient_accumulation_steps", "6"],  # the profile's game mode: 4 games of 6 turn slots a step
}


@pytest.mark.parametrize("mode", MODES)
def test_a_run_generates_from_the_copy_refreshed_once_a_step_and_learns_as_without_it(tmp_path, monkeypatch, mode):
    seen = {"refreshes": 0, "forwards": 0}
    refresh, init = MergedCopy.refresh, MergedCopy.__init__

    def counted_refresh(self):
        seen["refreshes"] += 1
        refresh(self)

    def watched_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.model.register_forward_hook(lambda *_: seen.__setitem__("forwards", seen["forwards"] + 1))

    def train(out: str, *extra: str):
        return grpo_train.train(resolve([*QUICK, *MODES[mode], "--output_dir", str(tmp_path / out), *extra]))

    plain = train("plain")
    monkeypatch.setattr(merged_module.MergedCopy, "refresh", counted_refresh)
    monkeypatch.setattr(merged_module.MergedCopy, "__init__", watched_init)
    merged = train("merged", "--merged_generation", "true")
    assert seen["forwards"] > 0, "the copy never generated"
    # Once when built, then once for each step's generation: the weights change only at an optimizer step.
    assert seen["refreshes"] == 1 + 2
    assert merged.model_wrapped is not merged.merged.model  # the policy is back where TRL trains it
    # In fp32 the copy's logits are the PEFT model's to a rounding: the same samples, so the same updates.
    trained = {n: p for n, p in merged.model.named_parameters() if p.requires_grad}
    for name, param in plain.model.named_parameters():
        if param.requires_grad:
            torch.testing.assert_close(trained[name], param, rtol=1e-4, atol=1e-6, msg=name)
    assert any(p.abs().sum() > 0 for n, p in trained.items() if "lora_B" in n)


def test_a_4bit_run_generates_from_a_copy_in_the_compute_dtype(tmp_path):
    argv = [*QUICK, *MODES["game mode"], "--load_in_4bit", "true", "--merged_generation", "true"]
    trainer = grpo_train.train(resolve([*argv, "--output_dir", str(tmp_path / "out")]))
    linears = [m for m in trainer.merged.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(type(m.weight).__name__ == "Parameter" for m in linears)  # no Params4bit: dequantised
    assert {p.dtype for p in trainer.merged.model.parameters()} == {trainer.model.get_input_embeddings().weight.dtype}
    assert trainer._merged_step == 1  # refreshed for the second step's games
    assert any(p.abs().sum() > 0 for n, p in trainer.model.named_parameters() if "lora_B" in n)
