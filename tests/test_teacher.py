"""The supervised teacher (wordle/teacher.py): its thinks on fixed states, word for word, repeated letters among them;
every claim of a think read back and checked against wordle/ on thousands of states; and the teacher's own games."""

from __future__ import annotations

import random
import re

import pytest

from wordle import candidates, eval_secrets, history_for, parse_completion, score_guess, train_secrets
from wordle.game import count, play
from wordle.teacher import LEVELS, Knowledge, Teacher, think_text
from wordle.words import MAX_GUESSES

# (the secret, the guesses so far, the think at the richest level, at the most compact one)
THINKS = [
    (
        "GRAPE",
        [],
        (
            "No feedback yet: all 2315 answers fit.\n"
            "RAISE fits, and its feedback splits the 2315 into 132 groups of at most 168."
        ),
        "No feedback yet: all 2315 answers fit.\nRAISE: 132 groups of at most 168.",
    ),
    (
        "GRAPE",
        ["CRANE"],
        (
            "In place: R at 2, A at 3, E at 5.\nNot in the word: C N.\n13 answers fit, such as BRAKE, ERASE, GRAVE.\n"
            "GRADE fits, and its feedback splits the 13 into 5 groups of at most 5."
        ),
        "In place: R2 A3 E5.\nNot in the word: C N.\n13 answers fit.\nGRADE: 5 groups of at most 5.",
    ),
    # SPEED against ABIDE is BBYBY: the first E takes the only E, the second is grey. E is no absent letter (the
    # rewards' rule): the word holds exactly one.
    (
        "ABIDE",
        ["SPEED"],
        (
            "Elsewhere: E not 3, 4; D not 5.\nNot in the word: S P.\nExactly one E.\n70 answers fit, such as ABODE, "
            "DECOY, FUDGE.\nABIDE fits, and its feedback splits the 70 into 28 groups of at most 9."
        ),
        "Elsewhere: E not 3,4; D not 5.\nNot in the word: S P.\n70 answers fit.\nABIDE: 28 groups of at most 9.",
    ),
    # Three E in EERIE, one grey: exactly two E, one of them placed.
    (
        "ELDER",
        ["EERIE", "RAISE"],
        (
            "In place: E at 1.\nElsewhere: E not 2, 5; R not 1, 3.\nNot in the word: I A S.\nExactly two E.\n"
            "7 answers fit, such as ELDER, ERECT, EVERY.\nENTER fits, and its feedback splits the 7 into 5 groups of at "
            "most 2."
        ),
        "In place: E1.\nElsewhere: R not 1,3.\nNot in the word: I A S.\n7 answers fit.\nENTER: 5 groups of at most 2.",
    ),
    # Two L marked, none grey: at least two.
    (
        "LLAMA",
        ["ALLOT"],
        (
            "In place: L at 2.\nElsewhere: A not 1; L not 3.\nNot in the word: O T.\nAt least two L.\n"
            "2 answers fit: FLAIL, LLAMA.\nFLAIL fits, and its feedback tells all 2 apart."
        ),
        "In place: L2.\nElsewhere: A not 1.\nNot in the word: O T.\n2 answers fit.\nFLAIL: all 2 apart.",
    ),
    (
        "SASSY",
        ["ASSES"],
        "In place: S at 3.\nElsewhere: A not 1; S not 2, 5.\nNot in the word: E.\nAt least three S.\nOnly SASSY fits.",
        "In place: S3.\nElsewhere: A not 1.\nNot in the word: E.\nOnly SASSY fits.",
    ),
]


@pytest.mark.parametrize(("secret", "guesses", "richest", "compact"), THINKS, ids=[f"{t[0]}{t[1]}" for t in THINKS])
def test_thinks_on_fixed_states(secret, guesses, richest, compact):
    history = history_for(secret, guesses)
    guess, replies = Teacher().replies(history)
    assert replies[0] == f"<think>\n{richest}\n</think>\n\n<guess>{guess}</guess>"
    assert replies[-1] == f"<think>\n{compact}\n</think>\n\n<guess>{guess}</guess>"
    for level, reply in zip(LEVELS, replies, strict=True):
        assert parse_completion(reply) == guess
        assert claims_hold(history, reply, secret) > 0, level


# --- reading a think back ---------------------------------------------------------------------------------------

