"""Which choice among the still-possible answers the bars of issue 80 need, and whether the embedded start can express
it: simulated reference players in real games, and the start's own logits at the answer (e112). Prints figures,
never asserts.

    python research/probe_players.py                       # the reference players: information and games
    python research/probe_players.py --logits tinymodel/model  # the start's separation and its static-bias frontier

The players say only still-possible answers, as the start nearly does, and differ in which: ``letters`` scores each
by how many candidates share its letter in each place (greens) plus how many contain each of its letters (presence),
``greens`` and ``presence`` use one of the two, ``fixed`` prefers the answers of most opening information (one static
order, the best a preference that ignores the state can do), ``entropy`` is the greedy entropy player over the
candidates and ``random`` a uniformly random candidate. Each plays the 202 validation secrets from the four openings
of issue 80 as ``evaluate.py --split val`` draws them (seed 0), and its guesses' information is measured on
``evaluation.strategy``'s 283 fixed validation states.

``--logits`` reads the start's logits over the answers at ``<guess>`` after the right think on the same states: how
well they separate the candidates from the ruled-out answers, and what the greedy guess's information becomes when a
static preference (the z-scored opening information or letter frequency of every answer, times ``s``) is added to
them, with the share of those guesses that are ruled out. ``dynamic`` adds the letter score of the state's true
candidates instead: what a candidate-aware choice gives on top of the start's own separation.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter

import numpy as np
import torch
from probe_strategy import encoded  # research/, the script's own folder, is on sys.path

from evaluation.metrics import mean_ci
from evaluation.run import evaluate_player, select_secrets
from evaluation.strategy import information_of, information_states
from models.loading import load_for_inference
from wordle import answers, candidates, information_many, train_secrets
from wordle.game import GameView, format_reply
from wordle.openings import Opening
from wordle.solver import opening_information
from wordle.words import allowed_index

OPENINGS = ("own", "answer", "allowed", "answer:2")


def letter_scores(words: list[str], pool: list[str], greens: bool = True, presence: bool = True) -> np.ndarray:
    """Each of ``words`` scored by the answers of ``pool``: how many share its letter in each place, plus how many
    contain each of its distinct letters."""
    place = [Counter(w[i] for w in pool) for i in range(5)]
    within = Counter(letter for w in pool for letter in set(w))
    return np.array(
        [greens * sum(place[i][c] for i, c in enumerate(w)) + presence * sum(within[c] for c in set(w)) for w in words],
        dtype=np.float64,
    )


def fixed_order() -> np.ndarray:
    """The answers' opening information, the static order of the ``fixed`` player."""
    index = allowed_index()
    return opening_information()[[index[w] for w in answers()]]


class CandidatePlayer:
    """A still-possible answer of highest score: ``letters``, ``greens``, ``presence`` or ``fixed``."""

    def __init__(self, kind: str) -> None:
        self.name, self.order = kind, fixed_order() if kind == "fixed" else None

    def choose(self, history) -> str:
        cands = candidates(history)
        words = cands.words()
        if self.order is not None:
            return words[int(np.argmax(self.order[cands.idx]))] if len(cands.idx) else words[0]
        scores = letter_scores(words, words, greens=self.name != "presence", presence=self.name != "greens")
        return words[int(np.argmax(scores))]

    def replies(self, views: list[GameView]) -> list[str]:
        return [format_reply(self.choose(v.history), self.name) for v in views]


def play_references(players: list[str]) -> None:
    from evaluation.play import RandomCandidatePlayer, SolverPlayer

    secrets = select_secrets(split="val")
    states = information_states(train_secrets("val"))
    made = {"entropy": lambda: SolverPlayer("candidates"), "random": lambda: RandomCandidatePlayer(0)}
    print(f"{len(secrets)} validation secrets, {len(states)} states; won % / guesses per win, " + ", ".join(OPENINGS))
    for kind in players:
        player = made[kind]() if kind in made else CandidatePlayer(kind)
        info = information_of(player, states)["mean"]
        cells = []
        for spec in OPENINGS:
            metrics = evaluate_player(player, secrets, opening=Opening.parse(spec)).metrics
            cells.append(f"{100 * metrics['win_rate']['rate']:.1f} / {metrics['mean_guesses_won']['mean']:.2f}")
        print(f"{kind}: information {info:.3f}; " + ", ".join(cells))


