"""Would attention heads of their own for the past-guess tokens stop the repeats? Graft them onto a built model.

    python benchmarks/probe_past_guess_heads.py --out /tmp/added --strength 0.01             # 8 heads added
    python benchmarks/probe_past_guess_heads.py --out /tmp/given --strength 0.02 --given 2   # 2 of the 8 given up
    python evaluate.py --model /tmp/added --split val --no_baselines                         # the start's games

In layer 0 every head averages the whole prompt (zero queries and keys: tinymodel.bag.wire_guess_bag), so a
past guess's ``⟦W⟧`` token, which says "not W", is one token of some 100 late in a game; a stronger row does
nothing (the input RMSNorm divides it out) and a second copy takes its share from every letter constraint
(docs/research-log.md, e50, e51). The grafted heads average the ``⟦W⟧`` tokens alone, at ``<guess>``:

- keys: a least-squares direction of layer 0's normalised input rows that scores the past-guess tokens (and
  ``<|user|>``, meant as somewhere to look before any past guess, though the fit leaves it at 0.07) 1 and the
  other prompt tokens 0; queries: one that scores ``<guess>`` 1 and every other token 0
  (the ``<guess>`` row weighted 100). Both sit in each head's slowest rotary pair, whose rotation over the
  512-token context stays under 0.1 radian, so the score does not depend on position; ``--sharpness`` scales it;
- ``--added N`` (the default, 8): N heads appended to every layer (head_dim kept, so the attention is wider
  than the hidden size; zero in layers 1-3). Their values are layer 0's own and their output ``--strength``
  times layer 0's: the full-rank "not W". vLLM's Qwen2 (0.31) derives the head width from the hidden size and
  cannot load such a model;
- ``--llama``: the grafted model saved in Llama's shape (``attention_bias`` puts biases on q, k, v and o; o's
  are zero, so it is the same Qwen2): vLLM's Llama honours ``head_dim``, so the added heads load there too
  (research log, e56: the same logits in transformers, the same greedy replies in vLLM 0.31 on CPU);
- ``--given N``: the last N of the 8 heads taken from the mean instead (the model keeps its shape). Their
  values are the past-guess rows' top principal directions, their output ``--strength`` times what layer 0
  does to the mean.

Then GRPO on it: copy ``config.json`` and ``model.safetensors`` into a clone's ``tinymodel/model`` and run the
main job there (research log, e55). Nothing here asserts; the figures are the evaluation's.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tinymodel import MODEL_DIR
from tinymodel.tokenizer import USER, WORDS, past_guess_ids


def _ridge(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The weighted ridge least-squares solution of ``x @ solution ~ y`` (ridge 1e-3)."""
    a = x * weight.sqrt()[:, None]
    return torch.linalg.solve(a.T @ a + 1e-3 * torch.eye(x.shape[1]), a.T @ (y * weight.sqrt()))


def _least_squares(rows: torch.Tensor, ones: torch.Tensor, zeros: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A direction and bias scoring ``rows[ones]`` 1 and ``rows[zeros]`` 0, each class weighted alike however
    many rows it has."""
    x = torch.cat([rows[ones], rows[zeros]])
    x = torch.cat([x, torch.ones(len(x), 1)], 1)
    y = torch.cat([torch.ones(int(ones.sum())), torch.zeros(int(zeros.sum()))])
    solution = _ridge(x, y, torch.where(y > 0, 1.0 / ones.sum(), 1.0 / zeros.sum()))
    return solution[:-1], solution[-1]


def _query_direction(rows: torch.Tensor, target: int) -> torch.Tensor:
    """A direction scoring ``rows[target]`` 1 and every other row 0, the target weighted 100 (no bias)."""
    y = torch.zeros(len(rows))
    y[target] = 1.0
    weight = torch.ones(len(rows))
    weight[target] = 100.0
    return _ridge(rows, y, weight)


def _widened(model: Qwen2ForCausalLM, added: int) -> Qwen2ForCausalLM:
    """The same model with ``added`` zero heads appended to every layer (head_dim kept): it computes the same."""
    config = model.config.to_dict()
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    heads = model.config.num_attention_heads + added
    config.update(num_attention_heads=heads, num_key_value_heads=heads, head_dim=head_dim)
    for key in ("architectures", "transformers_version", "model_type"):
        config.pop(key, None)
    wide = Qwen2ForCausalLM(Qwen2Config(**config))
    state = wide.state_dict()
    for name, old in model.state_dict().items():
        new = torch.zeros_like(state[name])
        if "o_proj" in name:
            new[:, : old.shape[1]] = old
        else:
            new[: old.shape[0]] = old
        state[name] = new
    wide.load_state_dict(state)
    wide.generation_config = model.generation_config
    return wide


# Qwen2's sliding-window settings (unused by this model), which Llama's config does not take.
_QWEN2_ONLY = ("layer_types", "max_window_layers", "sliding_window", "use_sliding_window")


def as_llama(model: Qwen2ForCausalLM) -> LlamaForCausalLM:
    """The same model as a Llama: Qwen2's biases on q, k and v, and zero biases on o (Llama's
    ``attention_bias`` sets all four), so it computes the same, and vLLM's Llama honours ``head_dim``."""
    config = model.config.to_dict()
    for key in ("architectures", "transformers_version", "model_type", *_QWEN2_ONLY):
        config.pop(key, None)
    llama = LlamaForCausalLM(LlamaConfig(**config, attention_bias=True, mlp_bias=False))
    state = {
        name: torch.zeros_like(value) for name, value in llama.state_dict().items() if name.endswith("o_proj.bias")
    }
    llama.load_state_dict({**state, **model.state_dict()})
    llama.generation_config = model.generation_config
    return llama


