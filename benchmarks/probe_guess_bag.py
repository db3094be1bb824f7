"""How well can a guess be read off the prompt's tokens? A probe for the next tiny-model design.

    python benchmarks/probe_guess_bag.py                           # bag model, column-tagged tokens
    python benchmarks/probe_guess_bag.py --no_column_tags          # the same, untagged marks
    python benchmarks/probe_guess_bag.py --wire                    # + wired into an untrained Qwen2
    python benchmarks/probe_guess_bag.py --steps 0 --model training/tiny_model   # probe a model only

Every figure is on game states of the held-out secrets (``tiny.game_rows`` on ``eval_secrets()``),
per number of past guesses: the probability put on still-possible answers at the guess token, and
how often the most likely answer is one. A model is fed the prompt and the right think
(``<think>.R..E</think><guess>``), so only the choice of word is measured.

The *bag* is a softmax regression: the guess's logits are the mean over the prefix's tokens of one
learned row per token. With column-tagged marks (``S(-)₁``) every Wordle constraint is such a
row (an absent S lowers every word holding an S; a green R in column 2 raises every word with R
there), so the bag can compose any number of feedback lines. ``--wire`` then builds a fresh Qwen2
(the build's ``full`` sizes, one key/value head per head) whose layer 0 computes exactly that
mean: queries and keys zero (uniform attention), values and output the identity, token
embeddings from an SVD of the bag's matrix with a slack coordinate that gives every token the same
norm (so RMSNorm does not reweight them), later layers' output projections zero. It is not
trained. Nothing here asserts: it prints figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import random
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from training import tiny
from training.data import eval_secrets, train_secrets
from wordle import Solver, parse_history


GAIN = 50.0


def prefixes(encoded) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """Token ids up to and including ``<guess>``, the candidate answers' ids, and the past-guess count."""
    rows = [i for i, pos in enumerate(encoded["word_pos"]) if pos > 0]
    ids = [encoded["input_ids"][i][: encoded["word_pos"][i]] for i in rows]
    return ids, [encoded["candidates"][i] for i in rows], [encoded["past"][i] for i in rows]


def encode(tokenizer, rows):
    encoded = tiny._encode(tokenizer, rows).to_dict()
    encoded["past"] = [len(parse_history(r["prompt"][1]["content"])) for r in rows]
    return encoded


def report(name: str, probs: list[torch.Tensor], cands: list[list[int]], past: list[int], column: dict[int, int]):
    """Mean candidate mass and top-is-candidate rate per past-guess count; ``probs`` are over the answers."""
    print(f"{name}:")
    for n in sorted(set(past)):
        picked = [i for i, p in enumerate(past) if p == n]
        mass = [float(probs[i][[column[c] for c in cands[i]]].sum()) for i in picked]
        top = [int(probs[i].argmax()) in {column[c] for c in cands[i]} for i in picked]
        print(
            f"  {n} past guesses ({len(picked):4d} states): mass on still-possible answers "
            f"{sum(mass) / len(mass):.3f}, top answer still possible {sum(top) / len(top):.3f}"
        )


