"""The embedded default model (``--model tiny``): its builder, and the model it ships in ``tinymodel/model``.

No machine of ours can reach a model hub, so the project makes its own small model, one module per job:

- :mod:`tinymodel.tokenizer`: a **tokenizer that shows letters and picks words**. A prompt is spelled
  letter by letter, each letter with its feedback mark and its column as one token (``S(-)₁``,
  `` O(✓)₂``), so every constraint a past guess sets is one token; a past answer also has a token of
  its own (``⟦CRANE⟧``) in place of its spelled letters, and another past guess's spelling is dropped (its
  marked letters spell it again). A guess of an answer is one token, so the model chooses among words and
  cannot misspell one. Its chat template drops the system message and ends every turn with
  ``<|end|>``, the eos token.
- :mod:`tinymodel.bag`: the **wired start**. A softmax regression from the prompt's tokens to the
  guessed answer (the *guess bag*, fitted in about two minutes) is written into a fresh Qwen2's
  layer 0 as uniform attention, so before any training its top answer already fits every feedback
  line in most states.
- :mod:`tinymodel.data`: the **training rows**, game states of the training secrets only, answered
  ``<think>.R..E</think><guess>CRANE</guess>`` (the think is the letters placed so far), from any opening.
- :mod:`tinymodel.sft`: **supervised training** (a transformers ``Trainer``) that scores the answer
  token against every still-possible answer at once (a soft target). It teaches the reply's format
  and refines the wired guess.
- :mod:`tinymodel.build`: the small Qwen2 (heads of their own for the past-guess tokens, saved as a Llama),
  the scales and the build, whose CLI is ``python -m tinymodel`` (17 to 27 minutes on one CPU core, by the
  machine's speed; ``--scale ci`` makes a throwaway model in seconds for tests).
- :mod:`tinymodel.stand_in`: **stand-ins of hub models**: a random-weight Qwen2 saved beside Qwen's real
  tokenizer files, so the path every hub user takes runs offline, in the tests and the memory benchmark.

This module imports nothing heavy: loading the shipped model needs only :func:`model_dir`.
Loading never builds; a missing model is a one-line error that names the build command.
"""

from __future__ import annotations

from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parent / "model"
# The CPU kernels a build runs on, set by ``python -m tinymodel`` before torch loads (a variable already set wins).
# Why: SFT's 672 steps turn the float differences between kernels into other weights. Built with AVX-512 kernels
# (torch's choice on an AVX-512 CPU) a build gave other weights that played worse; pinned to AVX2 the same machine
# rebuilt the shipped weights byte for byte (docs/research-log.md). MKL, which does the matrix products, honours its pin
# on Intel CPUs only; on another maker's CPU ``python -m tinymodel`` answers MKL's maker check first (tinymodel.mkl).
BUILD_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
BUILD_COMMAND = "python -m tinymodel"  # writes MODEL_DIR by default
# The files that make a loadable model directory.
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)


class MissingModelError(FileNotFoundError):
    """The shipped model's files are not there (a partial checkout, or files deleted)."""


def model_dir() -> Path:
    """The shipped model's directory. Raises :class:`MissingModelError` when a file is missing: a
    build takes 17 to 27 minutes, too long to start silently inside model loading."""
    missing = [name for name in MODEL_FILES if not (MODEL_DIR / name).is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise MissingModelError(
            f"the embedded model in {MODEL_DIR} is missing {missing[0]}{more}: rebuild it with "
            f"`{BUILD_COMMAND}` (17 to 27 minutes on one core) or restore the directory from the repository"
        )
    return MODEL_DIR