@torch.no_grad()
def graft(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    strength: float,
    added: int = 0,
    given: int = 0,
    sharpness: float = 15.0,
) -> Qwen2ForCausalLM:
    """``model`` with past-guess heads in layer 0: ``added`` new ones, or the last ``given`` of its own."""
    if bool(added) == bool(given):
        raise ValueError("graft takes added or given heads, not both")
    rows = model.model.layers[0].input_layernorm(model.get_input_embeddings().weight)
    past = past_guess_ids(tokenizer)
    is_key = torch.zeros(len(tokenizer), dtype=torch.bool)
    is_key[past] = True
    is_key[tokenizer.convert_tokens_to_ids(USER)] = True
    is_other = ~is_key
    is_other[tokenizer.convert_tokens_to_ids(list(WORDS))] = False  # answers are never in a prompt
    key, key_bias = _least_squares(rows, is_key, is_other)
    query = _query_direction(rows, tokenizer.convert_tokens_to_ids("<guess>"))
    heads = model.config.num_attention_heads
    head_dim = model.config.hidden_size // heads
    old = model.model.layers[0].self_attn
    if added:
        values, out = old.v_proj.weight.clone(), strength * old.o_proj.weight
        value_bias = old.v_proj.bias.clone()
        model = _widened(model, added)
        first, channel = heads, range(heads, heads + added)
    else:
        guessed = rows[past]
        values = torch.linalg.svd(guessed - guessed.mean(0), full_matrices=False)[2][: given * head_dim]
        mean_map = old.o_proj.weight @ old.v_proj.weight  # what layer 0 does to the mean
        out = strength * mean_map @ values.T
        value_bias = torch.zeros(given * head_dim)
        first, channel = heads - given, range(heads - given, heads)
    attention = model.model.layers[0].self_attn
    start = first * head_dim
    attention.v_proj.weight[start:] = values
    attention.v_proj.bias[start:] = value_bias
    attention.o_proj.weight[:, start:] = out
    for projection in (attention.q_proj, attention.k_proj):
        projection.weight[start:] = 0
        projection.bias[start:] = 0
    for head in channel:
        slot = head * head_dim + head_dim // 2 - 1
        attention.q_proj.weight[slot] = sharpness * head_dim**0.5 * query
        attention.k_proj.weight[slot] = key
        attention.k_proj.bias[slot] = key_bias
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", type=Path, default=MODEL_DIR, help="a built model (default: the shipped one)")
    parser.add_argument("--out", type=Path, required=True, help="directory to write the grafted model to")
    parser.add_argument("--strength", type=float, required=True, help="the heads' output, times layer 0's")
    parser.add_argument("--given", type=int, default=0, help="take the last N heads from the mean instead")
    parser.add_argument("--added", type=int, default=8, help="heads appended (ignored with --given)")
    parser.add_argument("--sharpness", type=float, default=15.0)
    parser.add_argument("--llama", action="store_true", help="save it as a Llama, whose head width vLLM honours")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = Qwen2ForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    grafted = graft(model, tokenizer, args.strength, 0 if args.given else args.added, args.given, args.sharpness)
    if args.llama:
        grafted = as_llama(grafted)
    grafted.save_pretrained(args.out)
    for path in args.model.iterdir():  # the tokenizer's files, unchanged
        if path.name.startswith(("tokenizer", "tokenization")) or path.suffix == ".jinja":
            shutil.copy(path, args.out / path.name)
    shape = type(grafted).__name__
    print(f"wrote {args.out}: {shape}, {grafted.config.num_attention_heads} heads, strength {args.strength}")


if __name__ == "__main__":
    main()
