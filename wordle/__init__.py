"""Wordle: the single source of game truth (words, feedback, candidates, entropy, solver, prompts).

Nothing here knows about rewards or training; ``rewards/`` and the trainer build on this.
"""

from wordle.completion import completion_text, parse_completion
from wordle.feedback import (
    ALL_GREEN,
    N_PATTERNS,
    code_to_pattern,
    pattern_codes,
    pattern_matrix,
    pattern_to_code,
    score_guess,
)
from wordle.prompts import (
    SYSTEM_PROMPT,
    format_feedback,
    format_history,
    history_for,
    parse_feedback,
    parse_history,
    render_prompt,
    row_history,
    row_secret,
)
from wordle.solver import (
    CandidateSet,
    Solver,
    best_guess,
    candidates,
    entropy_bits,
    information,
    information_many,
    is_consistent,
)
from wordle.words import (
    EVAL_SIZE,
    MAX_GUESSES,
    WORD_LENGTH,
    allowed,
    answers,
    eval_secrets,
    is_allowed,
    non_answers,
    normalize_word,
    spread,
    train_secrets,
)

__all__ = [
    "ALL_GREEN",
    "EVAL_SIZE",
    "MAX_GUESSES",
    "N_PATTERNS",
    "SYSTEM_PROMPT",
    "WORD_LENGTH",
    "CandidateSet",
    "Solver",
    "allowed",
    "answers",
    "best_guess",
    "candidates",
    "code_to_pattern",
    "completion_text",
    "entropy_bits",
    "eval_secrets",
    "format_feedback",
    "format_history",
    "history_for",
    "information",
    "information_many",
    "is_allowed",
    "is_consistent",
    "non_answers",
    "normalize_word",
    "parse_completion",
    "parse_feedback",
    "parse_history",
    "pattern_codes",
    "pattern_matrix",
    "pattern_to_code",
    "render_prompt",
    "row_history",
    "row_secret",
    "score_guess",
    "spread",
    "train_secrets",
]
