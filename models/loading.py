"""Loading the tokenizer and model from where ``models.source`` found them, quantization, merging,
and the inference side (transformers or vLLM) that evaluation plays with.

Every failure a user can cause here becomes one ``ConfigError`` line that says what to do.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import zipfile
from pathlib import Path
from typing import Any

import torch
from jinja2.exceptions import TemplateError
from peft import PeftModel
from safetensors import SafetensorError, safe_open
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from trl import get_quantization_config

from models.source import HUB_NETWORK_ERRORS, model_source, read_config
from runtime import device as devices
from settings.checks import VLLM_CPU_KV_DEFAULT, VLLM_CPU_KV_ENV
from settings.config import Resolved
from settings.errors import ConfigError

logger = logging.getLogger(__name__)

_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "tokenizer.model")


# Put in front of a chat template that refuses a system message (Mistral v0.1, Llama-2, Gemma 1 and 2):
# the rules open the first user message instead, as the later templates of those families do
# themselves. A top-level Jinja ``set`` rebinds ``messages`` for the rest of the template, so the model's
# own template runs unchanged, and the tokenizer saved with the adapter renders as training did. A
# template that takes a system message and leaves it out (the embedded model's) is the model's choice.
FOLD_SYSTEM = (
    "{%- if messages and messages[0]['role'] == 'system' and messages | length > 1 -%}"
    "{%- set messages = [{'role': messages[1]['role'], 'content': messages[0]['content'] + '\\n\\n' + "
    "messages[1]['content']}] + messages[2:] -%}"
    "{%- endif -%}"
)
_PROBE = [{"role": "system", "content": "The rules."}, {"role": "user", "content": "Guess 1 of 6."}]


def refuses_system(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the chat template raises on a system message: asked by rendering one, not by reading the template."""
    try:
        tokenizer.apply_chat_template(_PROBE, tokenize=False, add_generation_prompt=True)
    except TemplateError:
        return True
    return False


