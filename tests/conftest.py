import os
import tempfile

# Keep the pattern-matrix cache of a test run out of the user's cache directory. Set before any
# test imports wordle, so every test in the session shares one freshly built cache.
os.environ.setdefault("WORDLE_GRPO_CACHE_DIR", tempfile.mkdtemp(prefix="wordle-grpo-test-cache-"))

import importlib.util
import shutil
from pathlib import Path

import pytest

from tinymodel.stand_in import build_qwen_dir

# The cpu profile's `tiny:` section trains whole games with the main job's settings (profiles/cpu.yaml).
# Tests of the turn-mode machinery ask for turn mode and TRL's defaults for what that section sets.
TURN_MODE = ["--rollout", "turn", "--gradient_accumulation_steps", "1", "--temperature", "1.0"]
TURN_MODE += ["--beta", "0.0"]


@pytest.fixture(scope="session")
def qwen_dir(tmp_path_factory) -> Path:
    """A read-only random Qwen2 (tinymodel.stand_in: 2 layers, 64 wide) with the real tokenizer; copy it before
    writing next to it."""
    return build_qwen_dir(tmp_path_factory.mktemp("qwen") / "model")


# The SentencePiece family, offline: Mistral-7B v0.1's real tokenizer.model (32,000 pieces, Llama-2
# style: a leading space is "▁", byte fallback) from the mistral-common test dependency, found without
# importing the package, beside a small random-weight MistralForCausalLM. The tokenizer_config.json and
# chat template are what Mistral-7B-Instruct-v0.1 first shipped on the hub: its template has no system
# role and raises on one ("Conversation roles must alternate ..."), as Llama-2's, Gemma's and Mistral's
# first templates do.
MISTRAL_V01_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)
MISTRAL_TOKENIZER_CONFIG = {
    "tokenizer_class": "LlamaTokenizer",
    "add_bos_token": True,
    "add_eos_token": False,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "pad_token": None,
    "legacy": False,
    "clean_up_tokenization_spaces": False,
    "chat_template": MISTRAL_V01_TEMPLATE,
}
MISTRAL_VOCAB = 32_000


def mistral_tokenizer_model() -> Path:
    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError('mistral-common is not installed: pip install -e ".[test]"')
    return Path(spec.submodule_search_locations[0]) / "data" / "tokenizer.model.v1"


def build_mistral_dir(path: Path, *, seed: int = 0) -> Path:
    """A 2-layer, 64-wide random MistralForCausalLM (bf16) saved beside the real SentencePiece model, as
    the hub holds it: tokenizer.model, tokenizer.json and a tokenizer_config.json naming LlamaTokenizer.

    As the hub's tokenizer.json, it decodes "▁" as a space and drops the one that opens a decode: a
    token reads otherwise alone ("C") than inside a reply (" C")."""
    import json

    import torch
    from transformers import AutoTokenizer, MistralConfig, MistralForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(mistral_tokenizer_model(), path / "tokenizer.model")
    (path / "tokenizer_config.json").write_text(json.dumps(MISTRAL_TOKENIZER_CONFIG, indent=2))
    # Converted from the SentencePiece model as the tokenizer_config.json's LlamaTokenizer does, then saved as
    # the hub holds it: with tokenizer.json, which every later load reads.
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert len(tokenizer) == MISTRAL_VOCAB, len(tokenizer)
    tokenizer.save_pretrained(path)
    config = MistralConfig(
        vocab_size=MISTRAL_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        sliding_window=None,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    MistralForCausalLM(config).to(torch.bfloat16).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def mistral_dir(tmp_path_factory) -> Path:
    """A read-only random Mistral with the real SentencePiece tokenizer; copy it before writing next to it."""
    return build_mistral_dir(tmp_path_factory.mktemp("mistral") / "model")