def fit_bag(ids, cands, column, vocab: int, steps: int, lr: float, seed: int) -> torch.Tensor:
    """The bag's matrix (tokens x answers, temperature folded in), fitted to the soft target of the build."""
    torch.manual_seed(seed)
    bag = torch.nn.EmbeddingBag(vocab, len(column), mode="mean")
    torch.nn.init.zeros_(bag.weight)
    temperature = torch.nn.Parameter(torch.tensor(10.0))
    optimizer = torch.optim.Adam([bag.weight, temperature], lr=lr)
    targets = [[column[c] for c in cs] for cs in cands]
    for step in range(steps):
        batch = torch.randint(len(ids), (64,)).tolist()
        flat = torch.tensor([t for i in batch for t in ids[i]])
        offsets = torch.tensor([0, *itertools.accumulate(len(ids[i]) for i in batch)][:-1])
        logp = (temperature * bag(flat, offsets)).log_softmax(-1)
        loss = -torch.stack([logp[k, targets[i]].mean() for k, i in enumerate(batch)]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 500 == 0 or step == steps - 1:
            print(f"  bag step {step}: loss {loss.item():.3f}", flush=True)
    return (temperature * bag.weight).detach()


@torch.no_grad()
def wire(tokenizer, matrix: torch.Tensor, word_ids: list[int], ids: list[list[int]]):
    """A fresh full-size Qwen2 whose layer 0 computes the bag's mean (see the module docstring); the
    final norm's weight is set from ``ids`` so that its logits have the bag's scale."""
    spec = dataclasses.replace(tiny.SCALES["full"], num_kv_heads=tiny.SCALES["full"].num_heads)
    model = tiny.build_model(tokenizer, spec, seed=0)
    d = spec.hidden_size
    rank = d - 1  # the last coordinate is the slack
    u, s, vh = torch.linalg.svd(matrix, full_matrices=False)
    rows = torch.zeros(len(tokenizer), d)
    rows[:, :rank] = u[:, :rank] * s[:rank].sqrt()
    norm = rows.norm(dim=1).max() * 1.01
    rows[:, rank] = (norm**2 - rows.pow(2).sum(1)).clamp(min=0).sqrt()
    rows[word_ids] = 0
    rows[word_ids, :rank] = vh[:rank].T * s[:rank].sqrt()
    model.get_input_embeddings().weight.copy_(rows)
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        if i == 0:
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
                proj.weight.zero_()
                proj.bias.zero_()
            attn.v_proj.weight[:rank, :rank] = torch.eye(rank)
            # Undo RMSNorm's 1/norm, and outweigh the residual (the last token's own row) 50 to 1.
            attn.o_proj.weight.copy_(torch.eye(d) * GAIN * norm / d**0.5)
        else:
            attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    # The final RMSNorm leaves the hidden state at norm sqrt(d); the bag's logits come from GAIN * mean.
    typical = torch.stack([rows[p, :rank].mean(0).norm() for p in ids]).median()
    model.model.norm.weight.fill_(float(GAIN * typical / d**0.5))
    return model.eval()


@torch.no_grad()
def model_probs(model, ids, word_ids) -> list[torch.Tensor]:
    return [model(torch.tensor([p])).logits[0, -1, word_ids].softmax(-1) for p in ids]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--no_column_tags", action="store_true", help="untagged marks, as the shipped tokenizer")
    parser.add_argument("--train_states", type=int, default=40000)
    parser.add_argument("--eval_states", type=int, default=1500)
    parser.add_argument("--steps", type=int, default=1500, help="bag training steps of 64 states (0: no bag)")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--wire", action="store_true", help="also wire the bag into an untrained Qwen2 and probe it")
    parser.add_argument("--model", help="also probe this model directory (its own tokenizer)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)

    solver = Solver()
    train_rows = tiny.game_rows(args.train_states, random.Random(args.seed), solver, train_secrets())
    eval_rows = tiny.game_rows(args.eval_states, random.Random(args.seed + 1), solver, eval_secrets())
    word_ids_of = lambda tok: tok.convert_tokens_to_ids(list(tiny.WORDS))  # noqa: E731

    if args.model:
        tokenizer = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model).eval()
        ids, cands, past = prefixes(encode(tokenizer, eval_rows))
        word_ids = word_ids_of(tokenizer)
        report(args.model, model_probs(model, ids, word_ids), cands, past, {t: j for j, t in enumerate(word_ids)})
    if args.steps <= 0:
        return 0

    tokenizer = tiny.build_tokenizer(column_tags=not args.no_column_tags)
    word_ids = word_ids_of(tokenizer)
    column = {t: j for j, t in enumerate(word_ids)}
    started = time.monotonic()
    matrix = fit_bag(*prefixes(encode(tokenizer, train_rows))[:2], column, len(tokenizer), args.steps, args.lr, args.seed)
    print(f"  fitted in {time.monotonic() - started:.0f} s")
    ids, cands, past = prefixes(encode(tokenizer, eval_rows))
    tags = "untagged" if args.no_column_tags else "column-tagged"
    report(f"bag of {tags} tokens", [matrix[p].mean(0).softmax(-1) for p in ids], cands, past, column)
    if args.wire:
        model = wire(tokenizer, matrix, word_ids, ids)
        report("the bag wired into an untrained Qwen2", model_probs(model, ids, word_ids), cands, past, column)
    return 0


if __name__ == "__main__":
    sys.exit(main())