def zscored(values: np.ndarray) -> np.ndarray:
    return (values - values.mean()) / values.std()


def probe_logits(model_dir: str, scales: list[float]) -> None:
    model, tokenizer = load_for_inference(model_dir, device="cpu")
    states = information_states(train_secrets("val"))
    words = list(answers())
    answer_ids = torch.tensor(tokenizer.convert_tokens_to_ids(words))
    with torch.no_grad():
        rows = encoded(tokenizer, states)
        logits = [model(torch.tensor([ids])).logits[0, -1, answer_ids].double().numpy() for ids, _, _ in rows]
    masks, infos = [], []
    for (_, history), row in zip(states, logits, strict=True):
        cands = candidates(history)
        mask = np.zeros(len(words), dtype=bool)
        mask[cands.idx] = True
        masks.append(mask)
        infos.append(information_many(words, cands) / math.log2(len(cands)))

    separated = [row[m].min() > row[~m].max() for row, m in zip(logits, masks, strict=True)]
    spread = [row[m].max() - row[m].min() for row, m in zip(logits, masks, strict=True)]
    with np.errstate(invalid="ignore", divide="ignore"):  # a state whose candidates tie in information
        corr = [np.corrcoef(row[m], info[m])[0, 1] for row, m, info in zip(logits, masks, infos, strict=True)]
    cand_range = np.percentile(np.concatenate([row[m] for row, m in zip(logits, masks, strict=True)]), [5, 95])
    ruled_95 = np.percentile(np.concatenate([row[~m] for row, m in zip(logits, masks, strict=True)]), 95)
    print(
        f"{len(states)} states: candidates' logits 5-95% {cand_range[0]:.1f}-{cand_range[1]:.1f}, ruled-out 95th "
        f"percentile {ruled_95:.1f}; every candidate above every ruled-out answer in {np.mean(separated):.1%}; "
        f"candidates' spread median {np.median(spread):.1f}; correlation with information, median over states "
        f"{np.nanmedian(corr):.3f}"
    )

    static = {"opening information": zscored(fixed_order()), "letter frequency": zscored(letter_scores(words, words))}
    for name, bias in static.items():
        for s in scales:
            report(f"static {name}, s={s:g}", [row + s * bias for row in logits], masks, infos)
    for s in scales:
        dynamic = [
            row + s * zscored(letter_scores(words, [w for w, keep in zip(words, m, strict=True) if keep]))
            for row, m in zip(logits, masks, strict=True)
        ]
        report(f"dynamic letter frequency of the true candidates, s={s:g}", dynamic, masks, infos)


def report(name: str, scored: list[np.ndarray], masks, infos) -> None:
    chosen = [int(np.argmax(row)) for row in scored]
    info = mean_ci([float(i[c]) for i, c in zip(infos, chosen, strict=True)])
    ruled_out = np.mean([not m[c] for m, c in zip(masks, chosen, strict=True)])
    print(f"{name}: information {info['mean']:.3f} [{info['low']:.3f}, {info['high']:.3f}], ruled out {ruled_out:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--players", nargs="+", default=["letters", "greens", "presence", "fixed", "entropy", "random"])
    parser.add_argument("--logits", metavar="MODEL", help="probe this model's logits instead of playing the references")
    parser.add_argument("--scales", nargs="+", type=float, default=[0, 0.5, 1, 2, 4, 8])
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.logits:
        probe_logits(args.logits, args.scales)
    else:
        play_references(args.players)


if __name__ == "__main__":
    main()