COLUMN = r"([A-Z])(?: at |)([1-5])"
LINES = {
    "placed": re.compile(rf"In place: ({COLUMN}(?:(?:, | ){COLUMN})*)\."),
    "elsewhere": re.compile(r"Elsewhere: (.+)\."),
    "absent": re.compile(r"Not in the word: ([A-Z](?: [A-Z])*)\."),
    "counts": re.compile(r"((?:Exactly|At least) .+)\."),
    "first": re.compile(r"No feedback yet: all (\d+) answers fit\."),
    "left": re.compile(r"(\d+) answers fit(?:(?::|, such as) ([A-Z, ]+))?\."),
    "only": re.compile(r"Only ([A-Z]{5}) fits\."),
    "long": re.compile(
        r"([A-Z]{5}) fits, and its feedback (?:tells all (\d+) apart|splits the (\d+) into (\d+) groups of at most "
        r"(\d+))\."
    ),
    "short": re.compile(r"([A-Z]{5}): (?:all (\d+) apart|(\d+) groups of at most (\d+))\."),
}
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


def claims_hold(history, reply: str, secret: str) -> int:
    """Read every line of the think back, check each claim against wordle/ (the answers that fit, the feedback
    given, the secret), and return how many claims were checked. Any line it cannot read fails."""
    think = reply.split("<think>\n", 1)[1].split("\n</think>", 1)[0]
    assert "<" not in think and not re.search(r"\bturn\b|\bguess(es)? ?\d|\bof 6\b", think, re.IGNORECASE)
    fits = candidates(history).words()
    assert secret in fits
    guess = parse_completion(reply)
    marks = [(g[i], i, p[i]) for g, p in history for i in range(5)]
    checked = 0

    def every_fit(claim, what: str) -> None:
        nonlocal checked
        bad = [w for w in fits if not claim(w)]
        assert not bad, f"{what}: not true of {bad[:3]} (think: {think!r})"
        checked += 1

    seen: set[str] = set()
    for line in think.split("\n"):
        kind, match = next(((k, m) for k, r in LINES.items() if (m := r.fullmatch(line))), (None, None))
        assert kind is not None, f"a line the reader does not know: {line!r}"
        assert kind not in seen, f"two {kind} lines"
        seen.add(kind)
        if kind == "placed":
            for letter, col in re.findall(COLUMN, match[1]):
                c = int(col) - 1
                assert (letter, c, "G") in marks, f"{letter} at {col} was never marked in place"
                every_fit(lambda w, letter=letter, c=c: w[c] == letter, f"{letter} at {col}")
        elif kind == "elsewhere":
            for cell in match[1].split("; "):
                letter, cols = re.fullmatch(r"([A-Z]) not ([1-5](?:, ?[1-5])*)", cell).groups()
                assert (letter, "Y") in {(m[0], m[2]) for m in marks}, f"{letter} was never marked elsewhere"
                every_fit(lambda w, letter=letter: letter in w, f"{letter} in the word")
                for col in re.findall(r"[1-5]", cols):
                    c = int(col) - 1
                    assert any(m[0] == letter and m[1] == c and m[2] != "G" for m in marks)
                    every_fit(lambda w, letter=letter, c=c: w[c] != letter, f"{letter} not at {col}")
        elif kind == "absent":
            for letter in match[1].split():
                assert {m[2] for m in marks if m[0] == letter} == {"B"}, f"{letter} was marked present"
                every_fit(lambda w, letter=letter: letter not in w, f"{letter} absent")
        elif kind == "counts":
            for cell in match[1].split("; "):
                how, number, letter = re.fullmatch(r"(exactly|at least) (\w+) ([A-Z])", cell, re.IGNORECASE).groups()
                n = NUMBERS[number]
                if how.lower() == "exactly":
                    every_fit(lambda w, letter=letter, n=n: w.count(letter) == n, f"exactly {n} {letter}")
                else:
                    assert n > 1
                    every_fit(lambda w, letter=letter, n=n: w.count(letter) >= n, f"at least {n} {letter}")
        elif kind == "first":
            assert not history and int(match[1]) == len(fits)
            checked += 1
        elif kind == "left":
            assert history and int(match[1]) == len(fits) > 1
            named = [] if match[2] is None else match[2].split(", ")
            assert set(named) <= set(fits) and guess not in named or len(fits) <= 3
            checked += 1 + len(named)
        elif kind == "only":
            assert fits == [match[1]] == [guess]
            checked += 1
        else:
            assert match[1] == guess and guess in fits  # the teacher says answers that fit
            codes = candidates(history).codes([guess])[0]
            sizes = [int((codes == c).sum()) for c in set(codes.tolist())]
            numbers = [int(x) for x in match.groups()[1:] if x is not None]
            if len(numbers) == 1:  # "tells all N apart"
                assert numbers[0] == len(fits) == len(sizes)
            else:
                expect = [len(fits), len(sizes), max(sizes)] if kind == "long" else [len(sizes), max(sizes)]
                assert numbers == expect
            checked += 1
    # What the richest think must hold: every mark of the feedback is in some line.
    return checked


