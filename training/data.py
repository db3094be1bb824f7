"""Training data: single-turn game states, the held-out evaluation secrets, and dataset files.

A row is one game state: ``prompt`` (chat messages rendered by ``wordle.render_prompt``),
``secret`` and ``past_guess_history`` (a list of ``[GUESS, PATTERN]`` pairs, PATTERN in G/Y/B),
the columns the rewards read.
"""

from __future__ import annotations

import ast
import json
import logging
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import datasets
from rich.console import Console
from rich.progress import Progress

from settings.errors import ConfigError
from wordle import (
    MAX_GUESSES,
    Solver,
    allowed,
    candidates,
    eval_secrets,
    is_allowed,
    parse_feedback,
    render_prompt,
    row_history,
    row_secret,
    score_guess,
    train_secrets,
)
from wordle.game import format_reply, play_guesses
from wordle.openings import DRAWN, OWN, Opening

logger = logging.getLogger(__name__)


def held_out_rows(rows: Iterable[dict[str, Any]]) -> int:
    """How many rows use a held-out evaluation secret (``wordle.eval_secrets``, the split that the
    shipped model's build_info.json names as ``training.data.eval_secrets``)."""
    held_out = set(eval_secrets())
    return sum(str(row["secret"]).upper() in held_out for row in rows)


def play_state(secret: str, n_past: int, rng: random.Random, solver: Solver, explore: float) -> list[tuple[str, str]]:
    """A history of up to ``n_past`` guesses against ``secret`` that has not yet won.

    Each guess is the solver's with probability ``1 - explore``; otherwise it is exploratory,
    half the time a random still-possible answer and half the time a random allowed word, so
    that histories include the imperfect play a policy produces. A guess that would win ends
    the history early: the state before it is kept.
    """

    def choose(history: list[tuple[str, str]]) -> str:
        if rng.random() >= explore:
            return solver.next_guess(history)
        if rng.random() < 0.5:
            return rng.choice(candidates(history).words())
        return rng.choice(allowed())

    return play_guesses(secret, n_past, choose)


def make_row(secret: str, history: Sequence[tuple[str, str]], system_prompt: str | None = None) -> dict[str, Any]:
    kwargs = {} if system_prompt is None else {"system_prompt": system_prompt}
    return {
        "prompt": render_prompt(history, **kwargs),
        "secret": secret,
        "past_guess_history": [[g, p] for g, p in history],
    }


def game_starts(secrets: Sequence[str], share: float, seed: int) -> list[dict[str, Any]]:
    """Game mode's start states: each secret once, a ``share`` of them opened by guesses the model did not
    choose (one random answer or allowed word, a third of the time two), the rest from no guess at all, where
    it plays its own opening. Deterministic in ``seed``. Every state the model ever played followed its own
    opening, and it learnt to follow that opening instead of reading the feedback: started elsewhere, it has
    to read it."""
    rng = random.Random(seed)
    rows = []
    for secret in secrets:
        opening = OWN
        if rng.random() < share:
            opening = Opening(rng.choice(DRAWN), rng.choice((1, 1, 2)))
        rows.append(make_row(secret, opening.start(secret, seed)))
    return rows


