"""Every kind of bad input a user can give, in both scripts: one line on stderr naming the problem,
exit code 2, nothing on stdout, nothing written, and nothing slow (no model load) before it.

docs/errors.md's failure table is this file's table (the README shows the common rows): each of its rows is
the ``row`` of one case below, and the line that case prints is compared whole with the row's, so the doc
and the code cannot drift apart. The doc's line is what a user would see: the test runs in its own directory,
which the doc calls /tmp (relative paths such as ``rows.jsonl`` and ``outputs/cpu`` are in it), and ``…``
stands for text that differs from machine to machine.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import re
import shutil
import signal
import subprocess
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import pytest
import safetensors.torch
import torch
from huggingface_hub import constants as hub_constants
from transformers import TrainerControl
from trl import GRPOTrainer

import evaluate as evaluate_cli
import evaluation.run
import grpo_train
import sft_train
import tinymodel
from models import loading as modeling
from runtime import device as devices
from runtime import distributed
from settings import checks, config, launch
from training import before_after, record, run
from training.health import Health
from training.phases import Phases
from training.trainer import WordleGRPOTrainer

ROOT = Path(__file__).resolve().parent.parent
ERRORS_DOC = ROOT / "docs" / "errors.md"
ZERO2, ZERO3 = str(ROOT / "configs" / "deepspeed" / "zero2.json"), str(ROOT / "configs" / "deepspeed" / "zero3.json")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def finished_checkpoint(out: Path, step: int = 2) -> Path:
    """An output dir holding a completely written checkpoint, as an interrupted run leaves it."""
    write(out / f"checkpoint-{step}" / "trainer_state.json", f'{{"global_step": {step}}}')
    return out


# A row of docs/errors.md: its situation, then its line as a code span (double backticks where the line holds
# one), then notes such as "(likewise …)", which are prose for the reader and not compared.
DOC_ROW = re.compile(r"\| (?P<situation>.+?) \| (?P<ticks>`+)(?P<line>.+?)(?P=ticks)(?P<notes>.*) \|")


STOPS = "## When a run stops, or warns"  # docs/errors.md's second table: the lines a run stops or warns with


@functools.cache
def doc_rows(stops: bool = False) -> dict[str, str]:
    """docs/errors.md's table of errors (``stops``: of stops and warnings): each situation and the line it shows."""
    rows: dict[str, str] = {}
    errors, _, rest = ERRORS_DOC.read_text().partition(STOPS)
    table = [t for t in (rest if stops else errors).splitlines() if t.startswith("| ")][1:]  # less the header
    for text in table:
        match = DOC_ROW.fullmatch(text)
        assert match, f"docs/errors.md: a row of the table that is not | situation | `line` |: {text}"
        assert match["situation"] not in rows, f"docs/errors.md: two rows for {match['situation']!r}"
        rows[match["situation"]] = match["line"]
    return rows


def assert_is_the_docs_line(row: str, line: str, tmp: Path, stops: bool = False) -> None:
    doc = doc_rows(stops).get(row)
    assert doc is not None, f"docs/errors.md has no row {row!r} (was the situation reworded?)"
    seen = line.replace(str(tmp), "/tmp")  # the test's directory is the doc's /tmp
    pattern = ".+".join(re.escape(part) for part in doc.split("…"))  # "…" elides what differs by machine
    assert re.fullmatch(pattern, seen), f"docs/errors.md, row {row!r}, says\n  {doc}\nbut the code says\n  {seen}"


class Case(NamedTuple):
    """One kind of bad input. ``row`` names the docs/errors.md row whose line this case prints; a case
    without one is another instance of a row (the doc's "likewise"), checked by its fragment alone."""

    name: str
    argv: list[str]  # after the script, with {tmp} for the test's directory, which is also the working directory
    expected: str  # what the line must hold, whatever the doc says
    setup: str | None = None  # what _setup prepares
    row: str = ""


