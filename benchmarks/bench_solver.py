"""Play the greedy maximum-entropy solver against every answer.

    python benchmarks/bench_solver.py            # all 2315 answers
    python benchmarks/bench_solver.py --limit 200

Prints wins, the mean number of guesses, the distribution and the wall time, which includes
loading the pattern matrix (from the disk cache, or building it on a first run).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np

from wordle import MAX_GUESSES, Solver, answers


def main() -> None:
    parser = argparse.ArgumentParser(description="Play the greedy entropy solver against every answer.")
    parser.add_argument("--limit", type=int, default=None, help="play only the first N answers")
    args = parser.parse_args()

    secrets = answers()[: args.limit]
    start = time.perf_counter()
    solver = Solver()
    games = [solver.play(secret) for secret in secrets]
    wall = time.perf_counter() - start

    wins = [len(g) for g in games if g[-1][1] == "GGGGG"]
    losses = len(games) - len(wins)
    dist = Counter(wins)
    print(f"games: {len(games)}  wins: {len(wins)}  losses: {losses}")
    print(f"mean guesses (wins): {np.mean(wins):.4f}  total guesses: {sum(wins)}")
    print("distribution: " + "  ".join(f"{k}:{dist[k]}" for k in range(1, MAX_GUESSES + 1)) + f"  X:{losses}")
    print(f"opener: {solver.next_guess(())}  wall time: {wall:.2f} s")


if __name__ == "__main__":
    main()