def folds_system(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the rules go into the first user message (the template was given ``FOLD_SYSTEM``)."""
    template = tokenizer.chat_template
    return any(t.startswith(FOLD_SYSTEM) for t in (template.values() if isinstance(template, dict) else [template]))


def fold_system_if_refused(tokenizer: PreTrainedTokenizerBase, source: str) -> None:
    """Give a template that refuses a system message ``FOLD_SYSTEM``; ConfigError if it refuses even then."""
    if not refuses_system(tokenizer):
        return
    template = tokenizer.chat_template
    if isinstance(template, dict):  # named templates ("default", "tool_use"): each gets the same front
        tokenizer.chat_template = {name: FOLD_SYSTEM + t for name, t in template.items()}
    else:
        tokenizer.chat_template = FOLD_SYSTEM + template
    if refuses_system(tokenizer):
        raise ConfigError(
            f"the chat template of {source} fails on the game's prompt (a system message, then a user message), "
            "even with the system message folded into the user's; pass a chat model whose template takes a user turn"
        )
    logger.info("the chat template of %s has no system role: the rules open the first user message", source)


def find_tokenizer(source: str, resolved: Resolved) -> PreTrainedTokenizerBase | None:
    """``source``'s tokenizer, or None where it has none: a directory of config.json alone, or a hub id
    whose tokenizer files (a few MB, fetched without the weights) cannot be had."""
    if Path(source).is_dir() and not any((Path(source) / name).is_file() for name in _TOKENIZER_FILES):
        return None
    try:
        return load_tokenizer(source, resolved)
    except HUB_NETWORK_ERRORS:
        return None


def load_tokenizer(source: str, resolved: Resolved) -> PreTrainedTokenizerBase:
    return _tokenizer(source, resolved.model.model_revision, resolved.training.trust_remote_code)


def _tokenizer(source: str, revision: str | None, trust_remote_code: bool) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(
        source,
        revision=revision,
        trust_remote_code=trust_remote_code,
        padding_side="left",  # generation appends to the right of the prompt
    )
    if tokenizer.chat_template is None:
        raise ConfigError(f"the tokenizer of {source} has no chat template; GRPO here needs a chat (instruct) model")
    fold_system_if_refused(tokenizer, source)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def check_bitsandbytes(resolved: Resolved) -> None:
    """4-bit weights and 8-bit optimizers need bitsandbytes, which does not run on MPS."""
    optim = str(getattr(resolved.training.optim, "value", resolved.training.optim))
    needs = [
        what for what, on in (("4-bit quantization", resolved.quantized), (f"optimizer {optim}", "8bit" in optim)) if on
    ]
    if not needs:
        return
    what = f"{' and '.join(needs)} {'need' if len(needs) > 1 else 'needs'} bitsandbytes"
    if resolved.script.device == "mps":
        raise ConfigError(f"{what}, which does not run on MPS; pass --no-4bit")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(f"{what}, which is not installed; pip install bitsandbytes, or pass --no-4bit")


def keep_4bit_trainable_on_cpu(model: PreTrainedModel) -> None:
    """Stop bitsandbytes from repacking 4-bit weights into its CPU inference layout.

    On CPUs with AVX512-BF16 or AMX, the first eval-mode forward of a ``Linear4bit`` without grad
    (the evaluation before training) rewrites its weights into a layout that only inference reads:
    ``model.train()`` does not undo it, and the first backward then fails ("a view of a leaf Variable
    that requires grad is being used in an in-place operation"). Its inverse re-quantizes the
    scales from bf16, so the model trained would not be the model evaluated. A model that will
    train keeps the training layout, which evaluation reads through bitsandbytes' general kernel.
    """
    import bitsandbytes as bnb  # here: only 4-bit models need it, and it may not be installed

    for layer in model.modules():
        if isinstance(layer, bnb.nn.Linear4bit):
            layer.support_avx512bf16_for_cpu = False


def _device_map(resolved: Resolved) -> Any:
    if not resolved.quantized:
        return None  # the Trainer moves the model to its device
    # bitsandbytes quantizes as weights are placed, so they must go straight to the training device.
    return {"": torch.cuda.current_device()} if resolved.script.device in ("cuda", "rocm") else {"": "cpu"}


def load_model(source: str, resolved: Resolved) -> PreTrainedModel:
    """The model to train, quantized as the profile says (``check_bitsandbytes`` ran before anything slow)."""
    m, t = resolved.model, resolved.training
    kwargs = dict(t.model_init_kwargs or {})
    kwargs.update(
        revision=m.model_revision,
        dtype=m.dtype if m.dtype in (None, "auto") else getattr(torch, m.dtype),
        trust_remote_code=t.trust_remote_code,
        device_map=_device_map(resolved),
    )
    if m.attn_implementation is not None:
        kwargs["attn_implementation"] = m.attn_implementation
    quantization = get_quantization_config(m)
    if quantization is not None:
        kwargs["quantization_config"] = quantization
    model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    if m.load_in_4bit and resolved.script.device == "cpu":
        keep_4bit_trainable_on_cpu(model)
    logger.info(
        "loaded %s: %.1fM parameters, %s%s",
        source,
        sum(p.numel() for p in model.parameters()) / 1e6,
        m.dtype,
        f", {quantization.quant_method} {'4' if m.load_in_4bit else '8'}-bit" if quantization else "",
    )
    return model


def merge_adapter(source: str, adapter_dir: Path, out_dir: Path, resolved: Resolved) -> Path:
    """The adapter merged into an unquantized copy of the base: merging into 4-bit weights would lose it.

    Saved in the base checkpoint's own dtype (``--merge_dtype auto``), not the profile's compute
    dtype: a bf16 base trained in fp32 on CPU or MPS would otherwise come back twice its size.
    """
    dtype = resolved.script.merge_dtype
    base = AutoModelForCausalLM.from_pretrained(
        source,
        revision=resolved.model.model_revision,
        dtype="auto" if dtype == "auto" else getattr(torch, dtype),
        trust_remote_code=resolved.training.trust_remote_code,
    )
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(str(adapter_dir)).save_pretrained(out_dir)
    return out_dir


def load_for_inference(
    name: str,
    adapter: str | Path | None = None,
    *,
    device: str | None = None,
    dtype: str = "auto",
    revision: str | None = None,
    trust_remote_code: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A model (``tiny``, a local directory or a hub id), with a LoRA adapter if given, ready to generate.

    ``device`` defaults to the best one here (cuda, mps, then cpu); ``dtype`` "auto" is float32 on
    CPU and the checkpoint's own dtype elsewhere. The tokenizer is the adapter directory's when it
    holds one (``grpo_train.py`` saves it there), else the model's.
    """
    source = model_source(name)
    adapter_dir = checked_adapter_dir(adapter)
    if device is None:
        profile, _ = devices.detect()
        device = "cuda" if profile == "rocm" else profile  # torch's ROCm build calls its GPUs cuda
    if dtype == "auto":
        dtype = "float32" if device == "cpu" else "auto"
    tokenizer = _inference_tokenizer(source, adapter_dir, revision, trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(
        source,
        revision=revision,
        dtype=dtype if dtype == "auto" else getattr(torch, dtype),
        trust_remote_code=trust_remote_code,
    )
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, str(adapter_dir))
    model.to(device)
    model.eval()
    return model, tokenizer


def checked_adapter_dir(adapter: str | Path | None) -> Path | None:
    if adapter is None:
        return None
    adapter_dir = Path(adapter).expanduser()
    if not adapter_dir.is_dir():
        raise ConfigError(f"adapter directory {adapter_dir.resolve()} does not exist")
    if not (adapter_dir / "adapter_config.json").is_file():
        raise ConfigError(f"adapter directory {adapter_dir.resolve()} has no adapter_config.json (not a LoRA adapter)")
    read_config(adapter_dir / "adapter_config.json")
    for weights in sorted(adapter_dir.glob("adapter_model.*")):
        problem = damage(weights)
        if problem is not None:
            checkpoints = sorted(
                (c for c in adapter_dir.glob("checkpoint-*/adapter_model.safetensors") if damage(c) is None),
                key=lambda c: int(c.parent.name.split("-")[-1]) if c.parent.name.split("-")[-1].isdigit() else -1,
            )
            instead = f", or evaluate a checkpoint: --adapter {checkpoints[-1].parent}" if checkpoints else ""
            raise ConfigError(f"the adapter file {weights} is damaged ({problem}): restore it{instead}")
    return adapter_dir


def damage(path: Path) -> str | None:
    """Why a saved weights or state file cannot be read, found from its framing alone (cheap at any size), or None.
    A safetensors header must cover the whole file; torch's .pt, .pth and .bin files are zip archives whose
    directory sits at the end, which a truncated copy loses; JSON must parse."""
    try:
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt"):
                pass
        elif path.suffix in (".pt", ".pth", ".bin"):
            with zipfile.ZipFile(path):
                pass
        elif path.suffix == ".json":
            json.loads(path.read_text())
    except (SafetensorError, zipfile.BadZipFile, OSError, ValueError) as exc:  # each format's own kind
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def _inference_tokenizer(
    source: str, adapter_dir: Path | None, revision: str | None, trust_remote_code: bool
) -> PreTrainedTokenizerBase:
    """The adapter directory's tokenizer when it holds one (``grpo_train.py`` saves it there), else the model's."""
    has_tokenizer = adapter_dir is not None and (adapter_dir / "tokenizer_config.json").is_file()
    return _tokenizer(str(adapter_dir) if has_tokenizer else source, revision, trust_remote_code)


def load_generation_side(
    name: str, adapter: str | Path | None = None, *, revision: str | None = None, trust_remote_code: bool = False
) -> tuple[str, Path | None, PreTrainedTokenizerBase, GenerationConfig]:
    """What a generation backend needs besides the weights: the model's location, the adapter directory
    (checked), the tokenizer (as ``load_for_inference`` picks it) and the model's generation config."""
    source = model_source(name)
    adapter_dir = checked_adapter_dir(adapter)
    tokenizer = _inference_tokenizer(source, adapter_dir, revision, trust_remote_code)
    try:
        generation = GenerationConfig.from_pretrained(source, revision=revision, trust_remote_code=trust_remote_code)
    except OSError:  # no generation_config.json: transformers derives one from config.json
        generation = GenerationConfig.from_model_config(AutoConfig.from_pretrained(source, revision=revision))
    return source, adapter_dir, tokenizer, generation


def reloadable_vllm_cpu_weights() -> None:
    """Keep a colocated vLLM's weights on CPU where TRL's per-step sync can write them.

    After loading, vLLM's CPU build repacks each linear layer's weight for oneDNN (or for AMX kernels)
    and drops the parameter, so TRL's ``model.load_weights`` then fails with "'Parameter' object has no
    attribute 'weight_loader'" on CPUs where oneDNN builds its handle (and the lm_head's packed copy
    would go stale). The layers keep their plain weight and torch's linear instead: slower, and right
    after every sync. vLLM's own GPU path keeps its weights, and evaluation never syncs, so neither
    needs this. Must run before vLLM builds the model: both callers import the function when they
    process the loaded weights.
    """
    from vllm.model_executor.layers import utils  # here: vLLM is an optional dependency

    repack = utils.dispatch_cpu_unquantized_gemm
    if getattr(repack, "keeps_weights", False):
        return

    def keep(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.is_meta or layer.weight.ndim != 2:  # not a dense linear layer: vLLM's own handling
            return repack(layer, remove_weight)
        layer.cpu_linear = torch.nn.functional.linear

    keep.keeps_weights = True
    utils.dispatch_cpu_unquantized_gemm = keep


def load_vllm(
    source: str,
    adapter_dir: Path | None = None,
    *,
    seed: int = 0,
    revision: str | None = None,
    trust_remote_code: bool = False,
) -> tuple[Any, Any]:
    """``vllm.LLM`` on ``source`` (from ``load_generation_side``) and, for an adapter, vLLM's own ``LoRARequest``.

    On CPU it runs float32, as the HF backend does there (vLLM would pick bfloat16), so that greedy games
    can agree; elsewhere the checkpoint's dtype.
    """
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            '--backend vllm needs vLLM, which is not installed: pip install -e ".[vllm]" (CPU: docs/several-gpus.md)'
        )
    from vllm import LLM  # here: vLLM is an optional dependency
    from vllm.lora.request import LoRARequest

    gpu = torch.cuda.is_available()
    if not gpu:
        os.environ.setdefault(VLLM_CPU_KV_ENV, VLLM_CPU_KV_DEFAULT)  # else vLLM reserves a share of RAM
    kwargs: dict[str, Any] = {"dtype": "auto" if gpu else "float32", "seed": seed, "revision": revision}
    lora = None
    if adapter_dir is not None:
        rank = read_config(adapter_dir / "adapter_config.json")["r"]
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=rank)
        lora = LoRARequest("adapter", 1, str(adapter_dir.resolve()))
    return LLM(model=source, trust_remote_code=trust_remote_code, **kwargs), lora
