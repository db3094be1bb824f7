"""Whether a model closes its answer: after ``<guess>`` and its greedy answer, is the next greedy token ``</guess>``,
after the right think and after a slipped one (a column dropped, a character swapped, a column written again)?
e103's two commonest broken states wrote the answer again instead of closing (``<guess>EXACTEXACT…``), each after a
slipped think. Validation secrets, from a random answer, allowed word or the model's own opener, then 0-3 random
still-possible answers (a state before the win); prints figures, never asserts.

    python research/probe_answer_close.py tinymodel/model [--adapter A] [--states_per_secret 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import random

import torch
from probe_format import masked_probs, prompt_ids  # research/, the script's own folder, is on sys.path

from models.loading import load_for_inference
from tinymodel.data import opener, think_text
from tinymodel.tokenizer import COLUMN_TAGS, THINK_CHARACTERS
from wordle import allowed, answers, candidates, train_secrets
from wordle.game import play_guesses


def state(secret: str, rng: random.Random) -> list[tuple[str, str]]:
    draw = rng.random()
    first = opener() if draw < 1 / 3 else rng.choice(answers()) if draw < 2 / 3 else rng.choice(allowed())

    def choose(history: list[tuple[str, str]]) -> str:
        if not history:
            return first
        left = [w for w in candidates(history).words() if w != secret]
        return rng.choice(left) if left else secret  # the secret ends the state: nothing but a win is left

    return play_guesses(secret, 1 + rng.randint(0, 3), choose)


def tagged(think: str) -> list[str]:
    """A think's tokens, each character with its column's tag (``.R..E``: ``.₁ R₂ .₃ .₄ E₅``)."""
    return [f"{c}{COLUMN_TAGS[i]}" for i, c in enumerate(think)]


def slipped(think: str, rng: random.Random) -> list[str]:
    """A wrong think as tagged tokens: 1-3 columns dropped, one column's character swapped, or one written 2-4 times."""
    tokens = tagged(think)
    kind = rng.randrange(3)
    if kind == 0:
        for i in sorted(rng.sample(range(5), rng.randint(1, 3)), reverse=True):
            del tokens[i]
    elif kind == 1:
        i = rng.randrange(5)
        tokens[i] = f"{rng.choice([c for c in THINK_CHARACTERS if c != think[i]])}{COLUMN_TAGS[i]}"
    else:
        i = rng.randrange(5)
        tokens[i : i + 1] = [tokens[i]] * rng.randint(2, 4)
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--adapter")
    parser.add_argument("--states_per_secret", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_for_inference(args.model, args.adapter)
    model.eval()
    rng = random.Random(args.seed)
    open_, close_ = tokenizer.convert_tokens_to_ids(["<guess>", "</guess>"])
    think_open, think_close = tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    results = {"right think": [], "slipped think": []}
    for secret in train_secrets("val"):
        for _ in range(args.states_per_secret):
            history = state(secret, rng)
            think = think_text(history)
            prompt = prompt_ids(tokenizer, history) + [think_open]
            for name, tokens in (("right think", tagged(think)), ("slipped think", slipped(think, rng))):
                ids = prompt + tokenizer.convert_tokens_to_ids(tokens) + [think_close, open_]
                answer = int(masked_probs(model, ids)[-1].argmax())
                p = masked_probs(model, ids + [answer])[-1]
                results[name].append((float(p[close_]), int(p.argmax()) == close_, float(p[answer])))
    for name, rows in results.items():
        n = len(rows)
        print(
            f"{name}: {n} states, closed {100 * sum(c for _, c, _ in rows) / n:.1f}%, "
            f"P(</guess>) mean {sum(p for p, _, _ in rows) / n:.3f}, under 0.9 on {100 * sum(p < 0.9 for p, _, _ in rows) / n:.1f}%, "
            f"P(the answer again) mean {sum(a for _, _, a in rows) / n:.3f}, max {max(a for _, _, a in rows):.3f}"
        )


if __name__ == "__main__":
    main()
