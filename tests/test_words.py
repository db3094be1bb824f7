from pathlib import Path

import pytest

import wordle
from wordle.words import normalize_word

ROOT = Path(__file__).resolve().parents[1]


def test_list_sizes_and_superset():
    assert len(wordle.answers()) == 2315
    assert len(wordle.allowed()) == 12972
    assert set(wordle.answers()) <= set(wordle.allowed())
    assert all(w.isupper() and len(w) == 5 for w in wordle.allowed())


def test_lists_ship_with_their_licence():
    data = ROOT / "wordle" / "data"
    assert "MIT License" in (data / "LICENSE.wordlists").read_text()
    assert {"wordle_answers.txt", "wordle_allowed.txt"} <= {p.name for p in data.iterdir()}


def test_nothing_reads_the_shared_folder_at_run_time():
    for path in [*ROOT.glob("wordle/**/*.py"), *ROOT.glob("rewards/**/*.py")]:
        text = path.read_text()
        assert "../shared" not in text and "shared/data" not in text, path


@pytest.mark.parametrize(
    "text, expected",
    [
        ("crane", "CRANE"),  # any case
        ("CrAnE", "CRANE"),
        ("CRAN", None),  # too short
        ("CRANES", None),  # too long
        ("CR4NE", None),  # digit
        ("CRAN ", None),  # space
        ("СRАNЕ", None),  # Cyrillic С, А, Е look like Latin letters
        ("STAFﬀ", None),  # 'ﬀ'.upper() == 'FF' would smuggle in the ASCII word STAFFF
        (None, None),
        (12345, None),
    ],
)
def test_normalize_word(text, expected):
    assert normalize_word(text) == expected


def test_is_allowed():
    assert wordle.is_allowed("soare") and wordle.is_allowed("ABIDE")
    assert not wordle.is_allowed("ABCDE")
    assert not wordle.is_allowed("СRANE")  # Cyrillic С
