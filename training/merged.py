"""Generation from a merged copy of the policy (``--merged_generation true``).

With a LoRA, every projection of a decoding step runs twice more: the base matrix, then the adapter's two small ones,
and with 4-bit weights a dequantisation first. Where a decoding step costs what launching its modules costs (a GPU
waiting on its host, the 3B shape), that is most of the trainer's generation time (docs/speed.md). The copy is a plain
model of the base architecture in the compute dtype, each adapted projection holding ``base + scaling * B @ A``: one
matrix, one kernel. It is refreshed from the unchanged base and the current adapter once per optimizer step, so no
rounding accumulates (PEFT's ``merge_adapter``/``unmerge_adapter`` in place would change the base a rounding at a
time, and cannot be done to 4-bit weights at all). It samples without the adapter's dropout, as vLLM does.

Its cost is memory: the whole model once more in the compute dtype (6.2 GB for a 3B in bf16); ``models.memory``
counts it.
"""

from __future__ import annotations

import copy

import torch
from peft.tuners.lora import LoraLayer
from peft.utils import ModulesToSaveWrapper
from peft.utils.integrations import dequantize_module_weight
from transformers import AutoModelForCausalLM, PreTrainedModel


def _source_of(module: torch.nn.Module, adapter: str) -> torch.nn.Module:
    """The module whose own weights a copy's module takes (a saved module's trained copy, else itself)."""
    if not isinstance(module, ModulesToSaveWrapper):
        return module
    if adapter in module.modules_to_save:
        return module.modules_to_save[adapter]
    return module.original_module


def _dequantized(module: torch.nn.Module) -> torch.Tensor:
    """``module``'s weight, dequantised where it is quantised."""
    weight = module.weight
    if getattr(getattr(weight, "quant_state", None), "packing_format_for_cpu", False):
        # On a CPU with AVX512-BF16, bitsandbytes repacks 4-bit weights for inference at their first eval-mode forward
        # (the games before training), in a layout its dequantisation misreads, and which its inverse (0.50.2) does not
        # restore where a layer is wider in than out (down_proj). The weights are read as its forward reads them:
        # the identity through its 4-bit product (each output one weight times 1; within 2.4e-4 of the unpacked).
        import bitsandbytes as bnb

        eye = torch.eye(module.in_features, dtype=module.compute_dtype or torch.float32, device=weight.device)
        return bnb.matmul_4bit(eye, weight, quant_state=weight.quant_state).T
    return dequantize_module_weight(module)


class MergedCopy:
    """A plain copy of a PEFT model's base architecture, weights merged with the adapter (see the module docstring).

    ``refresh()`` rewrites the weights that training moves: each adapted projection from its base and the adapter, and
    every trainable tensor outside the adapter (``modules_to_save``). The rest is copied once.
    """

    def __init__(self, peft_model: torch.nn.Module, dtype: torch.dtype) -> None:
        self.adapter = peft_model.active_adapter
        base: PreTrainedModel = peft_model.get_base_model()
        config = copy.deepcopy(base.config)
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # the copy is plain: its weights are dequantised
        device = next(p.device for p in peft_model.parameters())
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        model.to_empty(device=device)
        model.requires_grad_(False)
        model.eval()
        model.generation_config = base.generation_config
        self.model = model
        # Each of the copy's modules that holds tensors of its own, beside the module of the PEFT model it mirrors.
        self.pairs = [
            (m, _source_of(base.get_submodule(name), self.adapter))
            for name, m in model.named_modules()
            if [*m.parameters(recurse=False), *m.buffers(recurse=False)]
        ]
        self.adapted = [(m, source) for m, source in self.pairs if isinstance(source, LoraLayer)]
        with torch.no_grad():
            for mine, source in self.pairs:
                self._copy(mine, source)
        self.model.tie_weights()
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Rewrite what training moves: the adapted projections, and the trainable tensors outside the adapter."""
        for mine, source in self.adapted:
            weight = _dequantized(source.get_base_layer()).to(torch.float32)
            if self.adapter in source.lora_A and not source.disable_adapters and not source.merged:
                weight = weight + source.get_delta_weight(self.adapter).to(torch.float32)
            mine.weight.copy_(weight)
        for mine, source in self.pairs:
            if not isinstance(source, LoraLayer) and any(p.requires_grad for p in source.parameters(recurse=False)):
                self._copy(mine, source)

    def _copy(self, mine: torch.nn.Module, source: torch.nn.Module) -> None:
        """``mine``'s own tensors from ``source``'s of the same names (a LoRA layer's are its base layer's)."""
        if isinstance(source, LoraLayer):
            source = source.get_base_layer()
        for name, tensor in [*mine.named_parameters(recurse=False), *mine.named_buffers(recurse=False)]:
            value = _dequantized(source) if name == "weight" else getattr(source, name)
            tensor.copy_(value.to(tensor.dtype))
