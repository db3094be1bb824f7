"""Every kind of bad input a user can give, in both scripts: one line on stderr naming the problem,
exit code 2, nothing on stdout, no output directory, and nothing slow (no model load) before it.

docs/errors.md's failure table shows these lines (the README the common ones); each row here is one of its rows.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
from huggingface_hub import constants as hub_constants

import evaluate as evaluate_cli
import evaluation.run
import grpo_train
import tinymodel
from training import device as devices
from training import distributed, modeling

ROOT = Path(__file__).resolve().parent.parent
ZERO2, ZERO3 = str(ROOT / "configs" / "deepspeed" / "zero2.json"), str(ROOT / "configs" / "deepspeed" / "zero3.json")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def no_weights(tmp: Path) -> Path:
    return write(tmp / "half-downloaded" / "config.json", '{"model_type": "qwen2"}').parent


def finished_checkpoint(tmp: Path) -> Path:
    """An output dir holding a completely written checkpoint, as an interrupted run leaves it."""
    write(tmp / "out" / "checkpoint-2" / "trainer_state.json", '{"global_step": 2}')
    return tmp / "out"


# (name, argv after "--output_dir OUT" with {tmp} for the test's directory, what the line must hold, setup)
TRAIN_CASES = [
    ("unknown profile", ["--profile", "gpu"], "unknown profile 'gpu' in --profile (did you mean cpu?)", None),
    ("unknown option", ["--lerning_rate", "1e-5"], "unknown option '--lerning_rate'", None),
    ("unknown config key", ["--config", "{tmp}/my.yaml"], "unknown key 'lora_rank'", "config"),
    ("value of the wrong type", ["--learning_rate", "abc"], "invalid float value: 'abc'", None),
    ("out of range: completion", ["--max-completion", "0"], "--max-completion must be at least 1", None),
    ("out of range: batch", ["--per_device_train_batch_size", "-2"], "must be at least 1", None),
    ("out of range: generations", ["--num_generations", "1"], "--num_generations must be at least 2", None),
    ("missing model path", ["--model", "{tmp}/models/nope"], "does not exist", None),
    ("model dir without weights", ["--model", "{tmp}/half-downloaded"], "has a config.json but no weights", "weights"),
    ("embedded model missing", ["--model", "tiny"], "rebuild it with `python -m tinymodel`", "notiny"),
    ("not a hub id", ["--model", "bad id!"], "neither a local directory nor a valid hub id", None),
    ("hub unreachable", ["--model", "Qwen/Qwen2.5-3B-Instrct"], "the Hugging Face hub is unreachable", "hub"),
    ("4-bit without bitsandbytes", ["--load_in_4bit", "true"], "pip install bitsandbytes, or pass --no-4bit", "nobnb"),
    ("4-bit on MPS", ["--profile", "mps", "--model", "tiny", "--load_in_4bit", "true"], "does not run on MPS", "mps"),
    ("vLLM not installed", ["--use_vllm", "true"], "use_vllm needs vLLM, which is not installed", "novllm"),
    (
        "vLLM server mode on CPU",
        ["--use_vllm", "true", "--vllm_mode", "server"],
        "server over NCCL, which needs a CUDA GPU (device cpu): use --vllm_mode colocate",
        None,
    ),
    (
        "4-bit with vLLM off a GPU",
        ["--load_in_4bit", "true", "--use_vllm", "true"],
        "4-bit weights with vLLM need a CUDA GPU: vLLM on cpu cannot load",
        None,
    ),
    ("malformed dataset row", ["--dataset", "{tmp}/rows.jsonl"], "line 3: past_guess_history says CRANE", "rows"),
    ("dataset line not JSON", ["--dataset", "{tmp}/broken.jsonl"], "line 2: not valid JSON", "broken"),
    ("secret not a word", ["--dataset", "{tmp}/zzzzz.jsonl"], "line 1: secret ZZZZZ is not an allowed word", "words"),
    ("guess not a word", ["--dataset", "{tmp}/qxzjv.jsonl"], "guess QXZJV is not an allowed word", "words"),
    ("dataset too small for a step", ["--dataset", "{tmp}/one.jsonl"], "one step takes 4 start states, and", "one"),
    ("negative step count", ["--max_steps", "-5"], "--max_steps must be positive", None),
    ("empty dataset file", ["--dataset", "{tmp}/empty.jsonl"], "empty.jsonl: the file is empty", "empty"),
    ("CSV dataset of a header alone", ["--dataset", "{tmp}/header.csv"], "the file is empty", "empty"),
    ("dataset is a directory", ["--dataset", "{tmp}"], "a directory, not a dataset file", None),
    ("config.json not JSON", ["--model", "{tmp}/damaged"], "config.json is not valid JSON (Unterminated", "damaged"),
    ("check larger than validation", ["--game_eval_games", "250"], "between 1 and 202 (the validation", None),
    (
        "unknown evaluation opening",
        ["--eval_openings", "own", "first"],
        "--eval_openings: unknown opening 'first'",
        None,
    ),
    (
        "TRL option game mode ignores",
        ["--use_transformers_continuous_batching", "true"],
        "does nothing with --rollout game (each turn generates with model.generate, or vLLM)",
        None,
    ),
    ("opening share out of range", ["--game_openings", "1.5"], "--game_openings is a share of start states", None),
    ("resume without a checkpoint", ["--resume"], "--resume: no complete checkpoint", None),
    ("FSDP on CPU", ["--fsdp", "full_shard auto_wrap"], "FSDP needs GPUs: on cpu accelerate would train", None),
    ("--fsdp true on CPU", ["--fsdp", "true"], "FSDP needs GPUs", None),  # read as on, as --help says
    ("one CPU process of several", [], "accelerate launch --cpu --num_processes N starts one process", "cpu-launch"),
    (
        "DeepSpeed not installed",
        ["--deepspeed", ZERO2],
        'DeepSpeed is not installed: pip install -e ".[deepspeed]"',
        "nods",
    ),
    ("DeepSpeed without a launcher", ["--deepspeed", ZERO2], "DeepSpeed needs a launcher, also for one process", "ds"),
    ("DeepSpeed config missing", ["--deepspeed", "{tmp}/ds.json"], "ds.json does not exist", "launched"),
    ("ZeRO-3 and the evaluation", ["--deepspeed", ZERO3], "ZeRO-3 cannot play the games before and after", "launched"),
    (
        "ZeRO-3 and --merge",
        ["--deepspeed", ZERO3, "--skip_eval", "true", "--merge", "true", "--rollout", "turn"],
        "merge afterwards",
        "launched",
    ),
]


def _setup(kind: str | None, tmp: Path, monkeypatch) -> None:
    if kind == "config":
        write(tmp / "my.yaml", "lora_rank: 4\n")
    elif kind == "weights":
        no_weights(tmp)
    elif kind == "hub":  # a real connection refused, on loopback: the path a user without network takes
        monkeypatch.setattr(hub_constants, "ENDPOINT", "http://127.0.0.1:9")
        monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    elif kind == "notiny":  # a partial checkout: loading names the build, never starts one
        monkeypatch.setattr(tinymodel, "MODEL_DIR", tmp / "tinymodel" / "model")
    elif kind == "novllm":  # also where vLLM is installed (CI's vLLM environment)
        real = grpo_train.importlib.util.find_spec
        monkeypatch.setattr(grpo_train.importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a))
    elif kind == "nobnb":
        real = modeling.importlib.util.find_spec
        monkeypatch.setattr(modeling.importlib.util, "find_spec", lambda n: None if n == "bitsandbytes" else real(n))
    elif kind == "mps":
        monkeypatch.setattr(devices.torch.backends.mps, "is_available", lambda: True)
    elif kind == "rows":  # line 1 blank, line 3 a history the secret would not produce
        write(
            tmp / "rows.jsonl",
            '\n{"secret": "SLATE", "past_guess_history": []}\n'
            '{"secret": "SLATE", "past_guess_history": [["CRANE", "GGGGG"]]}\n',
        )
    elif kind == "words":  # five letters, but no words: a typo, or a dataset made for another word list
        write(tmp / "zzzzz.jsonl", '{"secret": "ZZZZZ", "past_guess_history": []}\n')
        write(tmp / "qxzjv.jsonl", '{"secret": "SLATE", "past_guess_history": [["QXZJV", "BBBBB"]]}\n')
    elif kind == "one":  # game mode takes 4 start states a step
        write(tmp / "one.jsonl", '{"secret": "SLATE", "past_guess_history": []}\n')
    elif kind == "empty":
        write(tmp / "empty.jsonl", "\n")
        write(tmp / "header.csv", "secret,past_guess_history\n")
    elif kind == "damaged":  # a download cut short inside config.json, weights present
        write(tmp / "damaged" / "config.json", '{"model_type": "qwen2", "hidden_')
        write(tmp / "damaged" / "model.safetensors", "")
    elif kind == "broken":
        write(tmp / "broken.jsonl", '{"secret": "SLATE", "past_guess_history": []}\n{"secret": "SL\n')
    elif kind == "cpu-launch":  # what accelerate launch --cpu --num_processes 2 passes its one process
        for name in distributed.WORLD_SIZE_VARS:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    elif kind in ("nods", "ds", "launched"):  # DeepSpeed absent, or present (CI has none), and launched by torchrun
        real = distributed.importlib.util.find_spec
        spec = None if kind == "nods" else ModuleSpec("deepspeed", None)
        monkeypatch.setattr(
            distributed.importlib.util, "find_spec", lambda n, *a: spec if n == "deepspeed" else real(n, *a)
        )
        for name in distributed.WORLD_SIZE_VARS:
            monkeypatch.delenv(name, raising=False)
        if kind == "launched":
            monkeypatch.setenv("WORLD_SIZE", "2")


def one_line_error(capsys, code: int, tmp: Path | None = None) -> str:
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.out == "", f"stdout must stay empty on an error: {captured.out!r}"
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    # Under 200 characters besides the paths the user gave (pytest's own are long).
    length = len(lines[0].replace(str(tmp), "TMP")) if tmp else len(lines[0])
    assert length < 200, f"{length} characters: {lines[0]}"
    return lines[0]


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if a model would load or a game would be played before the error."""

    def slow(*args, **kwargs):
        raise AssertionError("validation must come before anything slow")

    for name in ("load_model", "load_tokenizer", "evaluate_model", "build_rows"):
        monkeypatch.setattr(grpo_train, name, slow)


