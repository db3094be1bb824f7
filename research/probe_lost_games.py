"""Why a model loses the games it loses: per lost game, whether a reply broke the format, a guess contradicted the
feedback, or neither (every guess could still have been the secret), from each opening of an ``evaluate.py --out`` run.

    python evaluate.py --model tiny --adapter OUT --split val --openings own answer allowed answer:2 --no_baselines --out /tmp/val
    python research/probe_lost_games.py /tmp/val/eval.json [more eval.json files]

A game lost with neither is one that reading the feedback did not win: the answers still possible outnumbered the
guesses left (a family such as BATTY, CATTY, FATTY, PATTY, TATTY), and a player that only guesses them wins it by
luck; the entropy solver wins such games with guesses that rule several of them out at once, which contradict the
feedback on purpose. For those games it prints the secret and the answers still possible before the last guess.
Prints figures, never asserts; read validation runs only.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from wordle import candidates, is_consistent
from wordle.game import Game


def why_lost(game: Game) -> tuple[str, int]:
    """``format`` (a reply broke it), else ``contradicts`` (a guess could not be the secret), else ``neither``; and
    the answers still possible before the game's last valid guess."""
    kind, left = "neither", 0
    for turn, history in zip(game.turns, game.histories(), strict=True):
        if turn.status != "valid":
            kind = "format"
            continue
        left = len(candidates(history).words())
        if history and not is_consistent(turn.guess, history) and kind == "neither":
            kind = "contradicts"
    return kind, left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("eval_json", nargs="+", help="eval.json files written by evaluate.py --out")
    totals: collections.Counter = collections.Counter()
    for path in parser.parse_args().eval_json:
        print(path)
        for player in json.loads(Path(path).read_text())["players"]:
            if player["kind"] == "baseline":
                continue
            kinds: collections.Counter = collections.Counter()
            families = []
            for data in player["games"]:
                game = Game.from_dict(data)  # its start is the given opening
                if game.won:
                    continue
                kind, left = why_lost(game)
                kinds[kind] += 1
                if kind == "neither":
                    families.append(f"{game.secret} ({left} left)")
            totals.update({(player["opening"], k): v for k, v in kinds.items()})
            totals[(player["opening"], "games")] += len(player["games"])
            print(
                f"  {player['label']}, {player['opening']:<9} lost {sum(kinds.values())}/{len(player['games'])}: "
                f"format {kinds['format']}, contradicts {kinds['contradicts']}, neither {kinds['neither']}"
                + (f" | {', '.join(families)}" if families else "")
            )
    openings = dict.fromkeys(opening for opening, _ in totals)
    print("over every file:")
    for opening in openings:
        games, kinds = totals[(opening, "games")], [totals[(opening, k)] for k in ("format", "contradicts", "neither")]
        print(
            f"  {opening:<9} lost {sum(kinds)}/{games}: format {kinds[0]}, contradicts {kinds[1]}, neither {kinds[2]}"
        )


if __name__ == "__main__":
    main()
