"""Does a model prefer the secrets its SFT played? Its answer logits on game states, by word group.

    python research/probe_secret_prior.py tinymodel/model [more model directories] [--splits sft rl val]

On 1,500 game states of the validation secrets, or of each split named (SFT's own secrets against unseen ones
measures how much of the end game is recall), drawn as the build draws its rows, from any opening, with the right
think before ``<guess>`` as ``probe_guess_bag.py`` feeds them: the mean logit of the answers each state rules out,
by group (SFT's secrets, GRPO's, validation's, held-out), less the mean over the groups; and, on the states with one
answer left, how often it is the model's first choice, as it is and with every SFT secret lowered by the SFT-minus-
validation gap. A large gap that the lowering closes is a global prior; a small one that leaves the states wrong is
learnt in context. Prints figures, never asserts; states of the training and validation secrets only.
"""

from __future__ import annotations

import argparse
import random

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tinymodel.bag import guess_states
from tinymodel.data import encode, game_rows
from tinymodel.tokenizer import WORDS
from wordle import Solver, train_secrets

GROUPS = ("sft", "rl", "val", "held-out")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("models", nargs="+", help="model directories (their own tokenizers)")
    parser.add_argument("--states", type=int, default=1500)
    parser.add_argument("--splits", nargs="+", default=["val"], choices=["sft", "rl", "val"], help="whose states")
    args = parser.parse_args()
    torch.set_num_threads(1)
    of = {word: k for k, name in enumerate(GROUPS[:3]) for word in train_secrets(name)}
    group = torch.tensor([of.get(word, 3) for word in WORDS])
    rows = {name: game_rows(args.states, random.Random(1), Solver(), train_secrets(name)) for name in args.splits}
    for path in args.models:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path).eval()
        word_ids = tokenizer.convert_tokens_to_ids(list(WORDS))
        column = {token: j for j, token in enumerate(word_ids)}
        for name in args.splits:
            report(
                model,
                guess_states(encode(tokenizer, rows[name])),
                column,
                group,
                f"{path}, states of the {name} secrets",
            )


def report(model, states, column: dict[int, int], group: torch.Tensor, title: str) -> None:
    """Prints the ruled-out answers' mean logit by group, and the one-answer-left states' first choices."""
    word_ids = list(column)
    gap, one_left = torch.zeros(len(GROUPS)), []
    with torch.no_grad():
        for _, prefix, cands in states:
            logits = model(torch.tensor([prefix])).logits[0, -1, word_ids]
            out = torch.ones(len(WORDS), dtype=torch.bool)
            out[[column[c] for c in cands]] = False
            means = torch.stack([logits[out & (group == k)].mean() for k in range(len(GROUPS))])
            gap += means - means.mean()
            if len(cands) == 1:
                one_left.append((logits, column[cands[0]]))
    gap /= len(states)
    print(f"{title}: mean logit of the ruled-out answers, by group, less their mean:")
    print("  " + "  ".join(f"{group_name} {value:+.2f}" for group_name, value in zip(GROUPS, gap.tolist())))
    for lowered in (0.0, float(gap[0] - gap[2])):
        right = sum(int((z - lowered * (group == 0)).argmax()) == j for z, j in one_left) / len(one_left)
        print(
            f"  one answer left ({len(one_left)} states): it is the first choice in {right:.1%}"
            f" (SFT secrets lowered by {lowered:.2f})"
        )


if __name__ == "__main__":
    main()
