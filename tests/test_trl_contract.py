"""Every private TRL name the project touches, checked against the installed TRL.

Game mode overrides or calls TRL internals that change between minor releases; pyproject.toml pins the
minor they were built on. Moving to the next TRL: raise the pin, run this file, and each failure names the
internal that changed and where the project uses it (README, "Moving to a new TRL").
"""

from __future__ import annotations

import inspect
import re
from importlib.metadata import requires

import pytest
import trl
from packaging.requirements import Requirement
from trl import GRPOTrainer
from trl.generation.vllm_generation import VLLMGeneration
from trl.models import utils as model_utils
from trl.trainer import utils as trainer_utils

# (owner, name, the parameters the project passes or overrides, where the project uses it)
CALLABLES = [
    (GRPOTrainer, "_generate_single_turn", ["prompt_ids", "images", "multimodal_fields", "num_generations"], "training/rollout.py PolicyPlayer"),
    (GRPOTrainer, "_tokenize_prompts", ["prompts"], "training/rollout.py PolicyPlayer"),
    (GRPOTrainer, "_prepare_inputs", ["generation_batch"], "training/trainer.py override"),
    (GRPOTrainer, "_get_per_token_logps_and_entropies", ["model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy", "compute_aux_loss"], "training/trainer.py override"),
    (GRPOTrainer, "_generate_and_score_completions", ["inputs"], "training/trainer.py override"),
    (GRPOTrainer, "_generate", ["prompts"], "training/trainer.py override: its first three outputs, the lengths of live turns; each row's own prompt"),
    (GRPOTrainer, "_get_train_sampler", ["dataset"], "training/trainer.py override"),
    (GRPOTrainer, "_log_metric", ["name", "value"], "training/rollout.py log_game_metrics"),
    (VLLMGeneration, "sync_weights", [], "training/rollout.py awake_for_the_step"),
    (VLLMGeneration, "generate", ["prompts", "images", "num_generations"], "through _generate_single_turn"),
    (trainer_utils, "RepeatSampler", ["data_source", "mini_repeat_count", "batch_size", "repeat_count", "shuffle", "seed"], "training/trainer.py sampler"),
    (trainer_utils, "split_tensor_dict", ["tensor_dict", "num_chunks"], "training/trainer.py _prepare_inputs"),
    (trainer_utils, "pad", ["tensors", "padding_value", "padding_side"], "training/rollout.py PolicyPlayer"),
    (model_utils, "unwrap_model_for_generation", ["model", "accelerator", "gather_deepspeed3_params", "generation_kwargs", "gradient_checkpointing_kwargs"], "training/rollout.py PolicyPlayer"),
]  # fmt: skip

# Attributes the project reads or sets on TRL's objects: (class, attribute, where)
ATTRIBUTES = [
    (GRPOTrainer, "_tokenizer", "training/rollout.py: its pad token"),
    (GRPOTrainer, "_step", "training/trainer.py _prepare_inputs: the micro-batch to hand out"),
    (GRPOTrainer, "_buffered_inputs", "training/trainer.py _prepare_inputs"),
    (
        GRPOTrainer,
        "_last_loaded_step",
        "training/rollout.py awake_for_the_step: TRL pushes weights before rollout_func",
    ),
    (GRPOTrainer, "rollout_func", "training/trainer.py: game mode's rollouts"),
    (GRPOTrainer, "vllm_generation", "training/rollout.py awake_for_the_step"),
    (GRPOTrainer, "eos_token_ids", "training/rollout.py"),
    (GRPOTrainer, "_metrics", "training/trainer.py _count_live_turns: the completion lengths it replaces"),
    (GRPOTrainer, "generation_kwargs", "training/rollout.py PolicyPlayer"),
    (GRPOTrainer, "num_iterations", "training/trainer.py"),
    (GRPOTrainer, "loss_type", "training/rollout.py: whether the micro-batches leave the placeholders out"),
    (GRPOTrainer, "shuffle_dataset", "training/trainer.py sampler"),
    (VLLMGeneration, "_llm_weights_sleeping", "training/rollout.py awake_for_the_step"),
    (VLLMGeneration, "enable_sleep_mode", "training/rollout.py awake_for_the_step"),
    (VLLMGeneration, "llm", "training/rollout.py awake_for_the_step"),
]


def _name(owner) -> str:
    return getattr(owner, "__qualname__", getattr(owner, "__name__", str(owner)))


@pytest.mark.parametrize(("owner", "name", "params", "where"), CALLABLES, ids=[c[1] for c in CALLABLES])
def test_each_private_trl_callable_keeps_its_parameters(owner, name, params, where):
    changed = f"TRL {trl.__version__} changed {_name(owner)}.{name} (used by {where})"
    assert hasattr(owner, name), f"{changed}: it is gone"
    have = list(inspect.signature(getattr(owner, name)).parameters)
    missing = [p for p in params if p not in have]
    assert not missing, f"{changed}: no parameter {', '.join(missing)} (it has {', '.join(have)})"


@pytest.mark.parametrize(("owner", "name", "where"), ATTRIBUTES, ids=[a[1] for a in ATTRIBUTES])
def test_each_trl_attribute_the_project_touches_is_still_set(owner, name, where):
    assigned = re.compile(rf"self\.{re.escape(name)}\s*(:[^=\n]+)?=[^=]")
    found = any(assigned.search(inspect.getsource(cls)) for cls in owner.__mro__ if cls.__module__.startswith("trl"))
    assert found, f"TRL {trl.__version__} no longer sets {owner.__name__}.{name} (used by {where})"


def test_trl_is_pinned_to_the_minor_installed():
    pin = next(Requirement(r) for r in requires("wordle-grpo") if Requirement(r).name == "trl")
    assert pin.specifier.contains(trl.__version__), f"TRL {trl.__version__} is outside the pin {pin}"
    major, minor = (int(p) for p in trl.__version__.split(".")[:2])
    assert not pin.specifier.contains(f"{major}.{minor + 1}.0"), f"{pin} lets the next TRL minor in untested"


def test_the_prompts_trl_generates_from_are_those_it_scores_and_logs():
    """training/trainer.py's _generate gives each row its own turn's prompt by filling the list TRL passed it: TRL
    must go on to hand that same list to the reward functions and the completions table."""
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for use in ("self._generate(prompts)", "self._calculate_rewards(inputs, prompts,", "gather_object(prompts)"):
        assert use in source, f"TRL {trl.__version__} changed _generate_and_score_completions: no {use}"
