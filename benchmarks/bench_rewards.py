"""Cost of ``info_gain_reward`` against a faithful pure-Python copy of the course's ``guess_value``.

    python benchmarks/bench_rewards.py

The batch is what GRPO scores in one step: 256 completions, 32 game states x 8 generations,
states with 0 to 4 past guesses (solver and random play mixed), guesses that are allowed words.
Our cost is the median over repeats of (batch time / 256), with the pattern matrix and the
opening-information table already loaded (as after a run's first step) and nothing else kept
between repeats. The course's cost is the median over a sample of the same completions, each
timed alone (each takes milliseconds), over two pools: ours (the answers; the values must match)
and the course's own design (its whole accepted-word list).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from rewards import info_gain_reward
from wordle import Solver, allowed, answers, format_feedback, pattern_matrix, score_guess


# --- The course's algorithm (DeepLearning.AI / Predibase, "guess_value"), re-implemented as it
# --- runs there: filter by re-scoring every word against every past guess, then group patterns.
def course_validate_guess(secret: str, guess: str, raw_feedback: bool = False):
    feedback = []
    secret_list = list(secret)
    for i, (g_char, s_char) in enumerate(zip(guess, secret)):
        if g_char == s_char:
            feedback.append(f"{g_char}(✓) ")
            secret_list[i] = None
        else:
            feedback.append(None)
    for i, g_char in enumerate(guess):
        if feedback[i] is None:
            if g_char in secret_list:
                feedback[i] = f"{g_char}(-) "
                secret_list[secret_list.index(g_char)] = None
            else:
                feedback[i] = f"{g_char}(x) "
    if raw_feedback:
        return feedback
    return "".join(feedback).strip()


def course_filter_candidates(all_candidate_words, past_guesses):
    filtered = []
    for word in all_candidate_words:
        valid = True
        for past_guess, past_feedback in past_guesses:
            if course_validate_guess(word, past_guess) != past_feedback:
                valid = False
                break
        if valid:
            filtered.append(word)
    return filtered


def course_guess_value(all_candidate_words, past_guesses, guess) -> float:
    candidates = course_filter_candidates(all_candidate_words, past_guesses)
    total = len(candidates)
    if total == 0:
        return 0.0
    current_entropy = math.log2(total)
    groups: dict[str, list[str]] = {}
    for word in candidates:
        feedback = course_validate_guess(word, guess, raw_feedback=True)
        key = "".join("1" if "✓" in fb else ("0" if "-" in fb else "x") for fb in feedback)
        groups.setdefault(key, []).append(word)
    expected_entropy = 0.0
    for group in groups.values():
        p = len(group) / total
        expected_entropy += p * (math.log2(len(group)) if group else 0)
    expected_gain = current_entropy - expected_entropy
    return expected_gain / current_entropy if current_entropy > 0 else 0.0


def make_batch(rng: random.Random, n_states: int, generations: int):
    solver = Solver()
    words, secrets_pool = allowed(), answers()
    completions, histories, secrets = [], [], []
    for s in range(n_states):
        secret = rng.choice(secrets_pool)
        depth = s % 5  # 0..4 past guesses, evenly
        history: list[list[str]] = []
        while len(history) < depth:
            guess = solver.next_guess(history) if rng.random() < 0.5 else rng.choice(words)
            if guess == secret:
                break
            history.append([guess, score_guess(guess, secret)])
        for _ in range(generations):
            guess = rng.choice(words)
            completions.append(f"<think>try {guess}</think><guess>{guess}</guess>")
            histories.append(history)
            secrets.append(secret)
    return completions, histories, secrets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, default=32)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--course-sample", type=int, default=40, help="completions timed with the course algorithm")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    pattern_matrix()  # load (or build) once, outside the timings
    completions, histories, secrets = make_batch(rng, args.states, args.generations)
    n = len(completions)

    ours = info_gain_reward(completions, past_guess_history=histories, secret=secrets)
    per_completion = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        info_gain_reward(completions, past_guess_history=histories, secret=secrets)
        per_completion.append((time.perf_counter() - start) / n)
    ours_us = statistics.median(per_completion) * 1e6

    # Two baselines. Like for like: the course's algorithm over our pool (the 2315 answers), which
    # must return our values. As written: the course filters its whole word list, the list that
    # also decides validity, which here is the 12972 accepted words.
    sample = rng.sample(range(n), min(args.course_sample, n))
    pools = {
        "like for like, pool = 2315 answers": list(answers()),
        "as written, pool = 12972 accepted words": list(allowed()),
    }
    print(f"batch: {n} completions ({args.states} states x {args.generations} generations, 0-4 past guesses)")
    print(f"info_gain_reward (pattern matrix): median {ours_us:9.2f} us/completion over {args.repeats} batches")
    for label, pool in pools.items():
        times, max_diff = [], 0.0
        for i in sample:
            past = [(g, format_feedback(g, p, notation="course")) for g, p in histories[i]]
            guess = completions[i].split("<guess>")[1].split("</guess>")[0]
            start = time.perf_counter()
            value = course_guess_value(pool, past, guess)
            times.append(time.perf_counter() - start)
            # The course scores a single remaining candidate 0; ours scores guessing it 1.0 by design.
            if len(pool) == len(answers()) and len(course_filter_candidates(pool, past)) > 1:
                max_diff = max(max_diff, abs(value - ours[i]))
        course_us = statistics.median(times) * 1e6
        check = f", max |ours - course| {max_diff:.1e}" if len(pool) == len(answers()) else ""
        print(
            f"course guess_value, {label}: median {course_us:9.0f} us/completion "
            f"over {len(sample)} completions -> {course_us / ours_us:,.0f}x{check}"
        )


if __name__ == "__main__":
    main()
