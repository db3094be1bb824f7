"""The game-state builder, the held-out split, dataset files and their errors."""

from __future__ import annotations

import json

import pytest

from settings.config import resolve
from settings.errors import ConfigError
from training import run
from training.data import build_rows, drop_long_prompts, load_rows, save_rows, validate_rows
from wordle import EVAL_SIZE, MAX_GUESSES, answers, eval_secrets, history_for, parse_history, score_guess, train_secrets


@pytest.fixture(scope="module")
def rows():
    return build_rows(300, seed=7)


def test_held_out_secrets_are_fixed_and_disjoint_from_training():
    held = eval_secrets()
    assert len(held) == len(set(held)) == EVAL_SIZE
    assert set(held) <= set(answers())
    assert not set(held) & set(train_secrets())
    assert len(held) + len(train_secrets()) + len(train_secrets("val")) == len(answers())
    # Pinned: changing the split silently would invalidate every reported evaluation.
    assert held[:5] == ("ABBEY", "ABIDE", "ABOVE", "ADMIN", "ADULT")


def test_the_training_secrets_split_into_sft_rl_and_validation():
    sft, rl, val = train_secrets("sft"), train_secrets("rl"), train_secrets("val")
    assert not set(sft) & set(rl) and set(sft) | set(rl) == set(train_secrets())
    # Validation: secrets no training plays (settings are chosen on them), nor the held-out ones.
    assert not set(val) & (set(train_secrets()) | set(eval_secrets()))
    assert set(val) | set(train_secrets()) | set(eval_secrets()) == set(answers())
    assert (len(sft), len(rl), len(val)) == (1008, 805, 202)
    assert sft == train_secrets("sft") and val[:3] == ("ABASE", "ACORN", "ADORE")  # pinned: the shipped SFT used sft
    with pytest.raises(ValueError, match="unknown part of the training secrets 'half'"):
        train_secrets("half")


def test_built_rows_and_game_starts_come_from_the_chosen_half(tmp_path):
    resolved = resolve(["--profile", "cpu", "--output_dir", str(tmp_path)])
    assert resolved.script.secrets == "rl"  # the embedded model's profile section: the half its SFT never saw
    rows = run.training_rows(resolved, run.plan(resolved))
    assert {r["secret"] for r in rows} <= set(train_secrets("rl"))
    for part in ("half", "val"):  # val chooses settings: training on it would make it a training set
        with pytest.raises(ConfigError, match=f"unknown part of the training secrets '{part}' in --secrets"):
            resolve(["--profile", "cpu", "--secrets", part])


def test_no_training_row_uses_a_held_out_secret(rows):
    assert not {r["secret"] for r in rows} & set(eval_secrets())


def test_build_is_deterministic_in_the_seed(rows):
    assert build_rows(300, seed=7) == rows
    assert build_rows(300, seed=8) != rows


def test_rows_are_consistent_unfinished_games_with_varied_histories(rows):
    lengths = {len(r["past_guess_history"]) for r in rows}
    assert lengths >= {0, 1, 2, 3, 4}, lengths
    assert max(lengths) < MAX_GUESSES
    for r in rows:
        history = [tuple(p) for p in r["past_guess_history"]]
        assert all(score_guess(g, r["secret"]) == p for g, p in history)
        assert all(g != r["secret"] for g, _ in history)  # the game is not over
        system, user = r["prompt"]
        assert system["role"] == "system" and user["role"] == "user"
        assert parse_history(user["content"]) == history  # the prompt shows exactly this history


def test_histories_mix_solver_and_exploratory_play(rows):
    openers = {r["past_guess_history"][0][0] for r in rows if r["past_guess_history"]}
    assert "SOARE" in openers  # the solver's opener
    assert len(openers) > 10  # and exploratory ones


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_save_and_load_round_trip(tmp_path, rows, suffix):
    path = save_rows(rows[:50], tmp_path / f"rows{suffix}")
    assert load_rows(path) == rows[:50]


def test_course_csv_import(tmp_path):
    # The course's form: the history is a string, feedback in the ✓ / - / x notation
    # (- is "elsewhere", x is "absent"), and its own prompt column is re-rendered.
    path = tmp_path / "course.csv"
    path.write_text(
        "prompt,secret,past_guess_history\n"
        "ignored,BRINE,\"[['CRANE', 'C(x) R(✓) A(x) N(✓) E(✓)'], ['NERDS', 'N(-) E(-) R(-) D(x) S(x)']]\"\n"
        "ignored,SLATE,[]\n",
        encoding="utf-8",
    )
    loaded = load_rows(path)
    expected = [list(p) for p in history_for("BRINE", ["CRANE", "NERDS"])]
    assert loaded[0]["past_guess_history"] == [["CRANE", "BGBGG"], ["NERDS", "YYYBB"]] == expected
    assert "NERDS: N(~) E(~) R(~) D(-) S(-)" in loaded[0]["prompt"][1]["content"]
    assert loaded[1]["past_guess_history"] == []