# Run as `python grpo_train.py --profile cpu ARGV` (a later --profile wins); output_dir is the profile's, outputs/cpu.
TRAIN_CASES = [
    Case(
        "unknown profile",
        ["--profile", "gpu"],
        "unknown profile 'gpu' in --profile (did you mean cpu?)",
        row="unknown profile",
    ),
    Case("unknown option", ["--lerning_rate", "1e-5"], "unknown option '--lerning_rate'", row="unknown option"),
    Case(
        "unknown config key",
        ["--config", "my.yaml"],
        "unknown key 'lora_rank'",
        "config",
        row="unknown key in a `--config` file",
    ),
    Case(
        "value of the wrong type",
        ["--learning_rate", "abc"],
        "invalid float value: 'abc'",
        row="a value of the wrong type",
    ),
    Case(
        "out of range: completion",
        ["--max-completion", "0"],
        "--max-completion must be at least 1",
        row="a value out of range",
    ),
    Case("out of range: batch", ["--per_device_train_batch_size", "-2"], "must be at least 1"),
    Case("out of range: generations", ["--num_generations", "1"], "--num_generations must be at least 2"),
    Case("negative step count", ["--max_steps", "-5"], "--max_steps must be positive"),
    Case("MPS absent", ["--profile", "mps"], "profile mps needs Apple MPS", "nomps", row="`--profile mps` without MPS"),
    Case(
        "no GPU",
        ["--profile", "cuda"],
        "profile cuda needs an NVIDIA GPU",
        "nogpu",
        row="`--profile cuda` without a GPU",
    ),
    Case(
        "no GPU for --device",
        ["--profile", "cpu", "--device", "cuda"],
        "--device cuda needs an NVIDIA GPU, and torch sees none here; drop it (profile cpu trains on cpu)",
        "nogpu",
        row="`--device cuda` without a GPU",
    ),
    Case(
        "--use_cpu against --device",
        ["--profile", "cpu", "--device", "cuda", "--use_cpu", "true"],
        "--use_cpu true contradicts --device cuda: the device decides where the run trains; drop --use_cpu, or",
        "gpu",
        row="`--use_cpu` against the run's device",
    ),
    Case(
        "embedded model missing",
        ["--model", "tiny"],
        "rebuild it with `python -m tinymodel`",
        "notiny",
        row="the embedded model's files missing",
    ),
    Case(
        "missing model path", ["--model", "{tmp}/models/qwen"], "does not exist", row="a model path that does not exist"
    ),
    Case(
        "model dir without weights",
        ["--model", "{tmp}/half"],
        "has a config.json but no weights",
        "weights",
        row="a model directory without weights",
    ),
    Case(
        "hub unreachable",
        ["--model", "Qwen/Qwen2.5-3B-Instrct"],
        "the Hugging Face hub is unreachable",
        "hub",
        row="a hub id with no network",
    ),
    Case(
        "hub offline, not cached",
        ["--model", "Qwen/Qwen2.5-3B-Instruct"],
        "is not in the local hub cache and HF_HUB_OFFLINE is set",
        "offline",
        row="a hub id with `HF_HUB_OFFLINE=1`, not cached",
    ),
    Case(
        "not a hub id",
        ["--model", "bad id!"],
        "neither a local directory nor a valid hub id",
        row="not a hub id",
    ),
    Case(
        "4-bit without bitsandbytes",
        ["--load_in_4bit", "true"],
        "pip install bitsandbytes, or pass --no-4bit",
        "nobnb",
        row="4-bit or an 8-bit optimizer without bitsandbytes",
    ),
    Case(
        "4-bit on MPS",
        ["--profile", "mps", "--model", "tiny", "--load_in_4bit", "true"],
        "does not run on MPS",
        "mps",
        row="4-bit on MPS",
    ),
    Case(
        "vLLM not installed",
        ["--use_vllm", "true"],
        "use_vllm needs vLLM, which is not installed",
        "novllm",
        row="`--use_vllm true` without vLLM",
    ),
    Case(
        "--merged_generation with vLLM",
        ["--use_vllm", "true", "--merged_generation", "true"],
        "vLLM generates from a merged copy of its own",
        row="`--merged_generation` with vLLM",
    ),
    Case(
        "--merged_generation with paged generation",
        ["--rollout", "turn", "--use_transformers_paged", "true", "--merged_generation", "true"],
        "drop one of --merged_generation, --use_transformers_paged",
    ),
    Case(
        "--merged_generation without a LoRA",
        ["--use_peft", "false", "--merged_generation", "true"],
        "it needs --use_peft true",
        row="`--merged_generation` without a LoRA",
    ),
    Case(
        "vLLM server mode on CPU",
        ["--use_vllm", "true", "--vllm_mode", "server"],
        "server over NCCL, which needs a CUDA GPU (device cpu): use --vllm_mode colocate",
        row="vLLM server mode off a CUDA GPU",
    ),
    Case(
        "4-bit with vLLM off a GPU",
        ["--load_in_4bit", "true", "--use_vllm", "true"],
        "4-bit weights with vLLM need a CUDA GPU: vLLM on cpu cannot load",
        row="4-bit weights with vLLM off a CUDA GPU (vLLM's CPU build has no bitsandbytes)",
    ),
    Case(
        "config.json not JSON",
        ["--model", "{tmp}/qwen"],
        "config.json is not valid JSON (Unterminated",
        "damaged",
        row="a model directory whose `config.json` is damaged",
    ),
    Case(
        "malformed dataset row",
        ["--dataset", "rows.jsonl"],
        "line 3: past_guess_history says CRANE",
        "rows",
        row="a malformed dataset row (numbered as the file's lines)",
    ),
    Case(
        "dataset line not JSON",
        ["--dataset", "rows.jsonl"],
        "line 2: not valid JSON",
        "broken",
        row="a dataset line that is not JSON",
    ),
    Case(
        "secret not a word",
        ["--dataset", "rows.jsonl"],
        "line 1: secret ZZZZZ is not an allowed word",
        "zzzzz",
        row="a dataset secret that is not an allowed word (a typo, another word list)",
    ),
    Case(
        "guess not a word",
        ["--dataset", "rows.jsonl"],
        "guess QXZJV is not an allowed word",
        "qxzjv",
        row="a dataset history guess that is not an allowed word",
    ),
    Case(
        "dataset too small for a step",
        ["--dataset", "rows.jsonl"],
        "one step takes 4 start states, and dataset rows.jsonl has 1",
        "one",
        row="a dataset too small for one step (TRL would train no step, in silence)",
    ),
    Case(
        "dataset in another encoding",
        ["--dataset", "rows.jsonl"],
        "rows.jsonl: line 2: not UTF-8 text (byte 0xe9",
        "latin1",
        row="a dataset file saved in another encoding than UTF-8",
    ),
    Case(
        "empty dataset file",
        ["--dataset", "rows.jsonl"],
        "rows.jsonl: the file is empty",
        "empty",
        row="a dataset file that is empty (or a CSV of a header alone)",
    ),
    Case("CSV dataset of a header alone", ["--dataset", "rows.csv"], "the file is empty", "empty"),
    Case(
        "dataset is a directory",
        ["--dataset", "data/"],
        "a directory, not a dataset file",
        "data",
        row="a dataset path that is a directory",
    ),
    Case(
        "check larger than validation",
        ["--game_eval_games", "250"],
        "between 1 and 202 (the validation",
        row="a periodic check larger than the validation split",
    ),
    Case(
        "unknown evaluation opening",
        ["--eval_openings", "own", "first"],
        "--eval_openings: unknown opening 'first'",
        row="an evaluation opening that is not one",
    ),
    Case(
        "TRL option game mode ignores",
        ["--use_transformers_continuous_batching", "true"],
        "does nothing with --rollout game (each turn generates with model.generate, or vLLM)",
        row="a TRL option that game mode would ignore (`--use_transformers_continuous_batching`, "
        "`--use_transformers_paged`)",
    ),
    Case(
        "a loss game mode cannot normalise as TRL does",
        ["--loss_type", "bnpo"],
        "--loss_type bnpo normalises by a micro-batch's own tokens",
        row="a loss that normalises by a micro-batch's own tokens, in game mode",
    ),
    Case(
        "entropy bonus in game mode",
        ["--entropy_coef", "0.01"],
        "--entropy_coef 0.01 adds an entropy bonus averaged per micro-batch",
        row="the entropy bonus or the entropy quantile mask, in game mode",
    ),
    Case("entropy quantile in game mode", ["--top_entropy_quantile", "0.2"], "keeps each micro-batch's top entropies"),
    Case(
        "group std in game mode",
        ["--scale_rewards", "group"],
        "--scale_rewards group divides each turn slot's rewards by their own std",
        row="rewards scaled by each group's std, in game mode",
    ),
    Case(
        "rewards normalised per group in game mode",
        ["--multi_objective_aggregation", "normalize_then_sum"],
        "normalize_then_sum scales each reward by its group's std",
        row="each reward normalised within its group, in game mode",
    ),
    Case(
        "opening share out of range",
        ["--game_openings", "1.5"],
        "--game_openings is a share of start states",
        row="a share of random openings outside 0–1",
    ),
    Case(
        "output dir is a file",
        [],
        "--output_dir outputs/cpu is a file, not a directory",
        "outfile",
        row="an `--output_dir` that is a file",
    ),
    Case(
        "run configuration that does not parse",
        [],
        "outputs/cpu/wordle_grpo_config.yaml is not a run's configuration (no model section)",
        "garbled",
        row="a finished run whose `wordle_grpo_config.yaml` does not parse",
    ),
    Case(
        "output dir cannot be written",
        [],
        "--output_dir outputs/cpu cannot be written (in /",
        "readonly",
        row="an `--output_dir` that cannot be written (a read-only mount, another user's folder)",
    ),
    Case("cache dir cannot be written", [], "cannot be written", "readonlycache"),
    Case(
        "checkpoints already there",
        [],
        "already holds checkpoints (newest checkpoint-500); pass --resume",
        "checkpoints",
        row="checkpoints already in `output_dir`",
    ),
    Case(
        "output dir of a live run",
        [],
        "is in use by a live run (pid 4242)",
        "live",
        row="a second run into a live run's `output_dir`",
    ),
    Case(
        "resume without a checkpoint",
        ["--resume"],
        "--resume: no complete checkpoint",
        row="`--resume` with nothing to resume",
    ),
    Case(
        "merge with full fine-tuning",
        ["--use_peft", "false", "--merge"],
        "--merge merges a LoRA adapter",
        row="`--merge` with full fine-tuning",
    ),
    Case(
        "FSDP on CPU",
        ["--fsdp", "full_shard auto_wrap"],
        "FSDP needs GPUs: on cpu accelerate would train",
        row="FSDP on CPU or MPS (`--fsdp …`)",
    ),
    Case("--fsdp true on CPU", ["--fsdp", "true"], "FSDP needs GPUs"),  # read as on, as --help says
    Case(
        "one CPU process of several",
        [],
        "accelerate launch --cpu --num_processes N starts one process",
        "cpu-launch",
        row="`accelerate launch --cpu --num_processes 2`",
    ),
    Case(
        "DeepSpeed not installed",
        ["--deepspeed", ZERO2],
        'DeepSpeed is not installed: pip install -e ".[deepspeed]"',
        "nods",
        row="`--deepspeed` without DeepSpeed",
    ),
    Case(
        "DeepSpeed without a launcher",
        ["--deepspeed", ZERO2],
        "DeepSpeed needs a launcher, also for one process",
        "ds",
        row="`--deepspeed` run with plain `python`",
    ),
    Case(
        "DeepSpeed config missing",
        ["--deepspeed", "{tmp}/ds.json"],
        "ds.json does not exist",
        "launched",
        row="a DeepSpeed config that does not exist",
    ),
    Case(
        "ZeRO-3 and the evaluation",
        ["--deepspeed", ZERO3],
        "ZeRO-3 cannot play the games before and after",
        "launched",
        row="ZeRO-3 with the games before and after",
    ),
    Case(
        "ZeRO-3 and --merged_generation",
        ["--deepspeed", ZERO3, "--skip_eval", "true", "--rollout", "turn", "--merged_generation", "true"],
        "--merged_generation copies them whole on each process",
        "launched",
        row="ZeRO-3 with `--merged_generation`",
    ),
    Case(
        "ZeRO-3 and --merge",
        ["--deepspeed", ZERO3, "--skip_eval", "true", "--merge", "true", "--rollout", "turn"],
        "merge afterwards",
        "launched",
        row="ZeRO-3 with `--merge`",
    ),
    # Past the checks: the run logs its configuration first, and the error is its last line.
    Case(
        "reply limit below the shortest reply",
        ["--max-completion", "4"],
        "max_completion_length 4 cannot hold the shortest reply",
        "tokenizer",
        row="a reply limit below the shortest reply (found with the tokenizer: after the run logs its "
        "configuration, before the model loads)",
    ),
    Case(
        "no prompt fits",
        ["--max_prompt_length", "5"],
        "no prompt fits in 5 tokens",
        "prompts",
        row="no training prompt fits the prompt budget (found with the tokenizer, before any game)",
    ),
    Case(
        "chat template that refuses the game",
        ["--model", "{tmp}/mymodel"],
        "fails on the game's prompt",
        "template",
        row="a chat template that fails even with the rules in the user message",
    ),
    Case(
        "out of memory",
        ["--profile", "mps", "--model", "tiny", "--skip_eval", "true"],
        "retry with --max-completion 96",
        "oom",
        row="out of memory (during training)",
    ),
    # The embedded model's replies are far below 96 tokens: the advice starts at the first rung left.
    Case(
        "out of memory with two rollbacks left",
        ["--skip_eval", "true"],
        "retry with --num_generations 2; if that fails too, --per_device_train_batch_size 4 "
        "--gradient_accumulation_steps 24 (with --resume",
        "oom-cpu",
    ),
    Case(
        "output dir holds another model's run",
        [],
        "holds a run of Qwen/Qwen2.5-0.5B-Instruct, not tiny",
        "othermodel",
        row="`output_dir` holds a finished run of another model",
    ),
    Case(
        "finished steps, unsaved adapter",
        [],
        "it reached max_steps (100) but stopped before saving its adapter: pass --resume to save it",
        "unsaved",
        row="a run whose last checkpoint reached `max_steps` but that stopped before saving its adapter",
    ),
    Case(
        "disk full while saving a checkpoint",
        ["--skip_eval", "true"],
        "the disk filled while saving checkpoint-2",
        "diskfull",
        row="the disk fills while a checkpoint is saved (the half-written one is removed, the earlier ones stay whole)",
    ),
    Case(
        "adapter missing",
        ["--adapter", "nope"],
        "--adapter nope does not exist",
        row="`--adapter` that does not exist",
    ),
    Case(
        "adapter not a LoRA",
        ["--adapter", "{tmp}"],
        "has no adapter_config.json",
        row="`--adapter` that is no LoRA adapter",
    ),
    Case(
        "adapter contradicted",
        ["--adapter", "sft", "--lora_r", "4"],
        "--lora_r 4 contradicts the adapter in sft (r 16)",
        "sftadapter",
        row="a LoRA flag that contradicts the adapter GRPO continues",
    ),
    Case("adapter without LoRA", ["--adapter", "sft", "--use_peft", "false"], "drop one", "sftadapter"),
    Case(
        "adapter of another base",
        ["--adapter", "sft"],
        "was trained on tiny (fingerprint 0123456789abcdef@main)",
        "sftadapter",
        row="an adapter trained on another base model (PEFT would load it onto any base of the same shapes)",
    ),
    Case(
        "resume that no longer fits",
        ["--resume", "--lora_r", "8"],
        "was trained with LoRA's rank 16, and this run asks for 8",
        "resumable",
        row="`--resume` with a setting that changes the weights or what they mean",
    ),
    Case(
        "resume with another rollout",
        ["--resume", "--rollout", "turn"],
        "was trained with the rollout mode game, and this run asks for turn: drop --rollout",
        "resumable",
    ),
    Case("scale_rewards misspelled", ["--scale_rewards", "yes"], "unknown scale_rewards 'yes' in --scale_rewards"),
]
PAST_THE_CHECKS = {
    "tokenizer",
    "prompts",
    "template",
    "oom",
    "oom-cpu",
    "diskfull",
}  # setups that let a run log before its error

