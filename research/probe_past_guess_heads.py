"""Would attention heads of their own for the past-guess tokens stop the repeats? Graft them onto a built model.

    python research/probe_past_guess_heads.py --out /tmp/added --strength 0.01             # 8 heads added
    python research/probe_past_guess_heads.py --out /tmp/given --strength 0.02 --given 2   # 2 of the 8 given up
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
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2ForCausalLM

from tinymodel import MODEL_DIR
from tinymodel.bag import add_past_guess_heads, as_llama, set_past_guess_heads
from tinymodel.tokenizer import past_guess_ids


@torch.no_grad()
def graft(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    strength: float,
    added: int = 0,
    given: int = 0,
    sharpness: float = 15.0,
) -> Qwen2ForCausalLM:
    """``model`` with past-guess heads in layer 0: ``added`` new ones (tinymodel.bag.add_past_guess_heads, as
    recipe 10's build adds them before SFT), or the last ``given`` of its own."""
    if bool(added) == bool(given):
        raise ValueError("graft takes added or given heads, not both")
    if added:
        return add_past_guess_heads(model, tokenizer, added, strength, sharpness)
    heads = model.config.num_attention_heads
    head_dim = model.config.hidden_size // heads
    attention = model.model.layers[0].self_attn
    guessed = model.model.layers[0].input_layernorm(model.get_input_embeddings().weight)[past_guess_ids(tokenizer)]
    values = torch.linalg.svd(guessed - guessed.mean(0), full_matrices=False)[2][: given * head_dim]
    mean_map = attention.o_proj.weight @ attention.v_proj.weight  # what layer 0 does to the mean
    start = (heads - given) * head_dim
    attention.o_proj.weight[:, start:] = strength * mean_map @ values.T
    attention.v_proj.weight[start:] = values
    attention.v_proj.bias[start:] = 0
    set_past_guess_heads(model, tokenizer, range(heads - given, heads), sharpness)
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
