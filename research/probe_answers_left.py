"""Where a model contradicts the feedback: its guesses made with feedback in view, by how many answers the
feedback still allows, from each opening of an ``evaluate.py --out`` run.

    python evaluate.py --model tiny --split val --openings own answer allowed answer:2 --no_baselines --out /tmp/val
    python research/probe_answers_left.py /tmp/val/eval.json [more eval.json files]

Per player and opening: games won, the share of guesses with feedback in view that could not be the secret
(``contradicting``, as evaluate.py counts it), the share of them that repeat an earlier guess (evaluate.py divides
by every valid guess, a game's first included, so its repeat rate is lower), and the contradicting
share by answers left (1, 2-3, 4-10, more), and how many of the contradicting guesses that are answers are
secrets SFT played (``train_secrets("sft")``, 44% of the answers). Prints figures, never asserts; read validation
runs only.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from wordle import answers, candidates, is_consistent, train_secrets
from wordle.game import Game

BUCKETS = ("1", "2-3", "4-10", ">10")


def bucket(n: int) -> str:
    return "1" if n == 1 else "2-3" if n <= 3 else "4-10" if n <= 10 else ">10"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("eval_json", nargs="+", help="eval.json files written by evaluate.py --out")
    words, sft = set(answers()), set(train_secrets("sft"))
    for path in parser.parse_args().eval_json:
        print(path)
        for player in json.loads(Path(path).read_text())["players"]:
            if player["kind"] == "baseline":
                continue
            seen, bad, repeats, bad_answers, bad_sft = collections.Counter(), collections.Counter(), 0, 0, 0
            for data in player["games"]:
                game = Game.from_dict(data)  # its start is the given opening
                for turn, history in zip(game.turns, game.histories(), strict=True):
                    if turn.status != "valid" or not history:
                        continue
                    where = bucket(len(candidates(history).words()))
                    contradicts = not is_consistent(turn.guess, history)
                    seen[where] += 1
                    bad[where] += contradicts
                    repeats += turn.guess in [guess for guess, _ in history]
                    if contradicts and turn.guess in words:
                        bad_answers += 1
                        bad_sft += turn.guess in sft
            total = sum(seen.values())
            if not total:  # every reply failed the format: no guess was made with feedback in view
                print(f"  {player['label']}, {player['opening']:<9} no valid guess with feedback in view")
                continue
            split = "  ".join(f"{b}: {bad[b]}/{seen[b]} ({bad[b] / max(1, seen[b]):.0%})" for b in BUCKETS)
            print(
                f"  {player['label']}, {player['opening']:<9} won {player['metrics']['win_rate']['rate']:.1%}  "
                f"contradicting {sum(bad.values()) / total:.1%}  repeats {repeats / total:.1%} | by answers left: {split} | "
                f"SFT's secrets {bad_sft}/{bad_answers} ({bad_sft / max(1, bad_answers):.0%})"
            )


if __name__ == "__main__":
    main()