# What each setup writes, relative to the test's directory.
FILES = {
    "config": {"my.yaml": "lora_rank: 4\n"},
    "weights": {"half/config.json": '{"model_type": "qwen2"}'},
    "damaged": {  # a download cut short inside config.json, weights present
        "qwen/config.json": '{"model_type": "qwen2", "hidden_',
        "qwen/model.safetensors": "",
        "damaged-adapter/adapter_config.json": '{"peft_type": ',  # evaluating: an adapter's, likewise
    },
    "rows": {  # line 1 blank, line 3 a history the secret would not produce
        "rows.jsonl": '\n{"secret": "SLATE", "past_guess_history": []}\n'
        '{"secret": "SLATE", "past_guess_history": [["CRANE", "GGGGG"]]}\n'
    },
    "broken": {"rows.jsonl": '{"secret": "SLATE", "past_guess_history": []}\n{"secret": "SL\n'},
    # Five letters, but no words: a typo, or a dataset made for another word list.
    "zzzzz": {"rows.jsonl": '{"secret": "ZZZZZ", "past_guess_history": []}\n'},
    "qxzjv": {"rows.jsonl": '{"secret": "SLATE", "past_guess_history": [["QXZJV", "BBBBB"]]}\n'},
    "one": {"rows.jsonl": '{"secret": "SLATE", "past_guess_history": []}\n'},  # game mode takes 4 start states a step
    "empty": {"rows.jsonl": "\n", "rows.csv": "secret,past_guess_history\n"},
    "data": {"data/rows.jsonl": '{"secret": "SLATE", "past_guess_history": []}\n'},  # the dataset's directory
    "outfile": {"outputs/cpu": "my notes\n"},
    "evalout": {"eval-out": "keep me\n"},
    "checkpoints": {"outputs/cpu/checkpoint-500/trainer_state.json": '{"global_step": 500}'},
    "othermodel": {  # a finished run of a hub model, where the profile's default model is tiny
        "outputs/cpu/adapter_config.json": '{"peft_type": "LORA"}',
        "outputs/cpu/wordle_grpo_config.yaml": "model:\n  name_or_path: Qwen/Qwen2.5-0.5B-Instruct\n",
    },
    "garbled": {  # a finished run whose configuration was cut short in a copy
        "outputs/cpu/adapter_config.json": '{"peft_type": "LORA"}',
        "outputs/cpu/wordle_grpo_config.yaml": "model:\n  name_or_path: [tiny\n",
    },
    # The last checkpoint is at the profile's max_steps, but the adapter was never saved beside it.
    "unsaved": {"outputs/cpu/checkpoint-100/trainer_state.json": '{"global_step": 100}'},
    # Evaluating: an adapter directory whose run configuration was edited into a list.
    "edited": {
        "outputs/cpu/adapter_config.json": '{"peft_type": "LORA"}',
        "outputs/cpu/wordle_grpo_config.yaml": "- my notes\n",
    },
}


