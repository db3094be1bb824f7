"""What a model's contradicting guesses break, and whether its think was right when it made them.

    python research/probe_contradictions.py outputs/cpu/eval-val/eval.json [MORE_EVAL_JSON ...]

For every model row of an ``evaluate.py --out`` run (one per opening), over the guesses made with feedback in view:

- how often the reply's think (``.R..E``, the letters placed so far) is the right one, and the share of guesses
  that contradict the feedback after a right think and after a wrong one: how much a perfect think could gain;
- what the contradicting guesses break, read against each earlier line: a green (the letter left its column), a
  yellow (the letter missing, or in the column marked), an absent letter (played again), or a repeat of a past
  guess. A guess breaking several kinds counts in each.

Games are read back as ``wordle.game.Game`` and a guess contradicts as ``evaluate.py`` counts it: against the
history shown before it (``Game.histories``, invalid turns skipped), by ``wordle.is_consistent``. Nothing here
asserts: it prints figures.
"""

from __future__ import annotations

import collections
import json
import re
import sys
from collections.abc import Sequence

from tinymodel.data import think_text
from wordle import is_consistent
from wordle.feedback import score_guess
from wordle.game import Game

MARKS = {"G": "green", "Y": "yellow", "B": "absent"}


def broken(history: Sequence[tuple[str, str]], guess: str) -> set[str]:
    """The kinds of feedback ``guess`` breaks: per earlier line, the marks it would have scored otherwise."""
    kinds = set()
    for past, pattern in history:
        if past == guess:
            kinds.add("repeat")
            continue
        kinds |= {MARKS[a] for a, b in zip(pattern.upper(), score_guess(past, guess).upper()) if a != b}
    return kinds


def main(paths: list[str]) -> int:
    for path in paths:
        print(path)
        with open(path, encoding="utf-8") as file:
            players = [p for p in json.load(file)["players"] if p["kind"] == "model"]
        for player in players:
            guesses, contradicting = collections.Counter(), collections.Counter()
            kinds = collections.Counter()
            for data in player["games"]:
                game = Game.from_dict(data)
                for turn, history in zip(game.turns, game.histories(), strict=True):
                    if turn.status != "valid" or not history:
                        continue
                    think = re.search(r"<think>(.*?)</think>", turn.reply)
                    right = bool(think) and think.group(1) == think_text(history)
                    guesses[right] += 1
                    if not is_consistent(turn.guess, history):
                        contradicting[right] += 1
                        kinds.update(broken(history, turn.guess))
            n, bad = sum(guesses.values()), sum(contradicting.values())
            right, wrong = (100 * contradicting[r] / max(1, guesses[r]) for r in (True, False))
            print(
                f"  {player['label']}, {player['opening']}: think right {100 * guesses[True] / max(1, n):.0f}% of {n};"
                f" contradicting after a right think {right:.1f}%, after a wrong one {wrong:.1f}%"
                f" | {bad} contradicting break: "
                + ", ".join(f"{kind} {100 * count / max(1, bad):.0f}%" for kind, count in kinds.most_common())
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
