"""How well can a guess be read off the prompt's tokens? A probe for the next tiny-model design.

    python research/probe_guess_bag.py                           # the bag alone, on the build's tokens
    python research/probe_guess_bag.py --wire                    # + wired into an untrained Qwen2
    python research/probe_guess_bag.py --constraint_weight 0 --wire     # without the constraint rows
    python research/probe_guess_bag.py --steps 0 --model tinymodel/model   # probe a model only

The bag learns from game states of the secrets the build's SFT learns from (``train_secrets("sft")``),
and every figure is on game states of the validation secrets (``train_secrets("val")``, which settings
are chosen on), from any opening as the build draws them, per number of past guesses: the probability
put on still-possible answers at the guess token, and how often the most likely answer is one. A
model is fed the prompt and the right think (``<think>.R..E</think><guess>``), so only the choice of
word is measured.

The *bag* is ``tinymodel.bag.fit_guess_bag``: a softmax regression whose logits for the guess are
the mean over the prefix's tokens of one learned row per token. With column-tagged marks
(``S(-)₁``) every Wordle constraint is such a row, so the bag can compose any number of feedback
lines. ``--wire`` writes it into a fresh full-size Qwen2 with ``tinymodel.bag.wire_guess_bag``,
exactly as the build does, and probes that model untrained. Nothing here asserts: it prints figures.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tinymodel.bag import fit_guess_bag, wire_guess_bag
from tinymodel.bag import guess_states as bag_states
from tinymodel.build import SCALES, build_model
from tinymodel.data import encode, game_rows
from tinymodel.tokenizer import WORDS, build_tokenizer
from wordle import Solver, parse_history, train_secrets


def guess_states(tokenizer, rows) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """Token ids up to and including ``<guess>``, the candidate answers' ids, and the past-guess count."""
    states = bag_states(encode(tokenizer, rows))
    past = [len(parse_history(rows[i]["prompt"][1]["content"])) for i, _, _ in states]
    return [prefix for _, prefix, _ in states], [cands for _, _, cands in states], past


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
    one = [i for i, c in enumerate(cands) if len(c) == 1]
    top = [int(probs[i].argmax()) == column[cands[i][0]] for i in one]
    print(f"  one answer left ({len(one):4d} states): top answer is it {sum(top) / max(1, len(top)):.3f}")


@torch.no_grad()
def model_probs(model, ids, word_ids) -> list[torch.Tensor]:
    return [model(torch.tensor([p])).logits[0, -1, word_ids].softmax(-1) for p in ids]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--train_states", type=int, default=40000)
    parser.add_argument("--eval_states", type=int, default=1500)
    parser.add_argument("--steps", type=int, default=1500, help="bag training steps (0: no bag)")
    parser.add_argument("--batch_size", type=int, default=256, help="states per bag step (the build's)")
    parser.add_argument("--lr", type=float, default=3e-2, help="the bag's learning rate (the build's)")
    parser.add_argument("--pooling", choices=["mean", "sum"], default="mean", help="the bag's pooling (build: mean)")
    parser.add_argument(
        "--constraint_weight",
        type=float,
        default=SCALES["full"].constraint_weight,
        help="tinymodel.bag.constraint_rows beside the fitted rows, at this fixed weight (default: the build's, %(default)s)",
    )
    parser.add_argument("--wire", action="store_true", help="also wire the bag into an untrained Qwen2 and probe it")
    parser.add_argument("--model", help="also probe this model directory (its own tokenizer)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.wire and args.pooling != "mean":
        parser.error("--wire needs --pooling mean: layer 0's uniform attention computes a mean")
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    solver = Solver()
    train_rows = game_rows(args.train_states, random.Random(args.seed), solver, train_secrets("sft"))
    eval_rows = game_rows(args.eval_states, random.Random(args.seed + 1), solver, train_secrets("val"))
    word_ids_of = lambda tok: tok.convert_tokens_to_ids(list(WORDS))

    if args.model:
        tokenizer = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model).eval()
        ids, cands, past = guess_states(tokenizer, eval_rows)
        word_ids = word_ids_of(tokenizer)
        report(args.model, model_probs(model, ids, word_ids), cands, past, {t: j for j, t in enumerate(word_ids)})
    if args.steps <= 0:
        return 0

    tokenizer = build_tokenizer()
    word_ids = word_ids_of(tokenizer)
    column = {t: j for j, t in enumerate(word_ids)}
    started = time.monotonic()
    train_encoded = encode(tokenizer, train_rows)
    matrix = fit_guess_bag(
        train_encoded, tokenizer, args.steps, args.batch_size, args.lr, args.seed, args.pooling, args.constraint_weight
    )
    print(f"  fitted in {time.monotonic() - started:.0f} s")
    ids, cands, past = guess_states(tokenizer, eval_rows)
    logits = [getattr(matrix[p], args.pooling)(0) for p in ids]  # the rows' mean or sum
    report(f"bag of the build's tokens ({args.pooling})", [z.softmax(-1) for z in logits], cands, past, column)
    if args.wire:
        model = build_model(tokenizer, SCALES["full"], seed=args.seed)
        wire_guess_bag(model, matrix, word_ids, train_encoded)  # as the build wires it
        report("the bag wired into an untrained Qwen2", model_probs(model.eval(), ids, word_ids), cands, past, column)
    return 0


if __name__ == "__main__":
    sys.exit(main())
