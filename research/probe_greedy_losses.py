"""Where does the embedded model's greedy play lose? Ban one kind of bad guess and replay the games.

    python research/probe_greedy_losses.py                        # the shipped model, the 202 validation games
    python research/probe_greedy_losses.py --adapter outputs/cpu  # the same for a trained adapter

The embedded model guesses an answer as one token right after ``<guess>`` (tinymodel.tokenizer), so
a guess can be banned by masking that token's logit. Three rows, the same games and decoding as
``evaluate.py`` otherwise (greedy, the model's reply limit):

- ``model``: nothing banned (the evaluation's own row);
- ``no repeats``: the words already guessed in this game are banned;
- ``no inconsistent``: every answer that contradicts the feedback so far is banned;
- ``past marked``: nothing banned, but each past guess W the prompt spells adds ``-c * u_W`` to the
  embedding of its ``": "`` token (``--mark_past c``, u_W the answer token's tied row): whether the model
  would stop repeating if a past guess were one feature (docs/research-log.md, e19).

The gap between the rows says what a policy would win by learning each. Nothing here asserts: it
prints figures. Embedded model only (a hub model spells a word over several tokens).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from evaluation.metrics import compute_metrics
from evaluation.play import ModelPlayer
from evaluation.run import select_secrets
from models.loading import load_for_inference
from tinymodel.tokenizer import WORDS
from wordle import candidates
from wordle.game import GameView, play


class _BanAfterGuessTag(LogitsProcessor):
    """Sets the banned token ids of each row to -inf at the step right after its ``<guess>`` token."""

    def __init__(self, guess_tag: int, banned: Sequence[list[int]]) -> None:
        self.guess_tag, self.banned = guess_tag, banned

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        for row, ids in enumerate(self.banned):
            if ids and int(input_ids[row, -1]) == self.guess_tag:
                scores[row, ids] = -float("inf")
        return scores


class BanningPlayer(ModelPlayer):
    """The evaluation's model player, with ``ban(view)`` words masked at the answer token."""

    def __init__(self, model, tokenizer, ban, name: str) -> None:
        super().__init__(model, tokenizer, name=name)
        self.ban = ban
        self.word_id = dict(zip(WORDS, tokenizer.convert_tokens_to_ids(list(WORDS)), strict=True))
        self.guess_tag = tokenizer.convert_tokens_to_ids("<guess>")

    def _generate(self, views: Sequence[GameView], config) -> list[str]:
        texts = self.tokenizer.apply_chat_template(
            [v.prompt for v in views], add_generation_prompt=True, tokenize=False
        )
        batch = self.tokenizer(texts, padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt")
        banned = [[self.word_id[w] for w in self.ban(v) if w in self.word_id] for v in views]
        processors = LogitsProcessorList([_BanAfterGuessTag(self.guess_tag, banned)])
        output = self.model.generate(**batch, generation_config=config, logits_processor=processors)
        return self.tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)


def mark_past_guesses(model, tokenizer, scale: float):
    """A forward hook that adds ``-scale * u_W`` to the embedding of the ``": "`` after each past guess W the
    prompt spells (u_W: W's answer token row, tied to its output vector), so layer 0's mean carries "not W".
    Returns the hook's handle; ``handle.remove()`` restores the model."""
    rows = model.get_input_embeddings().weight
    word_id = dict(zip(WORDS, tokenizer.convert_tokens_to_ids(list(WORDS)), strict=True))
    colon = tokenizer.convert_tokens_to_ids(": ")
    letters = {tokenizer.convert_tokens_to_ids(chr(c)): chr(c) for c in range(ord("A"), ord("Z") + 1)}

    def hook(module, inputs, output):
        output = output.clone()
        for b, row in enumerate(inputs[0].tolist()):
            for p in range(5, len(row)):
                if row[p] == colon and all(t in letters for t in row[p - 5 : p]):
                    word = "".join(letters[t] for t in row[p - 5 : p])
                    if word in word_id:
                        output[b, p] -= scale * rows[word_id[word]]
        return output

    return model.get_input_embeddings().register_forward_hook(hook)


def _repeats(view: GameView) -> set[str]:
    return {guess for guess, _ in view.history}


def _inconsistent(view: GameView) -> set[str]:
    return set(WORDS) - set(candidates(view.history).words()) if view.history else set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--adapter", default=None)
    parser.add_argument("--games", type=int, default=None, help="validation games (default: all 202)")
    parser.add_argument("--mark_past", type=float, default=5.0, help="the scale of the past-guess row (0: no such row)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_for_inference(args.model, args.adapter, device="cpu")
    players = [
        BanningPlayer(model, tokenizer, lambda view: set(), "model"),
        BanningPlayer(model, tokenizer, _repeats, "no repeats"),
        BanningPlayer(model, tokenizer, _inconsistent, "no inconsistent"),
    ]
    secrets = select_secrets(args.games, split="val")  # never the held-out secrets: they report the final figure
    print(f"{len(secrets)} validation games, greedy; {args.model}" + (f" + {args.adapter}" if args.adapter else ""))
    if args.mark_past:
        players.append(BanningPlayer(model, tokenizer, lambda view: set(), f"past marked x{args.mark_past:g}"))
    for player in players:
        handle = mark_past_guesses(model, tokenizer, args.mark_past) if player.name.startswith("past") else None
        m = compute_metrics(play(player, secrets))
        if handle is not None:
            handle.remove()
        win, lo, hi = (m["win_rate"][k] for k in ("rate", "low", "high"))
        print(
            f"  {player.name:16s} wins {win:6.1%} [{lo:.1%}-{hi:.1%}]  inconsistent {m['inconsistent_rate']['rate']:6.1%}"
            f"  repeats {m['repeat_rate']['rate']:6.1%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
