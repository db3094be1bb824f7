"""Memory before a run: a per-device estimate from ``config.json`` alone (``--dry-run`` prints it).
During a run, ``training.rollback`` watches for the swapping this estimate is there to prevent.

The estimate adds what a GRPO step holds at its fullest, in bytes, part by part:

- **runtime**: Python, torch, transformers and TRL themselves (CPU only, where the figure compared is
  the process's RSS; accelerator counters do not see them);
- **weights** at their dtype, or 4-bit (bitsandbytes NF4: half a byte per weight of every decoder
  linear, plus its absmax constants; embeddings and the LM head stay in the compute dtype);
- **reference model**: a second copy of the weights, when ``beta > 0`` without LoRA (with LoRA, TRL
  gets the reference by disabling the adapter);
- **trainable state**: LoRA parameters in fp32 with their gradients and optimizer states; in full
  fine-tuning, every weight's gradient and optimizer states in the weights' dtype (the weights are
  already counted);
- **activations**: what autograd keeps for one micro-batch of ``per_device_train_batch_size``
  sequences of prompt + completion tokens, per decoder layer (``_saved_per_token``), or with
  gradient checkpointing each layer's input plus one layer recomputed;
- **logits**: TRL 1.16 never materialises ``tokens × vocab``: its fused LM head scores tiles of at
  most 4096 tokens × 32768 vocabulary entries; without Triton (CPU, MPS) every position is scored and
  each tile is held in fp32 several times over (``_LOGIT_TILE_COPIES``, measured);
- **KV cache**: generation's keys and values for the whole per-device generation batch; with a
  colocated vLLM, its reservation instead (``vllm_gpu_memory_utilization`` of the GPU, held throughout,
  or only while generating in sleep mode).

Generation and the loss do not overlap, so the peak is the fixed parts plus the larger of the two
phases. The figures it is checked against are in docs/memory.md (``benchmarks/bench_memory.py``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from models.source import model_config
from runtime.device import memory_limit, rss_bytes
from settings.arguments import SLOTS
from settings.checks import VLLM_CPU_KV_DEFAULT, VLLM_CPU_KV_ENV
from settings.config import Resolved
from settings.errors import ConfigError
from wordle import MAX_GUESSES, history_for, render_prompt

logger = logging.getLogger(__name__)

GIB = 2**30  # every figure here is in GiB (2^30 bytes), and says so
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}
# bitsandbytes NF4: 4 bits per weight, one fp32 absmax per block of 64; double quantisation stores the
# absmax in 8 bits with one fp32 constant per 256 blocks.
_NF4_BYTES = 0.5 + 4 / 64
_NF4_DOUBLE_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
# Optimizer state bytes per trainable parameter (AdamW: two moments; the 8-bit ones: two bytes).
_OPTIMIZER_BYTES = {"adamw_8bit": 2, "paged_adamw_8bit": 2, "adamw_bnb_8bit": 2, "sgd": 0}
_FP32_ADAM = 8
# TRL's fused LM head (trl/kernels/chunked_logprob.py): tiles of at most this many tokens × vocabulary entries.
_TILE_TOKENS, _TILE_VOCAB = 4096, 32768
# Measured on CPU (torch ops, no Triton), peak RSS over the kernel for 1024-4096 tokens x 151,936: the
# forward holds 4 fp32 tiles (the tile, its transform, exponentials, comparisons), the backward 8.2.
_LOGIT_TILE_COPIES = 8.25
# With Triton (CUDA, ROCm) the kernel folds each tile in place and scores only the completion tokens;
# the tile in the compute dtype and its gradient. Not measured: no GPU was lent while this was written.
_LOGIT_TILE_COPIES_TRITON = 2


# Qwen2.5-3B-Instruct's config.json, the fields read here: the seeds' model, for previews without its weights, and the
# profiles' default, so that --dry-run gives its estimate where the hub cannot be reached.
QWEN2_5_3B_ID = "Qwen/Qwen2.5-3B-Instruct"
QWEN2_5_3B = {
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "num_hidden_layers": 36,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}


@dataclass(frozen=True)
class Shape:
    """The parts of a decoder-only config the estimate needs (Qwen2, Llama and alike)."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Shape:
        text = config.get("text_config", config)  # multimodal configs nest the language model's
        heads = text["num_attention_heads"]
        return cls(
            vocab=text["vocab_size"],
            hidden=text["hidden_size"],
            intermediate=text["intermediate_size"],
            layers=text["num_hidden_layers"],
            heads=heads,
            kv_heads=text.get("num_key_value_heads") or heads,
            head_dim=text.get("head_dim") or text["hidden_size"] // heads,
            tied=bool(text.get("tie_word_embeddings", False)),
        )

    def linears(self) -> dict[str, tuple[int, int]]:
        """Each decoder layer's projections, (in, out) features."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    def linear_params(self) -> int:
        return self.layers * sum(a * b for a, b in self.linears().values())

    def other_params(self) -> int:
        """Embeddings, the LM head if untied, the norms and the q/k/v biases (Qwen2 has them)."""
        kv = self.kv_heads * self.head_dim
        head = 0 if self.tied else self.vocab * self.hidden
        per_layer = 2 * self.hidden + self.heads * self.head_dim + 2 * kv
        return self.vocab * self.hidden + head + self.layers * per_layer + self.hidden

    def params(self) -> int:
        return self.linear_params() + self.other_params()


@dataclass(frozen=True)
class Run:
    """The resolved settings that move memory."""

    dtype: str = "float32"
    load_in_4bit: bool = False
    double_quant: bool = False
    lora_r: int | None = 16  # None: full fine-tuning
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    optim: str = "adamw_torch"
    beta: float = 0.0
    batch: int = 1  # sequences per micro-batch (per_device_train_batch_size)
    generation_batch: int = 8  # sequences generated at once on this device
    prompt_tokens: int = 300
    completion_tokens: int = 128
    checkpointing: bool = False
    triton: bool = False  # TRL's fused LM head runs Triton kernels (CUDA, ROCm)
    vllm_fraction: float = 0.0  # colocated vLLM's share of the GPU (vllm_gpu_memory_utilization), 0 without
    vllm_sleep: bool = False  # vllm_enable_sleep_mode: vLLM hands its memory back while the loss runs
    vllm_cpu_kv_gib: float = 0.0  # colocated vLLM on CPU: its KV cache (VLLM_CPU_KVCACHE_SPACE), not a share
    merged_copy: bool = False  # --merged_generation: the whole model once more, in the compute dtype


def _dtype_bytes(dtype: str) -> int:
    return _DTYPE_BYTES.get(dtype, 4)


def _saved_per_token(shape: Shape) -> int:
    """Elements autograd keeps per token per decoder layer (sdpa attention, LoRA or full training):
    the two RMSNorms' inputs and outputs (4h), q after RoPE (h), k and v repeated to every head
    (2h: with a padding mask, transformers does not use sdpa's grouped-query path), the attention
    output and o_proj's contiguous input (2h), gate, up, silu(gate) and their product (4i)."""
    return 9 * shape.heads * shape.head_dim + 4 * shape.intermediate


def estimate(shape: Shape, run: Run, runtime: int = 0, device_bytes: int | None = None) -> dict[str, int]:
    """The parts, in bytes (see the module docstring); :func:`peak` adds them up. ``device_bytes`` sizes a
    colocated vLLM's reservation (its weights and KV cache live inside it); unknown, it counts 0."""
    compute = _dtype_bytes(run.dtype)
    if run.load_in_4bit:
        per_weight = _NF4_DOUBLE_BYTES if run.double_quant else _NF4_BYTES
        weights = int(shape.linear_params() * per_weight) + shape.other_params() * compute
    else:
        weights = shape.params() * compute
    if run.lora_r is None:
        trainable = shape.params()
    else:
        linears = shape.linears()
        trainable = shape.layers * sum(run.lora_r * sum(linears[t]) for t in run.lora_targets if t in linears)
    optimizer = _OPTIMIZER_BYTES.get(run.optim)
    if run.lora_r is None:  # the weights train in place: a gradient and torch's AdamW moments in their dtype
        per_trainable = compute + (2 * compute if optimizer is None else optimizer)
    else:  # PEFT keeps adapters in fp32: the adapter, its gradient, two fp32 moments
        per_trainable = 4 + 4 + (_FP32_ADAM if optimizer is None else optimizer)
    tokens = run.batch * (run.prompt_tokens + run.completion_tokens)
    layer = tokens * _saved_per_token(shape) * compute
    if run.checkpointing:
        activations = shape.layers * tokens * shape.hidden * compute + layer
    else:
        activations = shape.layers * layer
    if run.triton:
        scored = run.batch * run.completion_tokens
        tile_bytes = compute * _LOGIT_TILE_COPIES_TRITON
    else:  # every position is scored, and the torch ops work in fp32
        scored, tile_bytes = tokens, 4 * _LOGIT_TILE_COPIES
    tile = min(scored, _TILE_TOKENS) * min(shape.vocab, _TILE_VOCAB)
    kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * compute
    return {
        "runtime": runtime,
        "weights": weights,
        "reference model": weights if run.beta > 0 and run.lora_r is None else 0,
        "merged copy": shape.params() * compute if run.merged_copy else 0,
        "trainable state": trainable * per_trainable,
        "activations": activations,
        "logits": int(tile * tile_bytes),
        "kv cache": 0 if run.vllm_fraction else run.generation_batch * (run.prompt_tokens + run.completion_tokens) * kv,
        "vllm": _vllm_bytes(shape, run, device_bytes),
    }


def _vllm_bytes(shape: Shape, run: Run, device_bytes: int | None) -> int:
    """A colocated vLLM: on a GPU its share of the device; on CPU its own bf16 copy of the weights (vLLM's
    CPU dtype) and the KV cache it is given."""
    if not run.vllm_fraction:
        return 0
    if run.vllm_cpu_kv_gib:
        return int(shape.params() * 2 + run.vllm_cpu_kv_gib * GIB)
    return int(run.vllm_fraction * device_bytes) if device_bytes else 0


def peak(parts: dict[str, int], vllm_sleeps: bool = False) -> int:
    """The fixed parts plus the fuller phase: the loss (activations, logits) or generation (KV cache). A colocated
    vLLM holds its reservation throughout, or, asleep while the loss runs (``vllm_sleeps``), only while generating."""
    fixed = parts["runtime"] + parts["weights"] + parts["reference model"] + parts["merged copy"]
    fixed += parts["trainable state"]
    loss = parts["activations"] + parts["logits"]
    if vllm_sleeps:
        return fixed + max(loss, parts["kv cache"] + parts["vllm"])
    return fixed + parts["vllm"] + max(loss, parts["kv cache"])


def report(shape: Shape, run: Run, device: str, runtime: int) -> dict[str, Any]:
    """What ``--dry-run`` prints under ``memory_estimate``: the peak, its parts (largest first), the limit."""
    limit = memory_limit(device)
    parts = estimate(shape, run, runtime, limit[0] if limit else None)
    total = peak(parts, run.vllm_sleep)
    generation = (
        f"{run.generation_batch} sequences generated at once" if run.generation_batch else "no generation (supervised)"
    )
    assumes = (
        f"{run.prompt_tokens} prompt + {run.completion_tokens} completion tokens, micro-batch {run.batch}, {generation}"
    )
    if run.vllm_cpu_kv_gib:
        assumes += f"; colocated vLLM holds a bf16 copy of the weights and a {run.vllm_cpu_kv_gib:g} GiB KV cache"
    elif run.vllm_fraction:
        assumes += f"; colocated vLLM reserves {run.vllm_fraction:g} of the GPU" + (
            ", released while the loss runs (sleep mode)" if run.vllm_sleep else ""
        )
        if limit is None:
            assumes += " (not counted: the GPU's size is unknown here)"
    out: dict[str, Any] = {
        "peak_gib": round(total / GIB, 2),
        "parts_gib": {k: round(v / GIB, 3) for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v},
        "assumes": assumes,
    }
    if limit is None:
        out["limit"] = f"{device} is absent here: no limit to compare"
    else:
        out["limit_gib"] = round(limit[0] / GIB, 2)
        out["limit_is"] = limit[1]
        if total > limit[0]:
            out["warning"] = (
                f"the estimated peak ({total / GIB:.1f} GiB) exceeds {limit[1]} ({limit[0] / GIB:.1f} GiB): expect swapping "
                "or out-of-memory; try --max-completion 96, fewer --num_generations, a smaller "
                "--per_device_train_batch_size, or --gradient_checkpointing true"
            )
    return out


def run_settings(resolved: Resolved, prompt_tokens: int) -> Run:
    """The :class:`Run` of a resolved configuration, per device: every process holds the same."""
    t, m, s = resolved.training, resolved.model, resolved.script
    common = {
        "dtype": str(m.dtype or "float32"),
        "load_in_4bit": bool(m.load_in_4bit),
        "double_quant": bool(m.use_bnb_nested_quant),
        "lora_r": m.lora_r if m.use_peft else None,
        "lora_targets": tuple(m.lora_target_modules or ()),
        "optim": str(getattr(t.optim, "value", t.optim)),
        "batch": t.per_device_train_batch_size,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": resolved.reply_budget,
        "checkpointing": bool(t.gradient_checkpointing),
        "triton": s.device in ("cuda", "rocm"),
    }
    if not resolved.stage.generates:  # a micro-batch of rows, each a prompt and a reply within the budget
        return Run(**{**common, "completion_tokens": min(resolved.reply_budget, SFT_REPLY_TOKENS)}, generation_batch=0)
    per_device_generation = t.per_device_train_batch_size * t.steps_per_generation
    # In game mode a generation batch is SLOTS turn slots per game, and the games' turns generate together.
    sequences = per_device_generation // SLOTS if s.rollout.plays_games else per_device_generation
    vllm_fraction = t.vllm_gpu_memory_utilization if t.use_vllm and t.vllm_mode == "colocate" else 0.0
    return Run(
        **common,
        beta=t.beta,
        generation_batch=max(sequences, 1),
        vllm_fraction=vllm_fraction,
        vllm_sleep=bool(t.vllm_enable_sleep_mode),
        # Only with a colocated vLLM: without one the estimate's note would name a vLLM the run does not start.
        vllm_cpu_kv_gib=float(os.environ.get(VLLM_CPU_KV_ENV, VLLM_CPU_KV_DEFAULT))
        if vllm_fraction and s.device == "cpu"
        else 0.0,
        merged_copy=s.merged_generation,
    )


# The teacher's richest reply, whatever the budget: 120 tokens at most under Qwen's tokenizer, end of turn included
# (20,000 rows, benchmarks/bench_sft_rows.py --budgets 256); a supervised row's reply never grows past it.
SFT_REPLY_TOKENS = 128

# The longest game prompt is 216 tokens with Qwen's BPE and 237 with Mistral's (and Llama-2's)
# SentencePiece, which spends three byte tokens on each ✓: without a tokenizer, assume a little more.
ASSUMED_PROMPT_TOKENS = 256


def longest_prompt_tokens(tokenizer) -> int:
    """Tokens of the longest prompt a game can reach: the last turn's, five guesses in, no two of which mark the same
    letter the same way in the same column (the embedded model's tokenizer keeps such a letter once)."""
    guesses = ["SOARE", "CLINK", "DUMPY", "FIGHT", "WHELK"][: MAX_GUESSES - 1]
    messages = render_prompt(history_for("BOXER", guesses))
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    return len(encoded["input_ids"])


def preflight(resolved: Resolved, source: str, tokenizer: Any = None, known: dict | None = None) -> dict[str, Any]:
    """The estimate for a resolved run from the model's config.json, and its tokenizer when there is one
    (else a prompt of ``ASSUMED_PROMPT_TOKENS``, said in ``assumes``): no weights are needed, so it
    answers before a download. ``unavailable`` says why there is no estimate. ``known``: the config of the
    profiles' default model as this project knows it (``QWEN2_5_3B``), where the hub cannot be reached."""
    remembered = source == QWEN2_5_3B_ID and known is not None
    try:
        config = known if remembered else model_config(source, resolved.model.model_revision)
    except ConfigError as err:
        return {"unavailable": str(err)}
    try:
        shape = Shape.from_config(config)
    except (KeyError, ValueError) as err:
        return {"unavailable": f"{source}'s config.json is not a decoder-only config the estimate knows ({err})"}
    prompt = ASSUMED_PROMPT_TOKENS if tokenizer is None else longest_prompt_tokens(tokenizer)
    runtime = rss_bytes() if resolved.script.device == "cpu" else 0
    result = report(shape, run_settings(resolved, prompt), resolved.script.device, runtime)
    if tokenizer is None:
        result["assumes"] += f" (no tokenizer in {source}: the prompt length is assumed)"
    if remembered:
        result["assumes"] += f"; {source}'s shape as this project knows it (the hub is out of reach)"
    return result
