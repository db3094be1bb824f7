"""Reward functions on fixed transcripts, the hacks a policy tries, and properties on random states."""

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewards import (
    DEFAULT_WEIGHTS,
    GAME_WEIGHTS,
    NO_GUESS_FEEDBACK,
    REWARD_FUNCS,
    REWARD_RANGES,
    TURN_REWARDS,
    feedback_reward,
    format_reward,
    get_reward_funcs,
    info_gain_reward,
    total_reward,
    win_reward,
)
from wordle import allowed, answers, candidates, history_for, is_allowed


def reply(word: str, think: str = "reasoning") -> str:
    return f"<think>{think}</think><guess>{word}</guess>"


def score(fn, completion, history=(), secret="ROBIN"):
    return fn([completion], past_guess_history=[list(map(list, history))], secret=[secret])[0]


# The hacks a policy finds, each scored by every reward below.
HACKS = {
    "two guess tags": "<think>x</think><guess>ROBIN</guess><guess>CRANE</guess>",
    "guess only inside think": "<think><guess>ROBIN</guess></think>",
    "guess inside think and outside": "<think><guess>ROBIN</guess></think><guess>CRANE</guess>",
    "text after </guess>": "<think>x</think><guess>ROBIN</guess> I am sure.",
    "truncated": "<think>x</think><guess>ROB",
    "no think": "<guess>ROBIN</guess>",
    "bare word": "ROBIN",
    "empty": "",
    "non-word": reply("RBOIN"),
    "six letters": reply("ROBINS"),
    "Cyrillic look-alike": reply("RОBIN"),  # О is U+041E
    "ligature": reply("ROBﬀ"),
    "100 kB of garbage": "<" * 50_000 + "guess>" * 8_000,
    "100 kB think then nothing": "<think>" + "x" * 100_000,
}


# --- format_reward -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, expected",
    [
        (reply("CRANE"), 1.0),  # allowed word
        (reply("crane"), 1.0),  # any case
        (reply(" Crane\n"), 1.0),  # whitespace around WORD is stripped
        ("\n <think>\nmulti\nline\n</think>\n<guess>ROBIN</guess>\n", 1.0),  # whitespace between parts
        (reply("AAHED"), 1.0),  # accepted guess that can never be a secret
        (reply("ABCDE"), 0.5),  # five letters, not a word
        (reply("CRANES"), 0.1),  # parses, six letters
        (reply("CR4NE"), 0.1),  # parses, digit
        (reply("СRANE"), 0.1),  # parses, Cyrillic С: not ASCII
        (reply(""), 0.1),  # parses, empty word
        (HACKS["two guess tags"], 0.0),
        (HACKS["guess only inside think"], 0.0),
        (HACKS["text after </guess>"], 0.0),
        (HACKS["truncated"], 0.0),
        (HACKS["empty"], 0.0),
        (HACKS["100 kB of garbage"], 0.0),
        ([{"role": "assistant", "content": reply("CRANE")}], 1.0),  # chat-format completion
    ],
)
def test_format_reward(completion, expected):
    assert score(format_reward, completion) == expected


# --- feedback_reward -----------------------------------------------------------------------------

# SPEED against ABIDE is BBYBY: S, P absent; E yellow at 2 and grey at 3 (ABIDE has one E, so E is
# NOT absent); D yellow at 4.
SPEED = [("SPEED", "BBYBY")]
# CRANE against ROBIN is BYBYB: C, A, E absent; R yellow at 1; N yellow at 3.
CRANE = [("CRANE", "BYBYB")]
# ROBOT against ROBIN is GGGBB: O green at 1 and grey at 3 (one O in ROBIN), T absent.
ROBOT = [("ROBOT", "GGGBB")]


@pytest.mark.parametrize(
    "word, history, expected",
    [
        ("ROBIN", [], 0.1),  # no history yet
        # A .05 + B .05 + I .05 + D moved .1 + E moved .1
        ("ABIDE", SPEED, 0.35),
        # S -.5 + P -.5 + E at its yellow spot -.2 + E elsewhere .1 + D at its yellow spot -.2
        ("SPEED", SPEED, -1.3),
        # E moved .1 + D moved .1 + G .05 + E moved .1 + S absent -.5
        ("EDGES", SPEED, -0.15),
        # R moved .1 + O .05 + B .05 + I .05 + N moved .1
        ("ROBIN", CRANE, 0.35),
        # C -.5 + R repeated -.2 + A -.5 + N repeated -.2 + E -.5
        ("CRANE", CRANE, -1.9),
        # R, O, B greens kept .2 each + I .05 + N .05
        ("ROBIN", ROBOT, 0.7),
        # Three greens .6; O at 3 was grey there but green elsewhere: not absent, .05; T -.5
        ("ROBOT", ROBOT, 0.15),
        ("ROBIN", [("ROBIN", "GGGGG")], 1.0),  # the maximum
        ("CRANE", [("CRANE", "BBBBB")], -2.5),  # the minimum
        ("robin", CRANE, 0.35),  # any case
        ("RBOIN", CRANE, 0.35),  # a non-word is scored on its letters (format_reward judges words)
    ],
)
def test_feedback_reward(word, history, expected):
    assert score(feedback_reward, reply(word), history) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("hack", ["two guess tags", "truncated", "six letters", "Cyrillic look-alike", "empty"])