@pytest.mark.parametrize(("name", "argv", "expected", "setup"), TRAIN_CASES, ids=[c[0] for c in TRAIN_CASES])
def test_grpo_train_bad_input_is_one_line(name, argv, expected, setup, tmp_path, monkeypatch, capsys, no_loading):
    _setup(setup, tmp_path, monkeypatch)
    out = tmp_path / "out"
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    line = one_line_error(capsys, grpo_train.main(["--profile", "cpu", "--output_dir", str(out), *args]), tmp_path)
    assert expected in line
    assert not out.exists(), "a run that fails validation must not create its output dir"


def test_an_output_dir_that_is_a_file_is_refused_and_left_alone(tmp_path, capsys, no_loading):
    out = write(tmp_path / "out", "my notes\n")
    line = one_line_error(capsys, grpo_train.main(["--profile", "cpu", "--output_dir", str(out)]), tmp_path)
    assert "--output_dir" in line and "is a file, not a directory" in line
    assert out.read_text() == "my notes\n"


def test_a_reply_limit_below_the_shortest_reply_is_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    # Found with the tokenizer (its tokens count the reply), before the model loads or anything is written.
    monkeypatch.setattr(grpo_train, "load_model", lambda *a, **k: pytest.fail("the model loaded before the check"))
    out = tmp_path / "out"
    code = grpo_train.main(["--profile", "cpu", "--output_dir", str(out), "--max-completion", "4"])
    captured = capsys.readouterr()  # the run's log comes first: the resolved configuration
    assert code == 2 and captured.out == ""
    line = captured.err.strip().splitlines()[-1]
    assert line.startswith("error: max_completion_length 4 cannot hold the shortest reply") and "6 tokens" in line
    assert not out.exists(), "a run that stopped before writing anything leaves no empty directory"