SFT_ADAPTER = {  # what sft_train.py leaves, recorded as trained on a base whose fingerprint no model here has
    "sft/adapter_config.json": json.dumps(
        {
            "peft_type": "LORA",
            "r": 16,
            "lora_alpha": 32,
            "lora_dropout": 0.0,
            "target_modules": ["v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            "use_rslora": False,
        }
    ),
    "sft/wordle_grpo_config.yaml": "model:\n  name_or_path: tiny\n  fingerprint: 0123456789abcdef@main\n",
}


def _setup(kind: str | None, tmp: Path, monkeypatch) -> None:
    for name, text in {**FILES, "sftadapter": SFT_ADAPTER}.get(kind, {}).items():
        write(tmp / name, text)
    if kind == "sftadapter":
        safetensors.torch.save_file({"a": torch.zeros(1)}, tmp / "sft" / "adapter_model.safetensors")
    if kind == "resumable":  # a checkpoint of the cpu profile's run, with the record every checkpoint now holds
        finished_checkpoint(tmp / "outputs" / "cpu")
        resolved = config.resolve(["--profile", "cpu"])
        record.write_record(record.run_record(resolved, str(tinymodel.model_dir())), tmp / "outputs/cpu/checkpoint-2")
    if kind == "latin1":  # a spreadsheet's export in Windows-1252: a line 2 with a name in it
        rows = '{"secret": "SLATE", "past_guess_history": []}\n{"secret": "CRANE", "note": "Ren\u00e9"}\n'
        write(tmp / "rows.jsonl", "").write_bytes(rows.encode("cp1252"))
    if kind == "cutadapter":  # the first half of a real adapter file
        weights = safetensors.torch.save({"base_model.model.lm_head.lora_A.weight": torch.zeros(8, 64)})
        write(tmp / "cut" / "adapter_config.json", '{"peft_type": "LORA"}')
        (tmp / "cut" / "adapter_model.safetensors").write_bytes(weights[: len(weights) // 2])
    if kind in ("readonly", "readonlycache"):  # the test's directory as a read-only mount makes it (root can write
        real = checks.tempfile.TemporaryFile  # a folder without write permission: only a mount stops it)

        def probe(*args, dir=None, **kwargs):
            if dir is not None and Path(dir) == tmp:
                raise OSError(errno.EROFS, "Read-only file system")
            return real(*args, dir=dir, **kwargs)

        monkeypatch.setattr(checks.tempfile, "TemporaryFile", probe)
        if kind == "readonlycache":
            monkeypatch.setenv("WORDLE_GRPO_CACHE_DIR", str(tmp / "cache"))
    if kind == "hub":  # a real connection refused, on loopback: the path a user without network takes
        monkeypatch.setattr(hub_constants, "ENDPOINT", "http://127.0.0.1:9")
        monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    elif kind == "offline":  # HF_HUB_OFFLINE=1, over a hub cache without the model
        monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
        monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp / "hub-cache"))
    elif kind == "notiny":  # a checkout without its largest file: loading names the build, never starts one
        for name in tinymodel.MODEL_FILES:
            if name != "model.safetensors":
                write(tmp / "tinymodel" / "model" / name, "")
        monkeypatch.setattr(tinymodel, "MODEL_DIR", tmp / "tinymodel" / "model")
    elif kind == "novllm":  # also where vLLM is installed (CI's vLLM environment)
        real = run.importlib.util.find_spec
        monkeypatch.setattr(run.importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a))
    elif kind == "nobnb":
        real = modeling.importlib.util.find_spec
        monkeypatch.setattr(modeling.importlib.util, "find_spec", lambda n: None if n == "bitsandbytes" else real(n))
    elif kind in ("mps", "nomps"):  # either way, whatever machine runs the test
        monkeypatch.setattr(devices.torch.backends.mps, "is_available", lambda: kind == "mps")
    elif kind in ("gpu", "nogpu"):  # a GPU is only looked at, never used, before the line
        monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: kind == "gpu")
        monkeypatch.setattr(devices.torch.version, "hip", None)
    elif kind == "live":  # the lock's holder, as another live run's lock reports it (test_distributed takes a real one)
        monkeypatch.setattr(distributed.OutputLock, "holder", lambda self: 4242)
    elif kind == "cpu-launch":  # what accelerate launch --cpu --num_processes 2 passes its one process
        for name in launch.WORLD_SIZE_VARS:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    elif kind in ("nods", "ds", "launched"):  # DeepSpeed absent, or present (CI has none), and launched by torchrun
        real = launch.importlib.util.find_spec
        spec = None if kind == "nods" else ModuleSpec("deepspeed", None)
        monkeypatch.setattr(launch.importlib.util, "find_spec", lambda n, *a: spec if n == "deepspeed" else real(n, *a))
        for name in launch.WORLD_SIZE_VARS:
            monkeypatch.delenv(name, raising=False)
        if kind == "launched":
            monkeypatch.setenv("WORLD_SIZE", "2")
    elif kind == "tokenizer":  # the tokenizer loads (its tokens count the reply); the model still must not
        monkeypatch.setattr(grpo_train, "load_tokenizer", modeling.load_tokenizer)
    elif kind == "prompts":  # the tokenizer counts the prompts; with --max_prompt_length the model is not asked
        monkeypatch.setattr(grpo_train, "load_tokenizer", modeling.load_tokenizer)
        monkeypatch.setattr(grpo_train, "load_model", lambda *a, **k: None)
    elif kind == "template":  # the embedded model's tokenizer with a template that takes assistant turns alone
        model = tmp / "mymodel"
        shutil.copytree(tinymodel.model_dir(), model, ignore=shutil.ignore_patterns("model.safetensors"))
        write(model / "model.safetensors", "")  # never loaded
        write(model / "chat_template.jinja", "{{ raise_exception('Only assistant roles are supported!') }}")
        monkeypatch.setattr(grpo_train, "load_tokenizer", modeling.load_tokenizer)
    elif kind in ("oom", "oom-cpu"):  # memory runs out in the first step: on an Apple GPU, or here
        if kind == "oom":
            monkeypatch.setattr(devices.torch.backends.mps, "is_available", lambda: True)
        _reach_the_trainer(
            monkeypatch,
            lambda resolved: SimpleNamespace(train=_out_of_memory, add_callback=_ignore, remove_callback=_ignore),
        )
    elif kind == "diskfull":
        monkeypatch.setattr(GRPOTrainer, "_save_checkpoint", _disk_full)
        _reach_the_trainer(monkeypatch, _trainer_that_saves)


