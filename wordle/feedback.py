"""Feedback: the G/Y/B marks of a guess against an answer, and the precomputed pattern matrix.

A pattern is five marks, ``G`` (right letter, right place), ``Y`` (in the word, elsewhere) or ``B``
(not in the word, or no copy of it left). As a number it is the base-3 code
``sum(mark_i * 3**i)`` with B=0, Y=1, G=2, so position 0 is the least significant digit and
all-green is 242.

The pattern matrix holds the code of every allowed guess (rows) against every answer (columns),
12972 x 2315 uint8, about 30 MB. It is built with numpy in about a second and cached on disk;
candidate filtering and entropy read it instead of re-scoring words.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np

from wordle.words import WORD_LENGTH, allowed, answers, encode, lists_fingerprint, normalize_word

logger = logging.getLogger(__name__)

N_PATTERNS = 3**WORD_LENGTH
ALL_GREEN = N_PATTERNS - 1

# Bump when the encoding or the algorithm changes: it is part of the cache key.
MATRIX_FORMAT_VERSION = 1
CACHE_ENV = "WORDLE_GRPO_CACHE_DIR"


def score_guess(guess: str, answer: str) -> str:
    """Wordle's feedback for ``guess`` against ``answer``, as five of ``G``/``Y``/``B``.

    Greens are marked first; each remaining guess letter, left to right, is yellow only while the
    answer still has an unmatched copy of it. So ``score_guess("SPEED", "ABIDE")`` is ``BBYBY``:
    the first E takes ABIDE's only E and the second E is grey. Input may be in any case.
    """
    g, a = normalize_word(guess), normalize_word(answer)
    if g is None or a is None:
        raise ValueError(f"score_guess needs two five-letter ASCII words, got {guess!r} and {answer!r}")
    marks = ["B"] * WORD_LENGTH
    unmatched = Counter()
    for i, (gc, ac) in enumerate(zip(g, a)):
        if gc == ac:
            marks[i] = "G"
        else:
            unmatched[ac] += 1
    for i, gc in enumerate(g):
        if marks[i] != "G" and unmatched[gc] > 0:
            marks[i] = "Y"
            unmatched[gc] -= 1
    return "".join(marks)


# Every pattern -> its code: a dict lookup is the hot path of candidate filtering.
_PATTERNS = tuple("".join("BYG"[(code // 3**i) % 3] for i in range(WORD_LENGTH)) for code in range(N_PATTERNS))
_CODES = {pattern: code for code, pattern in enumerate(_PATTERNS)}


def pattern_to_code(pattern: str) -> int:
    """``"GYBBB"`` (any case) -> its base-3 code. Raises ValueError on anything but five G/Y/B marks."""
    code = _CODES.get(pattern.upper()) if isinstance(pattern, str) else None
    if code is None:
        raise ValueError(f"a pattern is five of G/Y/B, got {pattern!r}")
    return code


def code_to_pattern(code: int) -> str:
    """The inverse of :func:`pattern_to_code`."""
    if not 0 <= code < N_PATTERNS:
        raise ValueError(f"a pattern code is in [0, {N_PATTERNS}), got {code}")
    return _PATTERNS[code]


def pattern_codes(guesses: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Codes of each encoded guess against each encoded target: ``(G, 5) x (T, 5) -> (G, T)`` uint8.

    The vectorised form of :func:`score_guess`. A non-green guess letter at position i is yellow
    when the number of earlier non-green copies of it in the guess (its rank) is below the number
    of the target's non-green copies of it: yellows are handed out left to right until the
    target's unmatched copies run out, exactly as the scalar rule does.
    """
    # Every operation is on (G, T) planes, one letter position at a time: with small row chunks
    # the planes stay in cache, which is several times faster than (G, T, 5) cubes.
    g = [guesses[:, i, None] for i in range(WORD_LENGTH)]  # each (G, 1)
    t = [targets[None, :, j] for j in range(WORD_LENGTH)]  # each (1, T)
    not_green = [g[j] != t[j] for j in range(WORD_LENGTH)]  # target position j still unmatched
    code = np.zeros((len(guesses), len(targets)), dtype=np.uint8)
    for i in range(WORD_LENGTH):
        available = np.zeros_like(code)
        for j in range(WORD_LENGTH):
            available += (g[i] == t[j]) & not_green[j]
        rank = np.zeros_like(code)
        for k in range(i):
            rank += (g[k] == g[i]) & not_green[k]
        yellow = not_green[i] & (rank < available)
        code += np.uint8(3**i) * (yellow + np.uint8(2) * ~not_green[i])
    return code


def build_pattern_matrix(chunk: int = 256) -> np.ndarray:
    """Every allowed guess against every answer, as uint8 codes. Chunked to bound peak memory."""
    guesses, targets = encode(allowed()), encode(answers())
    out = np.empty((len(guesses), len(targets)), dtype=np.uint8)
    for start in range(0, len(guesses), chunk):
        out[start : start + chunk] = pattern_codes(guesses[start : start + chunk], targets)
    return out


def cache_dir() -> Path:
    """Where the pattern matrix is cached: ``$WORDLE_GRPO_CACHE_DIR`` or the user cache directory."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("wordle-grpo"))


def _cache_key() -> str:
    return hashlib.sha256(f"{lists_fingerprint()}-v{MATRIX_FORMAT_VERSION}".encode()).hexdigest()[:16]


def cache_path() -> Path:
    return cache_dir() / f"patterns-{_cache_key()}.npz"


def _digest(matrix: np.ndarray) -> str:
    return hashlib.blake2b(matrix.tobytes(), digest_size=16).hexdigest()


def _load_cached(path: Path) -> np.ndarray | None:
    """The cached matrix if the file is whole and matches today's lists, else None."""
    expected_shape = (len(allowed()), len(answers()))
    try:
        with np.load(path, allow_pickle=False) as f:
            key, digest, matrix = str(f["key"]), str(f["digest"]), f["patterns"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        logger.warning("pattern cache %s is unreadable (%s); rebuilding it", path, exc)
        return None
    if key != _cache_key() or matrix.dtype != np.uint8 or matrix.shape != expected_shape:
        logger.warning("pattern cache %s is stale; rebuilding it", path)
        return None
    if _digest(matrix) != digest:
        logger.warning("pattern cache %s is damaged (checksum mismatch); rebuilding it", path)
        return None
    return matrix


def _save_cached(path: Path, matrix: np.ndarray) -> None:
    # Written to a temporary file and renamed, so a reader never sees half a file.
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as tmp:
            tmp_name = tmp.name
            np.savez(tmp, patterns=matrix, key=np.array(_cache_key()), digest=np.array(_digest(matrix)))
        os.replace(tmp_name, path)
    except OSError as exc:
        logger.warning("could not cache the pattern matrix at %s (%s); it will be rebuilt next run", path, exc)
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)  # a full disk must not leave half a file behind


@functools.cache
def pattern_matrix() -> np.ndarray:
    """The allowed x answers matrix of pattern codes, loaded from the disk cache or built and cached.

    The array is read-only: it is shared by every caller in the process.
    """
    path = cache_path()
    matrix = _load_cached(path)
    if matrix is None:
        matrix = build_pattern_matrix()
        _save_cached(path, matrix)
    matrix.setflags(write=False)
    return matrix