def test_feedback_reward_without_a_five_letter_guess_is_the_floor(hack):
    assert score(feedback_reward, HACKS[hack], CRANE) == NO_GUESS_FEEDBACK == -2.5
    assert score(feedback_reward, HACKS[hack], []) == -2.5


# --- info_gain_reward ----------------------------------------------------------------------------

ONE_LEFT = history_for("ROBIN", ["CRANE", "SPLIT"])  # leaves ROBIN alone


@pytest.mark.parametrize(
    "word, history, secret, expected",
    [
        ("SOARE", [], "ROBIN", 0.526623),  # 5.8860 bits over 2315 answers, / log2(2315)
        ("CRANE", [], "ROBIN", 0.513813),
        ("ROBIN", [], "ROBIN", 0.429897),  # the secret itself is not the most informative opener
        ("ROBIN", ONE_LEFT, "ROBIN", 1.0),  # one candidate left: guessing it is all there is to learn
        ("CRANE", ONE_LEFT, "ROBIN", 0.0),  # ... and anything else learns nothing
        ("AAHED", [], "AAHED", 0.390640),  # a secret outside the answers joins the pool (2316 words)
        ("ABCDE", [], "ROBIN", 0.0),  # not an allowed word
    ],
)
def test_info_gain_reward(word, history, secret, expected):
    assert score(info_gain_reward, reply(word), history, secret) == pytest.approx(expected, abs=1e-6)


def test_info_gain_two_candidates():
    history = history_for("HATCH", ["CRANE", "BOTCH", "MILKY", "PLUSH"])
    cands = candidates(history)
    assert cands.words() == ["HATCH", "WATCH"]
    # A candidate splits the two perfectly: one bit out of log2(2) = 1.
    for word in cands.words():
        assert score(info_gain_reward, reply(word), history, "HATCH") == pytest.approx(1.0)


def test_info_gain_batch_equals_row_by_row():
    rng = random.Random(1)
    completions, histories, secrets = [], [], []
    for _ in range(12):
        secret = rng.choice(answers())
        history = [list(p) for p in history_for(secret, rng.sample(allowed(), rng.randrange(4)))]
        for _ in range(4):
            completions.append(reply(rng.choice(allowed())) if rng.random() < 0.8 else "junk")
            histories.append(history)
            secrets.append(secret)
    batch = info_gain_reward(completions, past_guess_history=histories, secret=secrets)
    single = [
        info_gain_reward([c], past_guess_history=[h], secret=[s])[0] for c, h, s in zip(completions, histories, secrets)
    ]
    assert batch == single


# --- win_reward ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, expected",
    [
        (reply("ROBIN"), 1.0),
        (reply("robin"), 1.0),  # any case
        (reply("CRANE"), 0.0),
        (HACKS["guess only inside think"], 0.0),  # the secret, but not as the guess
        (HACKS["two guess tags"], 0.0),
        (HACKS["text after </guess>"], 0.0),
        (HACKS["Cyrillic look-alike"], 0.0),
        ("<think>the answer is ROBIN</think><guess>CRANE</guess>", 0.0),
    ],
)
def test_win_reward(completion, expected):
    assert score(win_reward, completion, [], "ROBIN") == expected


# --- registry ------------------------------------------------------------------------------------


def test_registry_names_are_metric_keys():
    assert list(TURN_REWARDS) == [
        "format_reward",
        "feedback_reward",
        "info_gain_reward",
        "candidate_reward",
        "win_reward",
    ]
    assert list(REWARD_FUNCS) == [*TURN_REWARDS, "game_reward"]
    assert all(name == fn.__name__ for name, fn in REWARD_FUNCS.items())
    assert set(REWARD_FUNCS) == set(REWARD_RANGES)
    assert set(DEFAULT_WEIGHTS) <= set(TURN_REWARDS) and set(GAME_WEIGHTS) - set(TURN_REWARDS) == {"game_reward"}
    assert get_reward_funcs(["win_reward", "format_reward"]) == [win_reward, format_reward]
    assert get_reward_funcs() == list(TURN_REWARDS.values())


def test_unknown_reward_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown reward 'speed_reward'; valid: format_reward, feedback_reward"):
        get_reward_funcs(["speed_reward"])


@pytest.mark.parametrize(
    "history, secret, message",
    [
        ([["CRANE", "GGXBB"]], "ROBIN", "row 0: past_guess_history pattern 'GGXBB'"),
        ([["CRAN", "GGBBB"]], "ROBIN", "row 0: past_guess_history guess 'CRAN'"),
        ([["CRANE"]], "ROBIN", "not a \\[GUESS, PATTERN\\] pair"),
        ("CRANE:GGBBB", "ROBIN", "must be a list"),
        ([], "ROB", "row 0: secret 'ROB'"),
    ],
)
def test_malformed_row_names_row_and_field(history, secret, message):
    with pytest.raises(ValueError, match=message):
        info_gain_reward([reply("CRANE")], past_guess_history=[history], secret=[secret])