def _reach_the_trainer(monkeypatch, make_trainer) -> None:
    """Past the checks, to GRPO itself, with nothing loaded: no tokenizer, model or data (test_train trains)."""
    for name in ("load_tokenizer", "check_reply_fits", "log_memory_estimate", "load_model", "dataset"):
        monkeypatch.setattr(grpo_train, name, lambda *a, **k: None)
    monkeypatch.setattr(grpo_train, "make_trainer", lambda resolved, *a, **k: make_trainer(resolved))


def _ignore(callback) -> None:  # a stand-in trainer's add_callback: nothing to call back
    return None


def _out_of_memory(**kwargs):
    raise torch.OutOfMemoryError("MPS backend out of memory (MPS allocated: 17.00 GB)")


def _disk_full(trainer, model, trial):  # transformers' save, after the weights and before the optimizer's state
    path = Path(trainer.args.output_dir) / f"checkpoint-{trainer.state.global_step}" / "optimizer.pt"
    raise OSError(errno.ENOSPC, "No space left on device", str(path))


def _trainer_that_saves(resolved) -> WordleGRPOTrainer:
    """The project's trainer at step 2's checkpoint, its own handling of the save and nothing else."""
    trainer = WordleGRPOTrainer.__new__(WordleGRPOTrainer)
    trainer.args, trainer.state = resolved.training, SimpleNamespace(global_step=2)
    trainer.train = lambda **kwargs: trainer._save_checkpoint(None, None)
    trainer.add_callback = trainer.remove_callback = _ignore
    return trainer


