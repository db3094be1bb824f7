"""The game loop: whole games of Wordle, turn by turn, many games advancing together.

The one loop that both the evaluation's players and the training rollout drive, so that a game
played in training and one played in evaluation cannot drift apart. It knows nothing of models:
a :class:`Player` turns each game's view into one raw reply, and the loop reads that reply
exactly as the rewards do (``parse_completion``, ``normalize_word``, ``is_allowed``):

- ``valid``: an allowed word; it is scored against the secret and joins the game's history;
- ``format``: the reply does not parse, or its guess is not five ASCII letters;
- ``nonword``: five letters, but not a word Wordle accepts.

An invalid reply uses up its turn and is kept in the transcript, but gets no feedback, so the
next prompt shows only the valid guesses (see :class:`GameView`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from wordle.completion import parse_completion
from wordle.feedback import score_guess
from wordle.prompts import render_prompt
from wordle.solver import is_consistent
from wordle.words import MAX_GUESSES, eval_secrets, is_allowed, normalize_word

Status = Literal["valid", "format", "nonword"]
History = tuple[tuple[str, str], ...]


def classify_reply(reply: str) -> tuple[Status, str | None]:
    """``(status, WORD)`` of a raw reply, judged exactly as ``format_reward`` judges it.

    WORD is the upper-case five-letter guess for ``valid`` and ``nonword`` replies, else None.
    """
    word = normalize_word(parse_completion(reply))
    if word is None:
        return "format", None
    return ("valid" if is_allowed(word) else "nonword"), word


def format_reply(word: str, think: str = "") -> str:
    return f"<think>{think}</think><guess>{word}</guess>"


@dataclass(frozen=True)
class Turn:
    turn: int  # 1-based, counting the start's guesses
    reply: str
    status: Status
    guess: str | None  # the parsed five-letter word (valid or nonword), else None
    pattern: str | None  # G/Y/B feedback, valid turns only


@dataclass
class Game:
    """One game: the secret, the guesses it started from (a dataset row may start mid-way), and
    the turns played."""

    secret: str
    turns: list[Turn] = field(default_factory=list)
    start: History = ()

    @property
    def history(self) -> History:
        """The valid (GUESS, PATTERN) pairs so far: what the player is shown."""
        return self.start + tuple((t.guess, t.pattern) for t in self.turns if t.status == "valid")

    def histories(self) -> list[History]:
        """The history shown before each played turn, in order (the start, then the valid turns so far)."""
        out, history = [], self.start
        for turn in self.turns:
            out.append(history)
            if turn.status == "valid":
                history = (*history, (turn.guess, turn.pattern))
        return out

    @property
    def won(self) -> bool:
        """The last guess is the secret: the player's, or the start's when it holds the secret (a given opening)."""
        if self.turns:
            return self.turns[-1].status == "valid" and self.turns[-1].guess == self.secret
        return bool(self.start) and self.start[-1][0] == self.secret

    @property
    def over(self) -> bool:
        return self.won or self.guesses >= MAX_GUESSES

    @property
    def guesses(self) -> int:
        """Turns used, the start's and invalid ones included (a win in 4 may hold one invalid turn)."""
        return len(self.start) + len(self.turns)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "secret": self.secret,
            "won": self.won,
            "guesses": self.guesses,
            "turns": [t.__dict__ for t in self.turns],
        }
        if self.start:
            data["start"] = [list(pair) for pair in self.start]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Game:
        start = tuple(tuple(pair) for pair in data.get("start", ()))
        return cls(data["secret"], [Turn(**t) for t in data["turns"]], start)


@dataclass(frozen=True)
class GameView:
    """What a player sees: the valid history and the turn number, never the secret. ``game`` is
    the game's index in the list :func:`play` was given, for players that keep per-game records.

    Only valid guesses are shown, so the prompt of a turn is ``render_prompt(history)``, exactly a
    training row's prompt (training rows never contain invalid turns). The cost: after an invalid
    turn the prompt says "Guess k" with k one lower than the turns actually used.
    """

    history: History
    turn: int
    game: int = 0

    @property
    def prompt(self) -> list[dict[str, str]]:
        return render_prompt(self.history)