def build_rows(
    n_rows: int,
    seed: int,
    secrets: Sequence[str] | None = None,
    explore: float = 0.3,
    solver: Solver | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """``n_rows`` game states from ``secrets`` (the training secrets by default), deterministic in ``seed``.

    Secrets are dealt from repeated shuffles, so each is used about equally; the number of past
    guesses is uniform over 0..5 (fewer when the game would already have been won). ``progress``
    shows a bar on stderr: 2000 rows take about 20 s.
    """
    secrets = list(train_secrets() if secrets is None else secrets)
    if not secrets:
        raise ValueError("no secrets to build game states from")
    rng = random.Random(seed)
    solver = solver or Solver()
    rows: list[dict[str, Any]] = []
    deck: list[str] = []
    with Progress(console=Console(stderr=True), transient=True, disable=not progress) as bar:
        for _ in bar.track(range(n_rows), description="building game states"):
            if not deck:
                deck = secrets.copy()
                rng.shuffle(deck)
            secret = deck.pop()
            history = play_state(secret, rng.randrange(MAX_GUESSES), rng, solver, explore)
            rows.append(make_row(secret, history))
    return rows


# --- files --------------------------------------------------------------------------------------

_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def _course_history(row: str, value: Any) -> list[list[str]]:
    """The course CSV's ``past_guess_history``: a string holding a list of [GUESS, 'C(x) R(✓) …'] pairs."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return []
    try:
        pairs = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ValueError(f"{row}: past_guess_history {value!r} is not a list of [GUESS, FEEDBACK] pairs") from None
    if not isinstance(pairs, (list, tuple)):
        raise ValueError(f"{row}: past_guess_history {value!r} is not a list of [GUESS, FEEDBACK] pairs")
    out = []
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise ValueError(f"{row}: past_guess_history entry {pair!r} is not a [GUESS, FEEDBACK] pair")
        guess, feedback = pair
        if len(feedback.strip()) == 5:  # already G/Y/B
            out.append([guess, feedback.strip()])
            continue
        try:
            letters, pattern = parse_feedback(f"{guess}: {feedback}", notation="course")
        except ValueError as exc:
            raise ValueError(f"{row}: past_guess_history: {exc}") from None
        out.append([letters, pattern])
    return out


def validate_rows(
    rows: Iterable[dict[str, Any]], system_prompt: str | None = None, where: Callable[[int], str] | None = None
) -> list[dict[str, Any]]:
    """Rows checked and normalised: ValueError naming the row and field of the first bad one.

    ``where(i)`` names the i-th row (0-based) as a user finds it: "row 1" for the first by default,
    "line N" for a file (see ``load_rows``).

    Beyond each field's form, the history must be what the secret would have produced, and the
    game must not already be over; either would make every reward on that row meaningless.
    The prompt is re-rendered from the history, so a file's prompts can never disagree with it.
    """
    where = where or (lambda i: f"row {i + 1}")
    out = []
    for i, row in enumerate(rows):
        for field in ("secret", "past_guess_history"):
            if row.get(field) is None:  # files with a column missing from some rows give None there
                raise ValueError(f"{where(i)}: missing field {field!r}")
        secret = row_secret(where(i), row["secret"])
        history = row_history(where(i), row["past_guess_history"])
        # Any word the rewards and the evaluation would refuse as a guess is no game: a typo, or a dataset
        # made for another word list.
        if not is_allowed(secret):
            raise ValueError(f"{where(i)}: secret {secret} is not an allowed word (wordle/data/wordle_allowed.txt)")
        unknown = next((g for g, _ in history if not is_allowed(g)), None)
        if unknown is not None:
            raise ValueError(f"{where(i)}: past_guess_history guess {unknown} is not an allowed word")
        for guess, pattern in history:
            if score_guess(guess, secret) != pattern:
                raise ValueError(
                    f"{where(i)}: past_guess_history says {guess} scored {pattern} against {secret}, "
                    f"but it scores {score_guess(guess, secret)}"
                )
        if len(history) >= MAX_GUESSES or any(g == secret for g, _ in history):
            raise ValueError(f"{where(i)}: past_guess_history is a finished game (won or out of guesses)")
        out.append(make_row(secret, history, system_prompt))
    return out


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows from a JSONL, JSON, parquet or course-style CSV file, validated (see ``validate_rows``)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError("a directory, not a dataset file")
    if not path.is_file():
        raise FileNotFoundError(f"dataset file {path} does not exist")
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"dataset file {path}: unknown format {path.suffix!r}; use one of {', '.join(_FORMATS)}")
    if fmt in ("json", "csv"):  # datasets' readers stop on an empty file with a StopIteration
        data = path.read_bytes()
        check_utf8(data)
        lines = [line for line in data.splitlines() if line.strip()]
        if len(lines) <= (fmt == "csv"):  # a CSV's first line is its header
            raise ValueError("the file is empty: it holds no rows")
    # keep_in_memory and no cache dir: a small local file, and nothing written beside it. Quiet: a
    # few rows need no progress bar, and a bad file is reported once, by the caller, as one line.
    bars = not datasets.utils.are_progress_bars_disabled()
    verbosity = datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its ERROR record repeats the parse error
    try:
        raw = datasets.load_dataset(fmt, data_files=str(path), split="train", keep_in_memory=True)
    except datasets.exceptions.DatasetGenerationError as exc:
        raise ValueError(_unreadable(path, fmt, exc)) from None
    finally:
        datasets.logging.set_verbosity(verbosity)
        if bars:
            datasets.enable_progress_bars()
    rows = raw.to_list()
    if not rows:  # an empty parquet table
        raise ValueError("the file is empty: it holds no rows")
    where = _row_namer(path, fmt, len(rows))
    if fmt == "csv":
        for i, row in enumerate(rows):
            if "past_guess_history" in row:
                row["past_guess_history"] = _course_history(where(i), row["past_guess_history"])
    return validate_rows(rows, where=where)


def check_utf8(data: bytes) -> None:
    """ValueError naming the first line that is not UTF-8 text. A byte-order mark and Windows line endings are
    UTF-8 still, and datasets' readers take them; a file saved in another encoding would fail deep inside them."""
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(
            f"line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}, {exc.reason}): save the file as UTF-8"
        ) from None


def _unreadable(path: Path, fmt: str, exc: Exception) -> str:
    """Why ``datasets`` could not read the file: for JSON Lines, the first line that is not JSON."""
    if fmt == "json":
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            try:
                if line.strip():
                    json.loads(line)
            except json.JSONDecodeError as bad:
                return f"line {number}: not valid JSON ({bad.msg})"
    cause = exc.__cause__ or exc
    return f"not a readable {fmt} file ({str(cause).splitlines()[0] if str(cause) else type(cause).__name__})"


def _row_namer(path: Path, fmt: str, n_rows: int) -> Callable[[int], str]:
    """How a user finds row i of the file: its line number in a JSONL or CSV file, else its 1-based row."""
    if fmt == "csv":
        return lambda i: f"line {i + 2}"  # line 1 is the header
    if fmt == "json":
        # JSON Lines: blank lines hold no row, so count the lines that do.
        numbers = [n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if line.strip()]
        if len(numbers) == n_rows:
            return lambda i: f"line {numbers[i]}"
    return lambda i: f"row {i + 1}"


def save_rows(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write rows as JSONL or parquet (by suffix) through ``datasets``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ds = datasets.Dataset.from_list(list(rows))
    if path.suffix.lower() == ".parquet":
        ds.to_parquet(str(path))
    elif path.suffix.lower() in (".jsonl", ".json"):
        ds.to_json(str(path), lines=True, force_ascii=False)
    else:
        raise ValueError(f"dataset file {path}: can only write .jsonl or .parquet")
    return path


def check_rows_fill_a_step(rows: int, args: Any, game: bool, source: str | None = None) -> None:
    """ConfigError unless ``rows`` fill one step: TRL's sampler drops a last partial batch, so a dataset
    smaller than one step would train no step at all, in silence. A step takes ``generation_batch_size``
    completions over every process: a prompt's ``num_generations`` replies (turn mode), or a start state's
    games, one sample per turn slot (game mode). ``source``: the dataset file the rows came from, if any."""
    per_row = args.num_generations * (MAX_GUESSES if game else 1)
    needed = args.generation_batch_size // per_row
    if rows < needed:
        kind = "start states" if game else "game states"
        data = "the data" if source is None else f"dataset {source}"
        raise ConfigError(
            f"one step takes {needed} {kind}, and {data} has {rows}: add rows, or lower "
            "--per_device_train_batch_size or --gradient_accumulation_steps"
        )


def check_reply_fits(tokenizer: Any, max_completion_length: int) -> None:
    """ConfigError unless a completion can hold the shortest reply that scores: an empty think, a word and eos.
    A shorter limit clips every completion, so every reward is the floor and GRPO learns nothing."""
    shortest = len(tokenizer(format_reply("CRANE"), add_special_tokens=False)["input_ids"]) + 1
    if max_completion_length < shortest:
        raise ConfigError(
            f"max_completion_length {max_completion_length} cannot hold the shortest reply, "
            f"{format_reply('CRANE')!r} + eos, which takes {shortest} tokens with this tokenizer: raise --max-completion"
        )


def drop_long_prompts(ds: datasets.Dataset, tokenizer: Any, max_prompt_tokens: int) -> datasets.Dataset:
    """Rows whose templated prompt fits in ``max_prompt_tokens``; logs how many were dropped.

    TRL no longer truncates prompts, and a truncated game state would be a different game.
    """
    lengths = [
        len(tokenizer.apply_chat_template(p, tokenize=True, add_generation_prompt=True, return_dict=False))
        for p in ds["prompt"]
    ]
    keep = [i for i, n in enumerate(lengths) if n <= max_prompt_tokens]
    dropped = len(ds) - len(keep)
    if dropped:
        logger.warning("dropped %d of %d prompts longer than %d tokens", dropped, len(ds), max_prompt_tokens)
    else:
        logger.info("all %d prompts fit in %d tokens (longest %d)", len(ds), max_prompt_tokens, max(lengths, default=0))
    return ds.select(keep) if dropped else ds
