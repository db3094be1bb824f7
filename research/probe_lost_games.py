"""Why a model loses the games it loses: per lost game, whether a reply broke the format, a guess contradicted the
feedback, or neither (every guess could still have been the secret), from each opening of an ``evaluate.py --out`` run.

    python evaluate.py --adapter OUT --split val --openings own answer allowed answer:2 --no_baselines --out /tmp/val
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

from wordle import candidates
from wordle.game import Game, judged_guesses


def why_lost(game: Game) -> tuple[str, int]:
    """``format`` (a reply broke it, or was no word), else ``contradicts`` (a guess could not be the secret, as
    evaluate.py judges it), else ``neither``; and the answers still possible before the game's last valid guess."""
    judged = list(judged_guesses(game))
    left = len(candidates(judged[-1][1]).words()) if judged else 0
    if any(turn.status != "valid" for turn in game.turns):
        return "format", left
    return ("contradicts" if any(contradicts for _, _, contradicts, _ in judged) else "neither"), left


CAUSES = ("format", "contradicts", "neither")  # each lost game counts once, as the first that applies


def summary(kinds: collections.Counter) -> str:
    """``kinds``: games lost by cause, and ``games``, every game played."""
    lost = sum(kinds[cause] for cause in CAUSES)
    return f"lost {lost}/{kinds['games']}: " + ", ".join(f"{cause} {kinds[cause]}" for cause in CAUSES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("eval_json", nargs="+", help="eval.json files written by evaluate.py --out")
    totals: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)  # by opening
    for path in parser.parse_args().eval_json:
        print(path)
        for player in json.loads(Path(path).read_text())["players"]:
            if player["kind"] == "baseline":
                continue
            kinds: collections.Counter = collections.Counter(games=len(player["games"]))
            families = []
            for game in map(Game.from_dict, player["games"]):  # each start is the given opening
                if game.won:
                    continue
                kind, left = why_lost(game)
                kinds[kind] += 1
                if kind == "neither":
                    families.append(f"{game.secret} ({left} left)")
            totals[player["opening"]].update(kinds)
            print(
                f"  {player['label']}, {player['opening']:<9} {summary(kinds)}"
                + (f" | {', '.join(families)}" if families else "")
            )
    print("over every file:")
    for opening, kinds in totals.items():
        print(f"  {opening:<9} {summary(kinds)}")


if __name__ == "__main__":
    main()