# Thinks with one false claim each: the reader must refuse every one, or it would prove nothing.
FALSE = [
    ("E at 4, never marked there", "In place: R at 2, A at 3, E at 4.\n13 answers fit.\nGRADE: 5 groups of at most 5."),
    ("A present, said absent", "Not in the word: C N A.\n13 answers fit.\nGRADE: 5 groups of at most 5."),
    ("the count of answers", "In place: R2 A3 E5.\n12 answers fit.\nGRADE: 5 groups of at most 5."),
    ("a named word that does not fit", "13 answers fit, such as CRANE.\nGRADE: 5 groups of at most 5."),
    ("the groups", "13 answers fit.\nGRADE: 6 groups of at most 5."),
    ("a letter count", "Exactly two E.\n13 answers fit.\nGRADE: 5 groups of at most 5."),
    ("a turn number", "This is turn 2.\n13 answers fit.\nGRADE: 5 groups of at most 5."),
    ("a line it cannot read", "The answer is surely GRADE.\n13 answers fit.\nGRADE: 5 groups of at most 5."),
]


@pytest.mark.parametrize(("what", "think"), FALSE, ids=[f[0] for f in FALSE])
def test_the_reader_refuses_a_false_claim(what, think):
    history = history_for("GRAPE", ["CRANE"])
    with pytest.raises(AssertionError):
        claims_hold(history, f"<think>\n{think}\n</think>\n\n<guess>GRADE</guess>", "GRAPE")


def states(n: int, seed: int) -> list[tuple[tuple, str]]:
    """``n`` states of the sft secrets from every opening the builder uses (training.sft_data)."""
    from training.sft_data import sample_states

    return [(h, s) for h, s, _ in sample_states(n, seed, train_secrets("sft"), Teacher())]


def test_every_claim_of_every_think_is_true_on_thousands_of_states():
    teacher = Teacher()
    checked = 0
    for history, secret in states(2000, seed=7):
        guess, replies = teacher.replies(history)
        assert guess in candidates(history).words()
        for reply in replies:
            checked += claims_hold(history, reply, secret)
        # The richest think names every mark the feedback gave: each placed letter, each letter marked elsewhere,
        # each letter marked only absent.
        knowledge = Knowledge.of(history)
        think = replies[0]
        for col, letter in knowledge.placed.items():
            assert f"{letter} at {col + 1}" in think
        for letter in knowledge.elsewhere:
            assert f" {letter} not " in think or f"Elsewhere: {letter} not " in think
        for letter in knowledge.absent:
            assert re.search(rf"Not in the word:[A-Z ]* {letter}[ .]", think)
    assert checked > 20_000


@pytest.mark.parametrize(
    ("history", "absent", "exactly", "at_least"),
    [
        ((("SPEED", "BBYBY"),), ("S", "P"), {"E": 1}, {}),  # the grey E is a copy, not an absent letter
        ((("ALLOT", "YGYBB"),), ("O", "T"), {}, {"L": 2}),
        ((("EERIE", "GYYBB"),), ("I",), {"E": 2}, {}),
        ((("CRANE", "BBBBB"), ("ERROR", "BBBBB")), ("C", "R", "A", "N", "E", "O"), {}, {}),
    ],
)
def test_knowledge_follows_the_rewards_rule_for_repeated_letters(history, absent, exactly, at_least):
    knowledge = Knowledge.of(history)
    assert knowledge.absent == absent
    assert knowledge.exactly == exactly
    assert knowledge.at_least == at_least


def test_each_level_is_shorter_than_the_one_before():
    history = history_for("OUTER", ["STORE", "ROUTE"])
    texts = [think_text(history, "OUTER", level) for level in LEVELS]
    assert [len(t) for t in texts] == sorted((len(t) for t in texts), reverse=True)


class TeacherPlayer:
    name = "teacher"

    def __init__(self) -> None:
        self.teacher = Teacher()

    def replies(self, views):
        return [self.teacher.replies(v.history)[1][0] for v in views]


def test_the_teachers_games_win_99_percent_of_the_held_out_secrets_in_at_most_3_65_guesses():
    games = play(TeacherPlayer(), eval_secrets())
    counts = count(games)
    assert counts.wins / counts.games >= 0.99
    assert sum(counts.won_guesses) / counts.wins <= 3.65
    assert counts.inconsistent == 0 and counts.format_failures == 0


def test_states_never_come_from_validation_or_held_out_secrets():
    allowed_secrets = set(train_secrets("sft"))
    rng = random.Random(0)
    for history, secret in rng.sample(states(500, seed=1), 200):
        assert secret in allowed_secrets
        assert len(history) < MAX_GUESSES and all(score_guess(g, secret) == p for g, p in history)