# --- ordering rules and properties ---------------------------------------------------------------

states = st.tuples(st.sampled_from(answers()), st.lists(st.sampled_from(allowed()), max_size=5)).map(
    lambda t: (t[0], [list(p) for p in history_for(t[0], [g for g in t[1] if g != t[0]])])
)


def totals(completions, secret, history):
    n = len(completions)
    return total_reward(completions, past_guess_history=[history] * n, secret=[secret] * n)


def hacks_for(secret, history):
    """Hacks aimed at this state: the secret smuggled past the parser, and non-words that stack
    every green and yellow the history revealed (the most feedback_reward a non-word can earn)."""
    known = {i: g[i] for g, p in history for i, m in enumerate(p) if m == "G"}
    stacked = "".join(known.get(i, secret[i]) for i in range(5))
    non_words = [w for w in (stacked, secret[1:] + secret[0], secret[::-1], "QXZJV") if not is_allowed(w)]
    return [
        *HACKS.values(),
        f"<think><guess>{secret}</guess></think>",
        f"<think>x</think><guess>{secret}</guess><guess>{secret}</guess>",
        f"<think>x</think><guess>{secret}</guess>!",
        *(reply(w) for w in non_words),
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states, st.lists(st.sampled_from(allowed()), min_size=1, max_size=6))
def test_ordering_a_hacks_total_below_every_allowed_word(state, guesses):
    secret, history = state
    # The worst honest guesses: words built from the letters the history marked absent.
    absent = {g[i] for g, p in history for i, m in enumerate(p) if m == "B"}
    worst = [w for w in allowed() if set(w) <= absent][:3]
    honest = totals([reply(w) for w in guesses + worst], secret, history)
    hacked = totals(hacks_for(secret, history), secret, history)
    assert max(hacked) < min(honest)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states, st.lists(st.sampled_from(allowed()), min_size=1, max_size=6))
def test_ordering_b_the_secret_beats_everything_else(state, guesses):
    secret, history = state
    others = [reply(w) for w in guesses if w != secret] + hacks_for(secret, history)
    # The candidates still possible are the strongest rivals (high feedback and information).
    others += [reply(w) for w in candidates(history).words()[:5] if w != secret]
    win, *rest = totals([reply(secret)] + others, secret, history)
    assert win > max(rest)


def test_ordering_a_worst_case_by_hand():
    # Every letter of CRANE known absent: re-guessing it earns the feedback floor, and still beats
    # a broken reply and a non-word that stacks the secret's letters.
    history = [["CRANE", "BBBBB"]]
    honest, broken, non_word = totals([reply("CRANE"), HACKS["two guess tags"], reply("TOILY")], "MOIST", history)
    assert not is_allowed("TOILY")
    assert broken < honest and non_word < honest
    assert honest == pytest.approx(1.0 + 0.1 * -2.5 + 0.0)  # format + feedback + information (none left to learn)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(), st.text(alphabet="<>/thinkguesTHINKGUES ROBIN\n"), st.binary().map(lambda b: b.decode("latin-1"))
    ),
    states,
)
def test_no_reward_raises_and_all_stay_in_range(text, state):
    secret, history = state
    for name, fn in TURN_REWARDS.items():
        low, high = REWARD_RANGES[name]
        for completion in (
            text,
            reply(text),
            f"<think>{text}</think><guess>{text[:5]}</guess>",
            [{"role": "assistant", "content": text}],
        ):
            value = fn([completion], past_guess_history=[history], secret=[secret])[0]
            assert isinstance(value, float) and low <= value <= high and not math.isnan(value)


@settings(max_examples=100, deadline=None)
@given(states, st.sampled_from(allowed()))
def test_allowed_guesses_stay_in_range(state, word):
    secret, history = state
    for name, fn in TURN_REWARDS.items():
        low, high = REWARD_RANGES[name]
        assert low <= score(fn, reply(word), history, secret) <= high


def test_every_hack_totals_below_an_honest_guess_on_a_fixed_state():
    history = [list(p) for p in history_for("ROBIN", ["CRANE"])]
    honest = totals([reply("BISON")], "ROBIN", history)[0]
    for name, total in zip(HACKS, totals(list(HACKS.values()), "ROBIN", history)):
        assert total < honest, name


def test_default_weights_keep_the_documented_margins():
    # The worst cases behind rules (a) and (b), from each reward's range, so the rules hold for any
    # state, including hand-made histories that no real game produces.
    w = DEFAULT_WEIGHTS
    fb_low, fb_high = REWARD_RANGES["feedback_reward"]
    best_non_word = 0.5 * w["format_reward"] + fb_high * w["feedback_reward"]
    worst_allowed_word = 1.0 * w["format_reward"] + fb_low * w["feedback_reward"]
    assert best_non_word < worst_allowed_word
    assert NO_GUESS_FEEDBACK * w["feedback_reward"] < worst_allowed_word
    most_others_add = (fb_high - fb_low) * w["feedback_reward"] + 1.0 * w["info_gain_reward"]
    assert w["win_reward"] > most_others_add