def test_existing_checkpoints_are_refused_and_left_alone(tmp_path, capsys, no_loading):
    out = finished_checkpoint(tmp_path)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    line = one_line_error(capsys, grpo_train.main(["--profile", "cpu", "--output_dir", str(out)]), tmp_path)
    assert "already holds checkpoints (newest checkpoint-2); pass --resume" in line
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_the_model_is_checked_before_the_output_dir(tmp_path, capsys, no_loading):
    # Fix what is first in a user's command first: a typo'd model, not "already holds checkpoints".
    out = finished_checkpoint(tmp_path)
    line = one_line_error(
        capsys, grpo_train.main(["--output_dir", str(out), "--model", str(tmp_path / "typo")]), tmp_path
    )
    assert "does not exist" in line


EVALUATE_CASES = [
    ("adapter dir missing", ["--adapter", "{tmp}/no-such-run"], "adapter directory", "does not exist"),
    ("adapter dir not an adapter", ["--adapter", "{tmp}"], "no adapter_config.json", ""),
    ("model dir without weights", ["--model", "{tmp}/half-downloaded"], "no weights", ""),
    ("hub unreachable", ["--model", "someorg/some-model"], "hub is unreachable", ""),
    ("value of the wrong type", ["--games", "many"], "invalid int value", ""),
    ("out of range", ["--max_new_tokens", "0"], "--max_new_tokens must be at least 1", ""),
    ("unknown option", ["--frobnicate", "1"], "unknown argument '--frobnicate'", ""),
    (
        "opening not a word",
        ["--openings", "words:CRANE,QXZJV"],
        "--openings: opening",
        "'QXZJV' is not an allowed word",
    ),
    ("opening too long", ["--openings", "answer:6"], "K must be a whole number from 1 to 5", ""),
    ("adapter_config.json not JSON", ["--adapter", "{tmp}/damaged-adapter"], "adapter_config.json is not valid", ""),
    ("config.json not JSON", ["--model", "{tmp}/damaged"], "config.json is not valid JSON", ""),
    (
        "run config edited",
        ["--adapter", "{tmp}/edited-run"],
        "wordle_grpo_config.yaml is not a run's configuration",
        "",
    ),
]