class Player(Protocol):
    name: str

    def replies(self, views: Sequence[GameView]) -> list[str]:
        """One raw reply per game, in order."""
        ...


def play(player: Player, secrets: Sequence[str] | None = None, starts: Sequence[History] | None = None) -> list[Game]:
    """Play one full game per secret (default: the 300 held-out ``eval_secrets()``), each from its
    ``starts`` history if given (valid guesses already made; the caller checks they are the
    secret's feedback).

    All games advance together: each turn, one ``player.replies`` call serves every active game.
    """
    secrets = eval_secrets() if secrets is None else secrets
    starts = [()] * len(secrets) if starts is None else starts
    if len(starts) != len(secrets):
        raise ValueError(f"{len(starts)} start histories for {len(secrets)} secrets")
    games = []
    for secret, start in zip(secrets, starts, strict=True):
        word = normalize_word(secret)
        if word is None:
            raise ValueError(f"secret {secret!r} is not a five-letter word")
        games.append(Game(word, start=tuple((g, p) for g, p in start)))
    begin = getattr(player, "start", None)
    if begin is not None:
        begin()  # a fresh random stream, so the same player and seed replay the same games
    while active := [(i, g) for i, g in enumerate(games) if not g.over]:
        views = [GameView(g.history, g.guesses + 1, i) for i, g in active]
        replies = player.replies(views)
        if len(replies) != len(active):
            raise ValueError(f"player {player.name} returned {len(replies)} replies for {len(active)} games")
        for (_, game), reply in zip(active, replies, strict=True):
            status, word = classify_reply(reply)
            pattern = score_guess(word, game.secret) if status == "valid" else None
            game.turns.append(Turn(game.guesses + 1, reply, status, word, pattern))
    return games


def play_guesses(secret: str, n_past: int, choose: Callable[[list[tuple[str, str]]], str]) -> list[tuple[str, str]]:
    """Up to ``n_past`` guesses ``choose(history)`` against ``secret``, stopping before one that would win."""
    history: list[tuple[str, str]] = []
    while len(history) < n_past:
        guess = choose(history)
        if guess == secret:
            break
        history.append((guess, score_guess(guess, secret)))
    return history


@dataclass(frozen=True)
class GameCounts:
    """What the games' metrics are counted from: evaluation adds intervals, training logs rates."""

    games: int
    wins: int
    won_guesses: tuple[int, ...]  # guesses used by each won game
    turns: int  # turns played (not the start's)
    format_failures: int
    nonwords: int
    valid: int
    informed: int  # valid guesses made with feedback in view (a history before them)
    inconsistent: int  # valid guesses that could not be the secret given the feedback so far
    repeated: int  # valid guesses already made in the game


def judged_guesses(game: Game) -> Iterator[tuple[int, History, bool, bool]]:
    """Each valid guess of ``game``: its turn number (the start's guesses counted), the history shown
    before it, whether it contradicts that feedback and whether it repeats an earlier guess."""
    for k, (turn, history) in enumerate(zip(game.turns, game.histories(), strict=True), start=len(game.start) + 1):
        if turn.status == "valid":
            yield k, history, not is_consistent(turn.guess, history), any(turn.guess == g for g, _ in history)


def count(games: Sequence[Game]) -> GameCounts:
    turns = [t for g in games for t in g.turns]
    valid = informed = inconsistent = repeated = 0
    for game in games:
        for _, history, contradicts, repeats in judged_guesses(game):
            valid += 1
            informed += bool(history)
            inconsistent += contradicts
            repeated += repeats
    return GameCounts(
        games=len(games),
        wins=sum(g.won for g in games),
        won_guesses=tuple(g.guesses for g in games if g.won),
        turns=len(turns),
        format_failures=sum(t.status == "format" for t in turns),
        nonwords=sum(t.status == "nonword" for t in turns),
        valid=valid,
        informed=informed,
        inconsistent=inconsistent,
        repeated=repeated,
    )