def one_line_error(capsys, code: int, tmp: Path | None = None, logged: bool = False) -> str:
    """The error line; ``logged``: the run got past its checks, so its log (on stderr too) comes first."""
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.out == "", f"stdout must stay empty on an error: {captured.out!r}"
    lines = captured.err.strip().splitlines()
    if logged:
        assert "Traceback" not in captured.err and captured.err.count("error: ") == 1, captured.err
        assert lines[-1].startswith("error: "), captured.err
        return lines[-1]
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    # Under 200 characters besides the paths the user gave (pytest's own are long).
    length = len(lines[0].replace(str(tmp), "TMP")) if tmp else len(lines[0])
    assert length < 200, f"{length} characters: {lines[0]}"
    return lines[0]


def files_in(directory: Path, empty_dirs: bool = True) -> dict[str, bytes | None]:
    paths = [p for p in directory.rglob("*") if empty_dirs or p.is_file() or any(p.iterdir())]
    return {str(p.relative_to(directory)): p.read_bytes() if p.is_file() else None for p in paths}


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if a model would load or a game would be played before the error."""

    def slow(*args, **kwargs):
        raise AssertionError("validation must come before anything slow")

    for module, name in (
        (grpo_train, "load_model"),
        (grpo_train, "load_tokenizer"),
        (before_after, "evaluate_model"),
        (run, "build_rows"),
    ):
        monkeypatch.setattr(module, name, slow)


@pytest.mark.parametrize("case", TRAIN_CASES, ids=[c.name for c in TRAIN_CASES])
def test_grpo_train_bad_input_is_one_line(case, tmp_path, monkeypatch, capsys, no_loading):
    monkeypatch.chdir(tmp_path)  # relative paths are the test's: rows.jsonl, outputs/cpu
    _setup(case.setup, tmp_path, monkeypatch)
    before = files_in(tmp_path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in case.argv]
    code = grpo_train.main(["--profile", "cpu", *args])
    line = one_line_error(capsys, code, tmp_path, logged=case.setup in PAST_THE_CHECKS)
    assert case.expected in line
    if case.row:
        assert_is_the_docs_line(case.row, line, tmp_path)
    # A run past its checks took its output dir's lock (creating outputs/cpu), and removed both again.
    assert files_in(tmp_path) == before, "a failed run writes nothing and leaves what was there"


# Run as `python sft_train.py --profile cpu ARGV`: the supervised stage's own bad inputs (the rest are grpo_train's).
SFT_CASES = [
    Case(
        "the embedded model",
        [],
        "the embedded model has its own supervised build",
        row="`sft_train.py` on the embedded model (the cpu profile's default)",
    ),
    Case(
        "a row that is no reply",
        ["--model", "m", "--dataset", "sft-rows"],
        "dataset sft-rows: row 2: the completion 'CRANE' is not a reply",
        "sftrows",
        row="a supervised dataset row that is no reply",
    ),
    Case("an option of GRPO's alone", ["--model", "m", "--num_generations", "4"], "unknown option '--num_generations'"),
    Case(
        "replies over the budget",
        ["--model", "{tmp}/qwen", "--dataset", "{tmp}/rows", "--max-completion", "24"],
        "row 1's reply takes",
        "sftbudget",
        row="supervised rows whose replies do not fit the reply budget (found with the tokenizer, before the model loads)",
    ),
]


@pytest.mark.parametrize("case", SFT_CASES, ids=[c.name for c in SFT_CASES])
def test_sft_train_bad_input_is_one_line(case, tmp_path, monkeypatch, capsys, request):
    monkeypatch.chdir(tmp_path)
    for name, text in {"m/config.json": '{"model_type": "qwen2"}', "m/model.safetensors": ""}.items():
        write(tmp_path / name, text)  # a model directory that passes its check, and is never loaded
    if case.setup == "sftrows":
        reply = "<think>\nx\n</think>\n\n<guess>CRANE</guess>"
        rows = [
            {
                "prompt": [{"role": "user", "content": "Guess 1 of 6."}],
                "completion": [{"role": "assistant", "content": c}],
            }
            for c in (reply, "CRANE")
        ]
        write(tmp_path / "sft-rows" / "train.jsonl", "\n".join(json.dumps(r) for r in rows))
    if case.setup == "sftbudget":  # rows written for 128 tokens, trained for 24: found once the tokenizer counts them
        shutil.copytree(request.getfixturevalue("qwen_dir"), tmp_path / "qwen")
        from transformers import AutoTokenizer

        from training.sft_data import Budget, build_sft_rows, save_sft_dataset

        built, stats = build_sft_rows(16, 0, AutoTokenizer.from_pretrained(tmp_path / "qwen"), Budget(128))
        save_sft_dataset(built, stats, tmp_path / "rows")
    monkeypatch.setattr(sft_train, "load_model", lambda *a, **k: pytest.fail("the model loaded before the error"))
    before = files_in(tmp_path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in case.argv]
    line = one_line_error(
        capsys, sft_train.main(["--profile", "cpu", *args]), tmp_path, logged=case.setup == "sftbudget"
    )
    assert case.expected in line
    if case.row:
        assert_is_the_docs_line(case.row, line, tmp_path)
    assert files_in(tmp_path) == before, "a failed run writes nothing and leaves what was there"


EVALUATE_CASES = [
    Case(
        "adapter dir missing",
        ["--adapter", "{tmp}/nope"],
        "does not exist",
        row="`evaluate.py --adapter` that does not exist",
    ),
    Case("adapter dir not an adapter", ["--adapter", "{tmp}"], "no adapter_config.json"),
    Case("model dir without weights", ["--model", "{tmp}/half"], "no weights"),
    Case("hub unreachable", ["--model", "someorg/some-model"], "hub is unreachable"),
    Case("value of the wrong type", ["--games", "many"], "invalid int value"),
    Case("out of range", ["--max_new_tokens", "0"], "--max_new_tokens must be at least 1"),
    Case("unknown option", ["--frobnicate", "1"], "unknown argument '--frobnicate'"),
    Case(
        "opening not a word",
        ["--openings", "words:CRANE,QXZJV"],
        "'QXZJV' is not an allowed word",
        row="an opening word that is not an allowed word",
    ),
    Case(
        "opening too long",
        ["--openings", "answer:6"],
        "K must be a whole number from 1 to 5",
        row="more drawn opening guesses than a game leaves turns for",
    ),
    Case("adapter_config.json not JSON", ["--adapter", "{tmp}/damaged-adapter"], "adapter_config.json is not valid"),
    Case("config.json not JSON", ["--model", "{tmp}/qwen"], "config.json is not valid JSON"),
    Case(
        "run config edited",
        ["--adapter", "outputs/cpu"],
        "wordle_grpo_config.yaml is not a run's configuration",
        "edited",
        row="`evaluate.py --adapter` whose run configuration was edited into something else",
    ),
    Case(
        "vLLM not installed",
        ["--games", "2", "--backend", "vllm"],
        "--backend vllm needs vLLM, which is not installed",
        "novllm",
        row="`evaluate.py --backend vllm` without vLLM",
    ),
    Case("out is a file", ["--games", "2"], "--out eval-out is a file, not a directory", "evalout"),
    Case("out cannot be written", ["--games", "2"], "--out eval-out cannot be written (in /", "readonly"),
    Case(
        "adapter weights cut short",
        ["--adapter", "{tmp}/cut"],
        "cut/adapter_model.safetensors is damaged (Error while deserializing header",
        "cutadapter",
        row="`evaluate.py --adapter` whose weights file is damaged (a copy cut short)",
    ),
    Case(
        "cache dir cannot be written",
        ["--games", "2"],
        "WORDLE_GRPO_CACHE_DIR /",
        "readonlycache",
        row="a cache directory named by `$WORDLE_GRPO_CACHE_DIR` that cannot be written",
    ),
]


@pytest.mark.parametrize("case", EVALUATE_CASES, ids=[c.name for c in EVALUATE_CASES])
def test_evaluate_bad_input_is_one_line(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for kind in ("weights", "damaged", "hub", case.setup):
        _setup(kind, tmp_path, monkeypatch)
    monkeypatch.setattr(evaluation.run, "evaluate_player", lambda *a, **k: pytest.fail("played before validating"))
    before = files_in(tmp_path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in case.argv]
    line = one_line_error(capsys, evaluate_cli.main([*args, "--out", "eval-out"]), tmp_path)
    assert case.expected in line
    if case.row:
        assert_is_the_docs_line(case.row, line, tmp_path)
    assert files_in(tmp_path) == before, "nothing written before the error, and nothing overwritten"


def test_each_row_of_docs_errors_is_the_row_of_one_case():
    # A new row needs a case that prints its line, and a case's row must be in the doc, word for word.
    rows = [case.row for case in (*TRAIN_CASES, *SFT_CASES, *EVALUATE_CASES) if case.row]
    assert sorted(set(doc_rows()) - set(rows)) == [], "docs/errors.md rows without a case"
    assert sorted(set(rows) - set(doc_rows())) == [], "cases whose row is not in docs/errors.md"
    assert sorted(r for r in rows if rows.count(r) > 1) == [], "rows with more than one case"


def test_the_model_is_checked_before_the_output_dir(tmp_path, capsys, no_loading):
    # Fix what is first in a user's command first: a typo'd model, not "already holds checkpoints".
    out = finished_checkpoint(tmp_path / "out")
    line = one_line_error(
        capsys, grpo_train.main(["--output_dir", str(out), "--model", str(tmp_path / "typo")]), tmp_path
    )
    assert "does not exist" in line


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


def defaults_said(help_text: str, indent: int) -> dict[str, str]:
    """Each option's ``(default: …)`` in a help text whose option entries are indented ``indent`` spaces."""
    entries, flag = {}, None
    for line in help_text.splitlines():
        if line.startswith("  --"):
            flag = line.split()[0].lstrip("-").replace("-", "_")
            entries[flag] = line
        elif flag and line.startswith(" " * indent):
            entries[flag] += " " + line.strip()
        else:
            flag = None
    found = {name: re.search(r"\(default: ([^)]*)\)", " ".join(text.split())) for name, text in entries.items()}
    return {name: match.group(1) for name, match in found.items() if match}


