"""The supervised warm start's rows: game states of the ``sft`` secrets answered by the teacher (``wordle.teacher``), in
a think that fits the reply budget, as a ``datasets`` dataset in TRL's conversational prompt/completion format with a
card, so that ``datasets.load_dataset(DIR)`` and ``trl sft --dataset_name DIR`` read it as it is.

States come from the openings the evaluation plays (its own, a random answer, a random allowed word, two random
answers), each followed by the teacher to the end of the game, and from explored histories (half the guesses the
teacher's, half a random candidate or allowed word, as ``training.data`` builds GRPO's rows). A state is kept at most
``MAX_COPIES`` times: the empty board opens every game from its own opening.

The budget is counted in generated tokens: the reply as the chat template renders it (the canonical form, which
templates keep unchanged) and the end-of-turn token. Each reply is written at the richest level of
``wordle.teacher.LEVELS`` that fits ``Budget.target``; none over ``Budget.cap`` is kept.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from rich.console import Console
from rich.progress import Progress

from settings.errors import ConfigError
from training.data import play_state
from wordle import (
    MAX_GUESSES,
    is_allowed,
    parse_completion,
    render_prompt,
    score_guess,
    train_secrets,
)
from wordle.completion import completion_text
from wordle.openings import Opening
from wordle.teacher import LEVELS, Teacher

logger = logging.getLogger(__name__)

# Where the states start, with the share of games of each. The openings are the evaluation's own (evaluate.py
# --openings own answer allowed answer:2); "explored" is a history of half the teacher's guesses and half random ones.
SOURCES = {"own": 0.2, "answer": 0.2, "allowed": 0.2, "answer:2": 0.15, "explored": 0.25}
EXPLORE = 0.5  # the share of random guesses in an explored history
MAX_COPIES = 20
DATA_FILE = "train.parquet"
CARD = "README.md"
STATS_FILE = "build.json"  # what the card says, for a program


@dataclass(frozen=True)
class Budget:
    """A reply budget in generated tokens (the GRPO stage's ``max_completion_length``).

    ``target``: a reply's tokens at most, where its think can shrink to that (70%: the rest is room for what a policy
    adds to a think it learnt). ``cap``: no reply over it is kept: 8 under the budget, which holds the 4 tokens more
    that a tokenizer without single-token think tags (Qwen2.5's) spends on them, and as many again."""

    tokens: int

    @property
    def target(self) -> int:
        return int(self.tokens * 0.70)

    @property
    def cap(self) -> int:
        return self.tokens - 8


@dataclass
class BuildStats:
    """What a build made: the dataset card's figures."""

    rows: int
    unique_states: int
    budget: int
    target: int
    cap: int
    tokenizer: str
    secrets: str
    seed: int
    sources: dict[str, int]
    levels: dict[int, int]
    reply_tokens: dict[str, float] = field(default_factory=dict)  # p50, p99, max, share within target
    dropped: int = 0  # states whose shortest reply was over the cap


def _history_states(secret: str, start: tuple, teacher: Teacher) -> list[tuple[tuple[str, str], ...]]:
    """The states a game from ``start`` meets as the teacher plays it to the end: the history before each guess."""
    history = tuple(start)
    states = []
    while len(history) < MAX_GUESSES:
        states.append(history)
        guess = teacher.guess(history)
        if guess == secret:
            break
        history = (*history, (guess, score_guess(guess, secret)))
    return states


def sample_states(
    n_rows: int, seed: int, secrets: Sequence[str], teacher: Teacher
) -> list[tuple[tuple[tuple[str, str], ...], str, str]]:
    """``n_rows`` (history, secret, source) states, deterministic in ``seed``; each distinct history at most
    ``MAX_COPIES`` times."""
    rng = random.Random(seed)
    kinds, weights = list(SOURCES), list(SOURCES.values())
    openings = {kind: Opening.parse(kind) for kind in kinds if kind != "explored"}
    copies: Counter = Counter()
    deck: list[str] = []
    out = []
    stale = 0
    while len(out) < n_rows:
        if not deck:
            deck = list(secrets)
            rng.shuffle(deck)
        secret = deck.pop()
        kind = rng.choices(kinds, weights)[0]
        if kind == "explored":
            # Half the teacher's guesses, half a random candidate or allowed word, up to five, not won: as GRPO's rows.
            start = tuple(play_state(secret, rng.randrange(1, MAX_GUESSES), rng, teacher.solver, EXPLORE))
        else:
            start = openings[kind].start(secret, rng.randrange(2**31))
        added = 0
        for history in _history_states(secret, start, teacher):
            if copies[history] < MAX_COPIES and len(out) < n_rows:
                copies[history] += 1
                out.append((history, secret, kind))
                added += 1
        stale = 0 if added else stale + 1
        if stale > 10 * len(secrets):  # every state these secrets can reach is in already, MAX_COPIES times
            raise ConfigError(f"the {len(secrets)} secrets hold fewer than {n_rows} states: ask for fewer rows")
    return out


def _token_counts(tokenizer: Any, texts: list[str]) -> list[int]:
    """Generated tokens of each reply: its own tokens and the end-of-turn token."""
    if not texts:
        return []
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [len(x) + 1 for x in ids]


def build_sft_rows(
    n_rows: int,
    seed: int,
    tokenizer: Any,
    budget: Budget,
    secrets: Sequence[str] | None = None,
    progress: bool = False,
) -> tuple[list[dict[str, Any]], BuildStats]:
    """``n_rows`` supervised rows and what the build made (see the module docstring)."""
    secrets = train_secrets("sft") if secrets is None else tuple(secrets)
    teacher = Teacher()
    with Progress(console=Console(stderr=True), transient=True, disable=not progress) as bar:
        task = bar.add_task("playing the teacher's games", total=None)
        states = sample_states(n_rows, seed, secrets, teacher)
        bar.update(task, description="writing thinks")
        replies = {}
        for history, _, _ in states:
            if history not in replies:
                replies[history] = teacher.replies(history)
        bar.update(task, description="counting tokens")
        distinct = list(replies)
        chosen: dict[tuple, tuple[int, int]] = {}  # history -> (level, tokens)
        pending = distinct
        for level in range(len(LEVELS)):
            counts = _token_counts(tokenizer, [replies[h][1][level] for h in pending])
            last = level == len(LEVELS) - 1
            for history, n in zip(pending, counts, strict=True):
                if n <= budget.target or (last and n <= budget.cap):
                    chosen[history] = (level, n)
            pending = [h for h in pending if h not in chosen]
    rows, dropped = [], 0
    for history, secret, source in states:
        if history not in chosen:
            dropped += 1
            continue
        level, n = chosen[history]
        guess, texts = replies[history]
        rows.append(
            {
                "prompt": render_prompt(history),
                "completion": [{"role": "assistant", "content": texts[level]}],
                "secret": secret,
                "past_guess_history": [list(pair) for pair in history],
                "guess": guess,
                "source": source,
                "level": level,
                "reply_tokens": n,
            }
        )
    if not rows:
        raise ConfigError(
            f"max_completion_length {budget.tokens} cannot hold the teacher's shortest reply with this tokenizer "
            f"(over {budget.cap} tokens): raise --max-completion"
        )
    tokens = np.array([r["reply_tokens"] for r in rows])
    stats = BuildStats(
        rows=len(rows),
        unique_states=len({tuple(map(tuple, r["past_guess_history"])) for r in rows}),
        budget=budget.tokens,
        target=budget.target,
        cap=budget.cap,
        tokenizer=str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__),
        secrets="sft" if tuple(secrets) == train_secrets("sft") else f"{len(secrets)} given",
        seed=seed,
        sources=dict(Counter(r["source"] for r in rows)),
        levels={level: int(c) for level, c in sorted(Counter(r["level"] for r in rows).items())},
        reply_tokens={
            "p50": float(np.percentile(tokens, 50)),
            "p99": float(np.percentile(tokens, 99)),
            "max": int(tokens.max()),
            "within_target": float(np.mean(tokens <= budget.target)),
        },
        dropped=dropped,
    )
    return rows, stats


