"""Can the embedded model's LoRA reach strategy, the choice among the answers still possible? The expected
information of the greedy guess on fixed validation states (``evaluation.strategy``), for a model and adapter beside
the reference players, and what the same LoRA reaches when it is *told* the information of every candidate (a
supervised ceiling for what GRPO's sampled rewards could teach it). Prints figures, never asserts.

    python research/probe_strategy.py tinymodel/model [--adapter A]           # the model and the references
    python research/probe_strategy.py tinymodel/model --fit exact --steps 100  # LoRA on the exact expected information
    python research/probe_strategy.py tinymodel/model --fit best --steps 100 --save OUT   # ...to the best answer
    python research/probe_strategy.py tinymodel/model --fit bag --epochs 4     # a rank-16 map from the prompt's tokens

``--fit exact`` and ``--fit best`` train a LoRA with the cpu profile's targets, rank and rate on the answer token
after the right think (``<think>.R..E</think><guess>``), 32 states a step drawn from 4000 states of the ``rl``
secrets (the ones GRPO plays): ``exact`` maximises the expected information under the policy's softmax over every
answer at temperature 0.7 (a ruled-out answer scores 0.5 below the candidates' mean), which is GRPO's objective with
every candidate's reward known instead of four sampled; ``best`` is cross-entropy to the candidate of most
information; ``--save OUT`` writes that adapter (with the tokenizer) for ``evaluate.py --adapter OUT``, to see the
ceiling in real games. ``--fit bag`` fits no model: a rank-16 linear map from the mean of the prompt's token embeddings
(layer 0's normalised inputs) to the answers' output rows, the form a LoRA on layer 0's values could take, on 12,000
states of the training secrets.
"""

from __future__ import annotations

import argparse
import math
import random

import torch
from peft import LoraConfig, get_peft_model
from probe_answer_close import tagged  # research/, the script's own folder, is on sys.path
from probe_format import prompt_ids

from evaluation.play import ModelPlayer, RandomCandidatePlayer, SolverPlayer
from evaluation.strategy import information_of, information_states
from models.loading import load_for_inference
from tinymodel.data import think_text
from wordle import answers, candidates, information_many, train_secrets
from wordle.decoding import Decoding


def report(name: str, player, states) -> float:
    result = information_of(player, states)
    print(f"{name}: {result['mean']:.4f} [{result['low']:.4f}, {result['high']:.4f}] over {result['n']} states")
    return result["mean"]


def encoded(tokenizer, states) -> list[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """Each state as (ids up to ``<guess>`` after the right think, the candidates' answer columns, their
    information over log2 of their number)."""
    think_ids = tokenizer.convert_tokens_to_ids(["<think>", "</think>", "<guess>"])
    out = []
    for _, history in states:
        cands = candidates(history)
        ids = prompt_ids(tokenizer, history) + [think_ids[0]]
        ids += tokenizer.convert_tokens_to_ids(tagged(think_text(history))) + think_ids[1:]
        info = information_many(cands.words(), cands) / math.log2(len(cands))
        out.append((ids, torch.tensor(cands.idx), torch.tensor(info, dtype=torch.float32)))
    return out


def fit_lora(model, tokenizer, states, objective: str, steps: int, lr: float, batch: int, check):
    answer_ids = torch.tensor(tokenizer.convert_tokens_to_ids(list(answers())))
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    for step in range(1, steps + 1):
        loss = 0.0
        for ids, cols, info in random.Random(step).sample(states, batch):
            logits = model(torch.tensor([ids])).logits[0, -1, answer_ids]
            if objective == "exact":
                reward = torch.full((len(answer_ids),), -0.5)
                reward[cols] = info - info.mean()
                loss = loss - (torch.softmax(logits / 0.7, -1) * reward).sum()
            else:
                loss = loss - torch.log_softmax(logits, -1)[cols[int(info.argmax())]]
        optimizer.zero_grad()
        (loss / batch).backward()
        optimizer.step()
        if step % 25 == 0:
            model.eval()
            check(f"step {step}", model)
            model.train()
    return model


def fit_bag(model, tokenizer, states, held, epochs: int, lr: float, rank: int = 16) -> None:
    """The rank-``rank`` linear map from the prompt's mean normalised embedding to the answers' output rows, fitted
    on ``states`` and scored on ``held`` (its greedy choice among the candidates)."""
    layer0 = model.model.layers[0].input_layernorm
    with torch.no_grad():
        inputs = layer0(model.model.embed_tokens.weight)
        rows = model.lm_head.weight[tokenizer.convert_tokens_to_ids(list(answers()))] * model.model.norm.weight
    down, up = torch.nn.Linear(inputs.shape[1], rank, bias=False), torch.nn.Linear(rank, rows.shape[1], bias=False)
    torch.nn.init.zeros_(up.weight)
    optimizer = torch.optim.Adam([*down.parameters(), *up.parameters()], lr=lr)

    def scores(ids):
        return rows @ up(down(inputs[torch.tensor(ids)].mean(0)))

    for epoch in range(epochs):
        for start in range(0, len(states), 64):
            loss = 0.0
            for ids, cols, info in states[start : start + 64]:
                loss = loss - (torch.softmax(info / 0.02, -1) * torch.log_softmax(scores(ids)[cols], -1)).sum()
            optimizer.zero_grad()
            (loss / 64).backward()
            optimizer.step()
        with torch.no_grad():
            chosen = [float(info[int(scores(ids)[cols].argmax())]) for ids, cols, info in held]
        print(f"epoch {epoch}: greedy information on the {len(held)} states {sum(chosen) / len(chosen):.4f}")


TARGETS = ["v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # the cpu profile's, for the embedded model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--adapter")
    parser.add_argument("--fit", choices=("exact", "best", "bag"))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--save", help="with --fit exact or best: write the adapter here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, tokenizer = load_for_inference(args.model, args.adapter, device="cpu")
    states = information_states(train_secrets("val"))
    decoding = Decoding(max_new_tokens=16)

    def check(name, m):
        report(name, ModelPlayer(m, tokenizer, decoding), states)

    check("model" if args.adapter is None else "model + adapter", model)
    if args.fit is None:
        report("random candidate", RandomCandidatePlayer(0), states)
        report("entropy over answers", SolverPlayer("answers"), states)
        report("entropy over candidates", SolverPlayer("candidates"), states)
    else:
        fitted = information_states(train_secrets("rl") * 20, per_secret=1, seed=1)
        if args.fit == "bag":
            held = encoded(tokenizer, states)
            fit_bag(model, tokenizer, encoded(tokenizer, fitted[:12_000]), held, args.epochs, args.lr or 1e-3)
        else:
            model.train()
            fitted = encoded(tokenizer, fitted[:4000])
            model = fit_lora(model, tokenizer, fitted, args.fit, args.steps, args.lr or 5e-4, args.batch, check)
            if args.save:
                model.save_pretrained(args.save)
                tokenizer.save_pretrained(args.save)


if __name__ == "__main__":
    main()