def test_help_shows_the_profiles_defaults_as_help_all_does(capsys):
    assert grpo_train.main(["--help"]) == 0
    short = capsys.readouterr().out
    assert short.startswith("Train a LoRA adapter") and "--help-all" in short and len(short.splitlines()) < 100
    # One spelling of each flag, the one the examples above it use.
    for dashed, underscored in (("max-completion", "max_completion"), ("no-4bit", "no_4bit"), ("dry-run", "dry_run")):
        assert f"--{dashed} " in short and f"--{underscored}" not in short
    # The defaults are those of the profile this machine gets (the cpu one here), and say so; zeros show.
    assert "Defaults are profile cpu's (--profile auto on this machine" in short
    said = defaults_said(short, 28)
    assert said["profile"] == "auto" and said["rollout"] == "game, from profile cpu"
    assert said["secrets"] == "rl, from profile cpu" and said["max_steps"] == "100, from profile cpu"
    assert said["game_eval_steps"] == "0" and said["mps_empty_cache_steps"] == "0" and said["seed"] == "42"
    assert said["model"] == "tiny, from profile cpu" and said["max_completion"] == "16, from profile cpu"
    # --help-all says the same default for every option --help shows, and spells the flags alike.
    assert grpo_train.main(["--help-all"]) == 0
    full = capsys.readouterr().out
    assert "--learning_rate" in full and "[--max-completion MAX_COMPLETION]" in full and "[--dry-run" in full
    every = defaults_said(full, 24)
    assert {name: every.get(name) for name in said} == said
    # Another profile's defaults, named on the command line.
    assert grpo_train.main(["--profile", "mps", "--help"]) == 0
    mps = defaults_said(capsys.readouterr().out, 28)
    assert mps["max_completion"] == "128, from profile mps" and mps["rollout"] == "turn"