# --- files: the dataset directory --------------------------------------------------------------------------------


def save_sft_dataset(rows: Sequence[dict[str, Any]], stats: BuildStats, directory: str | Path) -> Path:
    """``directory/train.parquet``, its card (``README.md``, which ``datasets`` reads for the split) and ``build.json``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(list(rows)).to_parquet(str(directory / DATA_FILE))
    (directory / STATS_FILE).write_text(json.dumps(asdict(stats), indent=1) + "\n")
    (directory / CARD).write_text(dataset_card(stats))
    return directory


def dataset_card(stats: BuildStats) -> str:
    levels = ", ".join(f"level {k}: {v}" for k, v in stats.levels.items())
    sources = ", ".join(f"{k} {v}" for k, v in stats.sources.items())
    t = stats.reply_tokens
    return f"""---
configs:
- config_name: default
  data_files:
  - split: train
    path: {DATA_FILE}
task_categories:
- text-generation
tags:
- wordle
- sft
- trl
- conversational
---

# Wordle supervised warm start

{stats.rows} rows ({stats.unique_states} distinct game states) in TRL's conversational prompt/completion format: `prompt`
is the game state as the GRPO trainer and `evaluate.py` show it (the rules as a system message, then the guesses so
far), `completion` is the teacher's reply, `<think>\\n…\\n</think>\\n\\n<guess>WORD</guess>`. Made by
`python sft_train.py` (wordle-grpo, `training/sft_data.py`); read it with `datasets.load_dataset(DIR)` or
`trl sft --dataset_name DIR`.

