"""How well a model writes its think, and how close its think comes to breaking the reply's format: teacher-forced
on the right reply, on validation states from a random answer opening, by number of past guesses.

    python research/probe_think.py tinymodel/model [--adapter outputs/cpu] [--states 600]

Per state, the right reply is ``tinymodel.data.reply_text`` (its think: the letters placed so far). ``think right``:
the model's most likely token is the right one at each of the think's five positions, given the right characters
before it. ``structure mass``: the probability at those positions of eos and the reply's tags, which end or break
the reply there (mean over states, the largest, and how many states put more than 0.3 on them at some position).
``by first letter``: the structure mass at the first position when the think opens with a placed letter, for the
letters where it is largest (one letter of one build took 9% on average, 98% at worst). ``reply tokens``: the mean
pairwise cosine of the embedding rows of eos, the tags and the think's tokens met, and of eos against the letters
(0.8 when the wiring started them as one vector; research log, e78). Prints figures, never asserts; validation
secrets only.
"""

from __future__ import annotations

import argparse
import collections
import random

import torch

from models.loading import load_for_inference
from tinymodel.data import reply_text
from wordle import answers, candidates, render_prompt, train_secrets
from wordle.game import play_guesses

STRUCTURE = ("<|end|>", "<think>", "</think>", "<guess>", "</guess>")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("model", help="a model directory (tinymodel/model, or a build's --out)")
    parser.add_argument("--adapter", help="a LoRA adapter directory to apply (grpo_train.py's output_dir)")
    parser.add_argument("--states", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_for_inference(args.model, args.adapter, device="cpu")
    structure = tokenizer.convert_tokens_to_ids(list(STRUCTURE))
    rng = random.Random(args.seed)

    def choose(history: list[tuple[str, str]]) -> str:
        still = candidates(history).words() if history else []
        return rng.choice(still) if still and rng.random() < 0.7 else rng.choice(answers())

    by_past = collections.defaultdict(lambda: {"states": 0, "right": 0, "mass": 0.0, "max": 0.0, "over": 0})
    by_letter = collections.defaultdict(list)
    think_ids = set()  # the think's tokens as this tokenizer writes them (tagged with their column, or plain)
    for _ in range(args.states):
        history = play_guesses(rng.choice(train_secrets("val")), rng.randint(1, 5), choose)
        if not history or history[-1][1] == "GGGGG":
            continue
        right_reply = reply_text(history, rng.choice(candidates(history).words() or answers()))
        prompt = tokenizer.apply_chat_template(render_prompt(history), add_generation_prompt=True, tokenize=False)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        r_ids = tokenizer(right_reply, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([p_ids + r_ids])).logits[0]
        probs = logits[len(p_ids) : len(p_ids) + 5].softmax(-1)  # predicting the think's five characters
        mass = probs[:, structure].sum(-1)
        think_ids.update(r_ids[1:6])
        s = by_past[len(history)]
        s["states"] += 1
        s["right"] += all(int(probs[k].argmax()) == r_ids[k + 1] for k in range(5))
        s["mass"] += float(mass.mean())
        s["max"] = max(s["max"], float(mass.max()))
        s["over"] += float(mass.max()) > 0.3
        first = right_reply[len("<think>")]
        if first != ".":
            by_letter[first].append(float(mass[0]))
    for past in sorted(by_past):
        s = by_past[past]
        print(
            f"{past} past: {s['states']} states, think right {100 * s['right'] / s['states']:.0f}%, "
            f"structure mass mean {s['mass'] / s['states']:.4f}, max {s['max']:.3f}, states over 0.3: {s['over']}"
        )
    reply = [*structure, *sorted(think_ids)]
    rows = torch.nn.functional.normalize(model.get_input_embeddings().weight.detach()[reply], dim=1)
    cosine = rows @ rows.T
    pairs = cosine[~torch.eye(len(reply), dtype=torch.bool)]
    letters = cosine[0, len(STRUCTURE) :]
    print(
        f"reply tokens: mean pairwise cosine {pairs.mean():.3f}; eos against the letters {letters.mean():.3f}, at most {letters.max():.3f}"
    )
    worst = sorted(by_letter.items(), key=lambda kv: -sum(kv[1]) / len(kv[1]))[:5]
    print("by first letter:", ", ".join(f"{k} {sum(v) / len(v):.3f} (max {max(v):.2f}, {len(v)})" for k, v in worst))


if __name__ == "__main__":
    main()