def test_evaluate_help_says_every_default_even_where_the_help_speaks_of_defaults(capsys):
    assert evaluate_cli.main(["--help"]) == 0
    short = capsys.readouterr().out
    assert option(short, "torch_threads") == (
        "--torch_threads CPU threads for torch, 0 for torch's default (default: the adapter's run's, else as "
        "grpo_train's profiles: 1 for the embedded model, whose tiny matrices a second thread only slows, else 0)"
    )


def test_the_entry_scripts_import_runtime_quiet_before_any_library():
    for script in ("grpo_train.py", "sft_train.py", "evaluate.py"):
        first = [line for line in (ROOT / script).read_text().splitlines() if line.startswith(("import ", "from "))]
        assert first[1].startswith("import runtime.quiet"), script  # after "from __future__ import annotations"


@pytest.mark.parametrize(
    "logger_name, notice",
    [
        # bitsandbytes' own line when the hub kernel cannot be fetched (no network, or offline).
        (
            "bitsandbytes.backends.cpu.ops",
            (
                "Failed to load CPU gemm_4bit_forward from kernels-community: no network. Please make sure you already "
                "`pip install kernels` and the kernels >= 0.11.1"
            ),
        ),
        # The kernels package's line before that one, under HF_HUB_OFFLINE.
        (
            "kernels._internals.hf_hub",
            (
                "Skipping publisher trust check for 'kernels-community/quantization-bitsandbytes' because Hugging Face "
                "Hub is in offline mode."
            ),
        ),
    ],
)
def test_the_hub_kernel_notice_is_dropped_and_nothing_else(caplog, logger_name, notice):
    import logging

    import runtime.quiet

    assert logger_name in runtime.quiet.NOTICE_LOGGERS
    logger = logging.getLogger(logger_name)
    with caplog.at_level(logging.WARNING, logger=logger_name):
        logger.warning(notice)
        logger.warning("some other warning")
    assert [r.getMessage() for r in caplog.records] == ["some other warning"]


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
    situations = len(doc_rows())  # the errors' table: the stops and warnings are the second
    said = re.search(r"All (\d+), launchers", " ".join((ROOT / "README.md").read_text().split()))
    assert said and int(said.group(1)) == situations, (
        f"README says {said and said.group(1)}, docs/errors.md has {situations}"
    )


def test_a_real_read_only_mount_is_refused_before_anything_loads(tmp_path, capsys, no_loading):
    """The cases above inject the error a read-only mount gives; where this machine lets the test mount one, the
    real thing."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command on this machine")
    mount = tmp_path / "ro"
    mount.mkdir()
    mounting = ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)]
    made = subprocess.run(mounting, check=False, capture_output=True)
    if made.returncode:
        pytest.skip("mounting a read-only filesystem needs privileges this machine does not give")
    try:
        code = grpo_train.main(["--profile", "cpu", "--output_dir", str(mount / "run")])
        line = one_line_error(capsys, code, tmp_path)
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    assert (
        line
        == f"error: --output_dir {mount}/run cannot be written (in {mount}): Read-only file system; choose another --output_dir"
    )


# --- the lines a run stops or warns with (docs/errors.md's second table) -----------------------------------------


def _phase_line(tmp: Path, now: str, received: signal.Signals, checkpoint: bool = False, saved: bool = False) -> str:
    if checkpoint:
        finished_checkpoint(tmp / "outputs" / "cpu")
    phases = Phases(config.resolve(["--profile", "cpu"]), Path("outputs/cpu"))
    phases.now, phases.saved = now, saved
    return f"stopped: {phases.line(received)}"


def _non_finite(tmp: Path) -> str:
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("training.health").addHandler(handler)
    try:
        state = SimpleNamespace(global_step=1, is_world_process_zero=True)
        Health(1e-3).on_log(None, state, TrainerControl(), {"loss": float("nan"), "grad_norm": 1.0})
    finally:
        logging.getLogger("training.health").removeHandler(handler)
    return lines[0]


def _collapsed(tmp: Path) -> str:
    health = Health(0.5)
    for step, share in enumerate([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], start=1):
        logs = {"loss": 0.1, "rewards/format_reward/mean": share}
        health.on_log(None, SimpleNamespace(global_step=step, is_world_process_zero=True), TrainerControl(), logs)
    return health.describe()


def _resumed(tmp: Path, monkeypatch) -> str:
    _setup("resumable", tmp, monkeypatch)
    resolved = config.resolve(["--profile", "cpu", "--resume", "--learning_rate", "1e-4", "--max_steps", "400"])
    run.plan(resolved)
    return next(note for note in resolved.notes if note.startswith("--resume from"))


STOP_LINES = {
    "a signal before anything was trained (the model loading, the rows, the games before training)": lambda tmp, _: (
        _phase_line(tmp, "playing the games before training", signal.SIGINT)
    ),
    "a signal outside the steps, after a checkpoint (a resumed run loading)": lambda tmp, _: _phase_line(
        tmp, "loading the model", signal.SIGINT, checkpoint=True
    ),
    "a signal while the adapter is saved, or the games after training play": lambda tmp, _: _phase_line(
        tmp, "playing the games after training", signal.SIGTERM, saved=True
    ),
    "a policy that collapsed (the warning, at its step; also on the card and to the trackers as "
    "`health/collapsed_at`)": lambda tmp, _: _collapsed(tmp),
    "a loss or gradient norm that is not finite (the warning, once each)": lambda tmp, _: _non_finite(tmp),
    "game mode with fewer than 4 games per start state (a note)": lambda tmp, _: next(
        n for n in config.resolve(["--profile", "cpu", "--num_generations", "2"]).notes if "live game" in n
    ),
    "`--resume` with settings that may change (a note)": _resumed,
}
# The rows a real run's test checks: a real SIGTERM during training (test_train), a real collapse (test_health).
CHECKED_BY_REAL_RUNS = {
    "a signal during training",
    "a policy that collapsed, stopped (`--stop_on_collapse`, on by default after a healthy start)",
}


@pytest.mark.parametrize("row", STOP_LINES)
def test_each_stop_or_warning_is_the_line_its_row_shows(row, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_is_the_docs_line(row, STOP_LINES[row](tmp_path, monkeypatch), tmp_path, stops=True)


def test_each_row_of_the_stops_table_is_checked():
    assert sorted(doc_rows(stops=True)) == sorted({*STOP_LINES, *CHECKED_BY_REAL_RUNS})