BAD_ROWS = [
    # (row, message fragment): each names the row and the field
    ({"past_guess_history": []}, "line 2: missing field 'secret'"),
    ({"secret": "CRANE"}, "line 2: missing field 'past_guess_history'"),
    ({"secret": "CRAN", "past_guess_history": []}, "line 2: secret 'CRAN'"),
    ({"secret": "SLATE", "past_guess_history": "CRANE"}, "line 2: past_guess_history must be a list"),
    ({"secret": "SLATE", "past_guess_history": [["CRANE"]]}, "line 2: past_guess_history entry"),
    ({"secret": "SLATE", "past_guess_history": [["CRANE", "GGXGG"]]}, "line 2: past_guess_history pattern"),
    ({"secret": "SLATE", "past_guess_history": [["CRANE", "GGGGG"]]}, "line 2: past_guess_history says CRANE"),
    ({"secret": "SLATE", "past_guess_history": [["SLATE", "GGGGG"]]}, "line 2: past_guess_history is a finished"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_ROWS)
def test_malformed_row_names_row_and_field(tmp_path, bad, message):
    # The bad row is the file's second line: named as a user counts lines, not by a 0-based index.
    good = {"secret": "SLATE", "past_guess_history": []}
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (good, bad)) + "\n")
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        load_rows(path)


def test_course_csv_with_garbled_history(tmp_path):
    path = tmp_path / "course.csv"
    path.write_text("secret,past_guess_history\nBRINE,\"[['CRANE', 'C(x) R(?) A(x) N(-) E(✓)']]\"\n")
    with pytest.raises(ValueError, match="line 2: past_guess_history"):  # line 1 is the header
        load_rows(path)


def test_unknown_file_format(tmp_path):
    (tmp_path / "rows.txt").write_text("x")
    with pytest.raises(ValueError, match="unknown format '.txt'"):
        load_rows(tmp_path / "rows.txt")


def test_validate_rows_renders_the_prompt_from_the_history():
    [row] = validate_rows([{"secret": "brine", "past_guess_history": [["crane", "bgbgg"]], "prompt": "stale"}])
    assert row["secret"] == "BRINE" and row["past_guess_history"] == [["CRANE", "BGBGG"]]
    assert row["prompt"][1]["content"].startswith("Guess 2 of 6.")


class _CountingTokenizer:
    """Counts characters: enough to check which rows are dropped."""

    def apply_chat_template(self, messages, **kwargs):
        return list("".join(m["content"] for m in messages))


def test_long_prompts_are_dropped_and_counted(rows, caplog):
    import datasets

    ds = datasets.Dataset.from_list(rows[:40])
    lengths = sorted(len("".join(m["content"] for m in r["prompt"])) for r in rows[:40])
    limit = lengths[29]
    with caplog.at_level("WARNING"):
        kept = drop_long_prompts(ds, _CountingTokenizer(), limit)
    assert len(kept) == sum(n <= limit for n in lengths)
    assert f"dropped {40 - len(kept)} of 40 prompts" in caplog.text


# The same rows as a JSONL file and a course CSV, saved as other tools save them.
JSONL = (
    '{"secret": "BRINE", "past_guess_history": [["CRANE", "BGBGG"]]}\n{"secret": "SLATE", "past_guess_history": []}\n'
)
CSV = "prompt,secret,past_guess_history\nignored,BRINE,\"[['CRANE', 'C(x) R(✓) A(x) N(✓) E(✓)']]\"\nignored,SLATE,[]\n"


@pytest.mark.parametrize("name, text", [("rows.jsonl", JSONL), ("rows.csv", CSV)])
@pytest.mark.parametrize(
    "saved_as",
    [
        lambda text: text.encode(),
        lambda text: b"\xef\xbb\xbf" + text.encode(),  # a byte-order mark (Excel, Notepad)
        lambda text: text.replace("\n", "\r\n").encode(),  # Windows line endings
        lambda text: b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode(),
    ],
    ids=["utf-8", "bom", "crlf", "bom-crlf"],
)
def test_a_dataset_saved_with_a_bom_or_windows_line_endings_loads_as_the_same_rows(tmp_path, name, text, saved_as):
    path = tmp_path / name
    path.write_bytes(saved_as(text))
    loaded = [(r["secret"], r["past_guess_history"]) for r in load_rows(path)]
    assert loaded == [("BRINE", [["CRANE", "BGBGG"]]), ("SLATE", [])]


@pytest.mark.parametrize("name, text, line", [("rows.jsonl", JSONL, 2), ("rows.csv", CSV, 3)])
def test_a_dataset_in_another_encoding_names_its_first_line_that_is_not_utf8(tmp_path, name, text, line):
    path = tmp_path / name
    path.write_bytes(text.replace("SLATE", "SLATÉ").encode("latin-1", errors="replace"))
    with pytest.raises(ValueError, match=rf"^line {line}: not UTF-8 text \(byte 0xc9, .*save the file as UTF-8"):
        load_rows(path)