- **Secrets:** the `{stats.secrets}` part of the training secrets only; no validation or held-out secret appears.
- **Teacher:** among the answers still possible, the one of most expected information (`wordle/teacher.py`). Its
  think states what the feedback established (letters in place, letters elsewhere with the columns they are not in,
  letters absent, exact or least counts of repeated letters), how many answers fit, and what the guess does for them.
- **Where states start:** {sources} (an opening of the evaluation's, then the teacher's game; or an explored history).
- **Budget:** replies written for `max_completion_length` {stats.budget}, counted with `{stats.tokenizer}` as the chat
  template renders them, end-of-turn token included: at most {stats.target} where the think can shrink to that, none
  over {stats.cap}. Reply tokens: median {t.get("p50", 0):g}, 99th percentile {t.get("p99", 0):g}, longest
  {t.get("max", 0)}; {t.get("within_target", 0):.1%} within {stats.target}. Think levels (0 richest): {levels}.
  States whose shortest reply did not fit: {stats.dropped}.
- **Other columns:** `secret`, `past_guess_history` (`[GUESS, G/Y/B]` pairs), `guess`, `source`, `level`,
  `reply_tokens`. Seed {stats.seed}.
"""


def load_sft_dataset(directory: str | Path) -> datasets.Dataset:
    """A supervised dataset directory (or one .parquet/.jsonl file), checked row by row: ValueError naming the first
    row that is not a conversational prompt/completion pair whose reply parses as an allowed guess."""
    path = Path(directory)
    if path.is_dir():
        files = sorted([*path.glob("*.parquet"), *path.glob("*.jsonl")])
        if not files:
            raise ValueError("holds no .parquet or .jsonl file")
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"dataset {path} does not exist")
    fmt = "parquet" if files[0].suffix == ".parquet" else "json"
    bars = not datasets.utils.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        data = datasets.load_dataset(fmt, data_files=[str(f) for f in files], split="train", keep_in_memory=True)
    except datasets.exceptions.DatasetGenerationError as exc:
        cause = exc.__cause__ or exc
        raise ValueError(f"not a readable {fmt} file ({str(cause).splitlines()[0]})") from None
    finally:
        if bars:
            datasets.enable_progress_bars()
    for i, row in enumerate(data):
        check_sft_row(i, row)
    if len(data) == 0:
        raise ValueError("it holds no rows")
    return data


def check_sft_row(index: int, row: dict[str, Any]) -> None:
    where = f"row {index + 1}"
    for column in ("prompt", "completion"):
        messages = row.get(column)
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "content" in m for m in messages or [0]):
            raise ValueError(f"{where}: {column} must be a list of chat messages ({{'role', 'content'}})")
    guess = parse_completion(completion_text(row["completion"]))
    if guess is None or not is_allowed(guess):
        reply = completion_text(row["completion"])[:60]
        raise ValueError(
            f"{where}: the completion {reply!r} is not a reply <think>…</think><guess>WORD</guess> of an allowed word"
        )


def check_budget(data: datasets.Dataset, tokenizer: Any, budget: Budget, source: str) -> None:
    """ConfigError when a reply of ``data`` takes more than the budget's cap with this tokenizer."""
    counts = _token_counts(tokenizer, [completion_text(c) for c in data["completion"]])
    over = [i for i, n in enumerate(counts) if n > budget.cap]
    if over:
        raise ConfigError(
            f"dataset {source}: row {over[0] + 1}'s reply takes {counts[over[0]]} tokens with this tokenizer, over "
            f"{budget.cap} (max_completion_length {budget.tokens} less 8), and {len(over)} of {len(counts)} rows are: "
            "rebuild it for this budget (another --dataset path), or raise --max-completion"
        )