@pytest.mark.parametrize(("name", "argv", "expected", "also"), EVALUATE_CASES, ids=[c[0] for c in EVALUATE_CASES])
def test_evaluate_bad_input_is_one_line(name, argv, expected, also, tmp_path, monkeypatch, capsys):
    no_weights(tmp_path)
    _setup("damaged", tmp_path, monkeypatch)
    write(tmp_path / "damaged-adapter" / "adapter_config.json", '{"peft_type": ')
    write(tmp_path / "edited-run" / "adapter_config.json", '{"peft_type": "LORA"}')
    write(tmp_path / "edited-run" / "wordle_grpo_config.yaml", "- my notes\n")
    _setup("hub", tmp_path, monkeypatch)
    monkeypatch.setattr(evaluation.run, "evaluate_player", lambda *a, **k: pytest.fail("played before validating"))
    out = tmp_path / "eval-out"
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    line = one_line_error(capsys, evaluate_cli.main([*args, "--out", str(out)]), tmp_path)
    assert expected in line and also in line
    assert not out.exists()


def test_evaluate_out_that_is_a_file_is_refused_before_any_game(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(evaluation.run, "evaluate_player", lambda *a, **k: pytest.fail("played before validating"))
    out = write(tmp_path / "results", "keep me\n")
    line = one_line_error(capsys, evaluate_cli.main(["--games", "2", "--out", str(out)]), tmp_path)
    assert "--out" in line and "is a file, not a directory" in line and out.read_text() == "keep me\n"


def test_evaluate_vllm_backend_without_vllm_is_one_line(tmp_path, monkeypatch, capsys):
    _setup("novllm", tmp_path, monkeypatch)  # also where vLLM is installed (CI's vLLM environment)
    monkeypatch.setattr(evaluation.run, "evaluate_player", lambda *a, **k: pytest.fail("played before validating"))
    line = one_line_error(capsys, evaluate_cli.main(["--games", "2", "--backend", "vllm"]), tmp_path)
    assert "--backend vllm needs vLLM, which is not installed" in line and "--vllm_server URL" in line


def test_hub_offline_mode_and_no_library_notices_in_a_fresh_process(tmp_path):
    """As a user's shell runs it: nothing printed at import (bitsandbytes' kernel notice included), one line."""
    proc = subprocess.run(
        [
            sys.executable,
            "grpo_train.py",
            "--model",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "--load_in_4bit",
            "true",
            "--output_dir",
            str(tmp_path / "out"),
        ],
        cwd=ROOT,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
    assert "not in the local hub cache and HF_HUB_OFFLINE is set" in proc.stderr and not (tmp_path / "out").exists()


def option(help_text: str, flag: str) -> str:
    """An option's entry in --help: its line and the wrapped lines under it, joined."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  --{flag} "))
    rest = lines[start + 1 :]
    end = next((i for i, line in enumerate(rest) if not line.startswith(" " * 28)), len(rest))
    return " ".join(" ".join(line.split()) for line in [lines[start], *rest[:end]])


def test_help_fits_a_screen_and_help_all_lists_every_option(capsys):
    assert grpo_train.main(["--help"]) == 0
    short = capsys.readouterr().out
    assert short.startswith("Train a LoRA adapter") and "--help-all" in short and len(short.splitlines()) < 80
    # One spelling of each flag, the one the examples above it use.
    for dashed, underscored in (("max-completion", "max_completion"), ("no-4bit", "no_4bit"), ("dry-run", "dry_run")):
        assert f"--{dashed} " in short and f"--{underscored}" not in short
    # The TRL fields the README's commands use are there too.
    assert "output_dir" in option(short, "output_dir") and "set by the profile" in option(short, "max_steps")
    # A default that a profile replaces says so; one that every profile sets is the profile's.
    assert option(short, "profile").endswith("(default: auto)")
    assert option(short, "device").endswith("(default: set by the profile)")
    assert option(short, "eval_games").endswith("(default: set by the profile)")
    assert option(short, "mps_empty_cache_steps").endswith("(default: the mps profile sets its own)")
    assert grpo_train.main(["--help-all"]) == 0
    assert "--learning_rate" in capsys.readouterr().out


def test_evaluate_help_says_every_default_even_where_the_help_speaks_of_defaults(capsys):
    assert evaluate_cli.main(["--help"]) == 0
    short = capsys.readouterr().out
    assert option(short, "torch_threads") == "--torch_threads CPU threads for torch (0: torch's default) (default: 1)"


def test_bitsandbytes_kernel_notice_is_dropped_and_nothing_else(caplog):
    import logging

    import training.quiet

    # The entry scripts import training.quiet before anything that imports bitsandbytes.
    for script in ("grpo_train.py", "evaluate.py"):
        first = [line for line in (ROOT / script).read_text().splitlines() if line.startswith(("import ", "from "))]
        assert first[1].startswith("import training.quiet"), script  # after "from __future__ import annotations"
    logger = logging.getLogger(training.quiet.NOTICE_LOGGER)
    with caplog.at_level(logging.WARNING, logger=training.quiet.NOTICE_LOGGER):
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s.", "no network")
        logger.warning("some other bitsandbytes warning")
    assert [r.getMessage() for r in caplog.records] == ["some other bitsandbytes warning"]


def test_a_reply_budget_too_small_for_the_constraint_stops_before_any_game(tmp_path, monkeypatch, capsys):
    # Known only once the tokenizer is loaded (tiny needs 10 tokens, Qwen 13), so the model's loading
    # bar may come first; the error is still one line, before any game, with nothing written.
    monkeypatch.setattr(evaluation.run, "evaluate_player", lambda *a, **k: pytest.fail("played before validating"))
    out = tmp_path / "eval-out"
    assert evaluate_cli.main(["--constrain", "allowed", "--max_new_tokens", "4", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err and not out.exists()
    assert captured.err.count("error: ") == 1
    assert captured.err.strip().splitlines()[-1].startswith("error: --max_new_tokens 4 is too few for constrained")


def test_the_readme_counts_the_rows_of_docs_errors():
    rows = [line for line in (ROOT / "docs" / "errors.md").read_text().splitlines() if line.startswith("| ")]
    situations = len(rows) - 1  # less the header
    said = re.search(r"all (\d+), launchers", " ".join((ROOT / "README.md").read_text().split()))
    assert said and int(said.group(1)) == situations, (
        f"README says {said and said.group(1)}, docs/errors.md has {situations}"
    )
