"""Games per second through a vLLM server against vLLM in this process, on the same games.

Start a server on the embedded model first, in the environment with vLLM (docs/several-gpus.md, "vLLM generation"):

    python -m vllm.entrypoints.openai.api_server --model tinymodel/model --dtype float32 --port 8000 &
    python benchmarks/bench_vllm_server.py --url http://127.0.0.1:8000 --games 50

Prints each backend's time for the greedy games (the in-process engine's start is not counted) and
checks that both played the same games. The server gets each turn's requests at once
(``ServerEngine.concurrency``); ``--concurrency 1`` measures one request at a time.
"""

from __future__ import annotations

import argparse
import os
import time

from evaluation.run import evaluate_model, select_secrets
from evaluation.vllm_backend import LocalEngine, ServerEngine
from models.loading import load_generation_side, load_vllm


def timed(engine, tokenizer, secrets) -> tuple[float, list]:
    start = time.perf_counter()
    [result] = evaluate_model(engine, tokenizer, secrets)
    return time.perf_counter() - start, [[t.reply for t in g.turns] for g in result.games]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--games", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    source, _, tokenizer, generation = load_generation_side("tiny")
    secrets = select_secrets(args.games, split="val")  # timing only, but never on the held-out secrets
    server = ServerEngine(args.url, generation, model=("tiny", source), concurrency=args.concurrency)
    local = LocalEngine(load_vllm(source, None, seed=0)[0], generation)
    timed(server, tokenizer, secrets[:2])  # warm both up: the first requests compile and allocate
    timed(local, tokenizer, secrets[:2])
    server_s, server_games = timed(server, tokenizer, secrets)
    local_s, local_games = timed(local, tokenizer, secrets)
    print(f"{args.games} greedy games, embedded model")
    print(f"  vLLM in process:  {local_s:6.2f} s  {args.games / local_s:6.1f} games/s")
    print(
        f"  vLLM server:      {server_s:6.2f} s  {args.games / server_s:6.1f} games/s (concurrency {args.concurrency})"
    )
    print(f"  same games: {server_games == local_games}")


if __name__ == "__main__":
    main()
