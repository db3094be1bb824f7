"""The checks and adjustments that run on the layered values before TRL's configs are built.

Each one either fixes a value the user asked for in a way that cannot work as written (recorded in
``notes``, printed by ``--dry-run``), or raises a one-line ``ConfigError`` naming the flag. They run
in the order ``settings.config.resolve`` calls them: the script's own flags first, so they win.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

from trl import GRPOConfig

from rewards import GAME_ONLY, REWARD_FUNCS, default_rewards
from runtime import device as devices
from settings.arguments import MERGE_DTYPES, RunArguments, ScriptArguments
from settings.errors import ConfigError, unknown
from settings.game import game_batch, game_objective, scale_rewards
from settings.launch import launch_problem
from wordle.completion import guess_regex
from wordle.feedback import CACHE_ENV
from wordle.openings import Opening
from wordle.words import train_secrets

# transformers 5.20 renamed gradient_checkpointing to activation_checkpointing. vLLM pins older releases
# (0.31: transformers <5.18), where only the old name exists: profiles keep the new name, read as the old one there.
NEW_CHECKPOINTING = "activation_checkpointing"
HAS_NEW_CHECKPOINTING = NEW_CHECKPOINTING in {f.name for f in dataclasses.fields(GRPOConfig)}
# On CPU, vLLM sizes its KV cache from this variable (GiB), else from a share of RAM (peaks of 3.6-4.5 GB
# measured on the embedded model, 2.1 GB with 1 GiB). A run that uses vLLM on CPU sets it if the user did not.
VLLM_CPU_KV_ENV, VLLM_CPU_KV_DEFAULT = "VLLM_CPU_KVCACHE_SPACE", "1"


def check_writable(path: Path, flag: str) -> None:
    """ConfigError when the directory ``path`` (made later if missing) cannot be written there: a read-only mount,
    a folder that is not the user's, a full disk. Probed by writing, since permissions miss a read-only mount."""
    folder = path.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return  # a file where a directory goes: the caller's own check says so
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        inside = "" if folder == path.absolute() else f" (in {folder})"
        raise ConfigError(f"{flag} {path} cannot be written{inside}: {exc.strerror}; choose another {flag}") from None


def check_cache_dir() -> None:
    """A cache directory the user named (``$WORDLE_GRPO_CACHE_DIR``) that cannot be written is refused; the default
    one falls back to building the pattern matrix in memory, with a warning (``wordle.feedback``)."""
    if os.environ.get(CACHE_ENV):
        check_writable(Path(os.environ[CACHE_ENV]), CACHE_ENV)


# (field, lowest valid value, what it counts): a value below is a typo, caught before anything runs.
_AT_LEAST = (
    ("max_completion_length", 1, "tokens"),
    ("per_device_train_batch_size", 1, "completions"),
    ("gradient_accumulation_steps", 1, "micro-steps"),
    ("num_generations", 2, "completions per prompt (GRPO compares at least two)"),
    ("save_steps", 1, "steps"),
    ("logging_steps", 1, "steps"),
)


def check_ranges(
    script: RunArguments, train_kw: dict[str, Any], model_kw: dict[str, Any], budget: dict[str, Any] | None = None
) -> None:
    """Every value below its least is a typo, caught before anything runs. ``budget``: where the reply limit lives
    (the GRPO config's ``max_completion_length``, or the supervised stage's own)."""
    for name, low, unit in _AT_LEAST:
        value = (budget if name == "max_completion_length" and budget is not None else train_kw).get(name)
        if value is not None and value < low:
            rollback = name == "max_completion_length" and script.max_completion is not None
            flag = "--max-completion" if rollback else f"--{name}"
            raise ConfigError(f"{flag} must be at least {low} ({unit}), got {value}")
    if train_kw.get("max_steps", -1) == 0 or train_kw.get("max_steps", -1) < -1:
        raise ConfigError(f"--max_steps must be positive (or -1 for num_train_epochs), got {train_kw['max_steps']}")
    for name in ("learning_rate", "temperature"):
        if train_kw.get(name) is not None and not train_kw[name] > 0:
            raise ConfigError(f"--{name} must be positive, got {train_kw[name]}")
    if model_kw.get("use_peft") and model_kw.get("lora_r", 1) < 1:
        raise ConfigError(f"--lora_r must be at least 1, got {model_kw['lora_r']}")
    if script.train_rows < 1:
        raise ConfigError(f"--train_rows must be at least 1, got {script.train_rows}")
    if script.torch_threads < 0 or script.mps_empty_cache_steps < 0:
        raise ConfigError("--torch_threads and --mps_empty_cache_steps must be 0 (off) or more")
    if script.game_eval_steps < 0:
        raise ConfigError(f"--game_eval_steps must be 0 (off) or more, got {script.game_eval_steps}")
    n_val = len(train_secrets("val"))  # the check plays at most every validation secret
    if not 1 <= script.game_eval_games <= n_val:
        raise ConfigError(
            f"--game_eval_games must be between 1 and {n_val} (the validation secrets), got {script.game_eval_games}"
        )
    if script.merge and not model_kw.get("use_peft", True):
        raise ConfigError("--merge merges a LoRA adapter; with --use_peft false the output is already a whole model")
    if script.merge_dtype not in MERGE_DTYPES:
        raise ConfigError(f"unknown --merge_dtype {script.merge_dtype!r}; valid: {', '.join(MERGE_DTYPES)}")
    if isinstance(script, ScriptArguments):
        _check_grpo_ranges(script)


def _check_grpo_ranges(script: ScriptArguments) -> None:
    if not 0 <= script.explore <= 1:
        raise ConfigError(f"--explore is a share of guesses, between 0 and 1; got {script.explore}")
    if not 1 <= script.eval_games <= 300:
        raise ConfigError(f"--eval_games must be between 1 and 300 (the held-out secrets), got {script.eval_games}")
    if not 0 <= script.game_openings <= 1:
        raise ConfigError(f"--game_openings is a share of start states, between 0 and 1; got {script.game_openings}")
    for spec in script.eval_openings:
        try:
            Opening.parse(spec)
        except ValueError as exc:
            raise ConfigError(f"--eval_openings: {exc}") from None


def apply_script_flags(
    script: RunArguments,
    train_kw: dict[str, Any],
    model_kw: dict[str, Any],
    notes: list[str],
    budget: dict[str, Any] | None = None,
) -> None:
    """The script's own flags, applied last so they win over every layer. ``budget``: the arguments that hold the
    reply limit (the GRPO config's, or the supervised stage's own)."""
    if script.model is not None:
        model_kw["model_name_or_path"] = script.model
    if script.max_completion is not None:
        (train_kw if budget is None else budget)["max_completion_length"] = script.max_completion
        notes.append(f"--max-completion {script.max_completion}: max_completion_length = {script.max_completion}")
    if script.world_size is not None:
        if not script.dry_run:
            raise ConfigError(
                "--world_size previews a launch with --dry-run; to run on N processes: torchrun --nproc_per_node N"
            )
        if script.world_size < 1:
            raise ConfigError(f"--world_size must be at least 1, got {script.world_size}")
    report_to = train_kw.get("report_to")
    if isinstance(report_to, str) and "," in report_to:  # the command line gives one string; transformers takes a list
        train_kw["report_to"] = [name.strip() for name in report_to.split(",") if name.strip()]
    if script.no_4bit:
        model_kw["load_in_4bit"] = model_kw["load_in_8bit"] = False
        if "8bit" in str(train_kw.get("optim", "")):
            notes.append(f"--no-4bit: optimizer {train_kw['optim']} needs bitsandbytes, using adamw_torch")
            train_kw["optim"] = "adamw_torch"


def old_names(argv: list[str], values: dict[str, Any], train_kw: dict[str, Any], notes: list[str]) -> None:
    """``gradient_checkpointing`` is transformers 5's old name for ``activation_checkpointing``, and the new one wins
    in TrainingArguments: a ``--gradient_checkpointing true`` beside a profile's ``activation_checkpointing: false``
    was silently ignored. Profiles use only the new name, so the old one, when given, is the user's."""
    flags = {"--gradient_checkpointing", "--gradient-checkpointing"}
    if not HAS_NEW_CHECKPOINTING:  # one name only: nothing to reconcile
        return
    if "gradient_checkpointing" in values or any(a.split("=")[0] in flags for a in argv):
        value = train_kw["activation_checkpointing"] = train_kw["gradient_checkpointing"]
        notes.append(f"gradient_checkpointing is activation_checkpointing in transformers 5: set to {value}")


def constrain_vllm(script: ScriptArguments, train_kw: dict[str, Any], notes: list[str]) -> None:
    if script.constrain_vllm is None:
        return
    if script.constrain_vllm != "allowed":
        raise ConfigError(f"unknown --constrain_vllm {script.constrain_vllm!r}; valid: allowed")
    if not train_kw.get("use_vllm"):
        raise ConfigError("--constrain_vllm needs vLLM generation: pass --use_vllm true (pip install vllm)")
    train_kw["vllm_structured_outputs_regex"] = guess_regex()
    notes.append("--constrain_vllm allowed: vLLM rollouts can only guess allowed words (a regex of all 12972)")


def vllm_on_device(
    script: ScriptArguments, train_kw: dict[str, Any], model_kw: dict[str, Any], notes: list[str]
) -> None:
    """What TRL's vLLM modes need of the device, checked before vLLM starts (and fails deep inside it).

    Server mode sends the trained weights to the server over NCCL, which only CUDA has. Sleep mode
    releases GPU memory, and vLLM's other platforms refuse it with a pydantic trace at start: off there.
    """
    if not train_kw.get("use_vllm"):
        return
    gpu = script.device in ("cuda", "rocm")  # ROCm's torch is a CUDA build, RCCL its NCCL
    if train_kw.get("vllm_mode") == "server" and not gpu:
        raise ConfigError(
            f"vLLM server mode sends weights to the server over NCCL, which needs a CUDA GPU (device {script.device}): "
            "use --vllm_mode colocate"
        )
    if model_kw.get("load_in_4bit") and not gpu:
        raise ConfigError(
            f"4-bit weights with vLLM need a CUDA GPU: vLLM on {script.device} cannot load bitsandbytes quantization; "
            "pass --load_in_4bit false or --use_vllm false"
        )
    if train_kw.get("vllm_enable_sleep_mode") and not gpu:
        train_kw["vllm_enable_sleep_mode"] = False
        notes.append(f"vllm_enable_sleep_mode: off, vLLM has sleep mode on GPUs only (device {script.device})")
    if script.device == "cpu":
        notes.append(
            f"vLLM on CPU: its KV cache is {VLLM_CPU_KV_ENV} GiB ({os.environ.get(VLLM_CPU_KV_ENV, VLLM_CPU_KV_DEFAULT)}"
            f"{'' if VLLM_CPU_KV_ENV in os.environ else ', set by this run'}), not vllm_gpu_memory_utilization"
        )


def merged_generation(script: ScriptArguments, train_kw: dict[str, Any], model_kw: dict[str, Any]) -> None:
    """What ``--merged_generation`` needs: a LoRA to merge, ``model.generate`` to serve (vLLM holds a merged copy of its
    own, and TRL's paged path casts the model it is handed). Sharded weights are refused with the launch
    (settings.launch)."""
    if not script.merged_generation:
        return
    if not model_kw.get("use_peft"):
        raise ConfigError("--merged_generation merges a LoRA into a copy of the model: it needs --use_peft true")
    if train_kw.get("use_vllm"):
        raise ConfigError(
            "--merged_generation is for model.generate; vLLM generates from a merged copy of its own: "
            "drop one of --merged_generation, --use_vllm"
        )
    for key in ("use_transformers_continuous_batching", "use_transformers_paged"):
        if train_kw.get(key):
            raise ConfigError(
                f"--merged_generation is for model.generate, not TRL's paged generation: drop one of "
                f"--merged_generation, --{key}"
            )


def choose_rewards(
    script: ScriptArguments, train_kw: dict[str, Any], notes: list[str], given: frozenset[str] = frozenset()
) -> None:
    """The rollout mode, its reward functions and their weights (the mode's defaults unless given)."""
    scale = scale_rewards(train_kw)
    defaults = default_rewards(script.rollout.plays_games)
    if script.rewards is None:
        script.rewards = list(defaults)
    unknown_rewards = [r for r in script.rewards if r not in REWARD_FUNCS]
    if unknown_rewards:
        raise unknown("reward", unknown_rewards[0], list(REWARD_FUNCS), "--rewards")
    game_only = [r for r in script.rewards if r in GAME_ONLY]
    if game_only and not script.rollout.plays_games:
        raise ConfigError(f"{game_only[0]} scores whole games: it needs --rollout game")
    if script.rollout.plays_games:
        game_batch(script, train_kw, notes)
        game_objective(train_kw, given, notes, scale)
    if train_kw.get("reward_weights") is None:
        train_kw["reward_weights"] = [defaults.get(r, 1.0) for r in script.rewards]
    elif len(train_kw["reward_weights"]) != len(script.rewards):
        raise ConfigError(
            f"reward_weights has {len(train_kw['reward_weights'])} values for {len(script.rewards)} rewards "
            f"({', '.join(script.rewards)})"
        )


def check_launch(script: RunArguments, train_kw: dict[str, Any]) -> None:
    """How the run was launched (torchrun, accelerate launch) and sharded (DeepSpeed, FSDP): one line
    now for what would otherwise run other than asked, or fail after the model loaded."""
    if isinstance(train_kw.get("fsdp"), str) and train_kw["fsdp"].lower() in ("true", "false"):
        # --help says "pass --fsdp (or fsdp=True)"; transformers takes the string "true" for an unknown option.
        train_kw["fsdp"] = True if train_kw["fsdp"].lower() == "true" else None
    problem = launch_problem(script, train_kw)
    if problem is not None:
        raise ConfigError(problem)


def check_device(
    script: RunArguments,
    train_kw: dict[str, Any],
    model_kw: dict[str, Any],
    notes: list[str],
    check: bool,
    flags: frozenset[str] = frozenset(),
    profile_device: str | None = None,
) -> bool:
    """Whether the run's device is on this machine (an error when ``check`` and it is not), the device the
    trainer uses made the one the run names, and the fp16 fallback on a GPU without bf16. ``flags``: the
    options the command line gave; ``profile_device``: the device the profile itself names."""
    asked_by = f"--device {script.device}" if "device" in flags else f"profile {script.profile}"
    present = devices.has_device(script.device)
    if check and not present:
        if "device" not in flags:
            instead = "use --profile auto or --profile cpu"
        elif profile_device and profile_device != script.device and devices.has_device(profile_device):
            instead = f"drop it (profile {script.profile} trains on {profile_device})"
        else:
            instead = "use --device cpu"
        raise ConfigError(devices.absent_message(script.device, asked_by, instead))
    # transformers trains where use_cpu says, whatever the device: the device decides, and a contradiction is refused.
    on_cpu = script.device == "cpu"
    if bool(train_kw.get("use_cpu")) != on_cpu:
        if "use_cpu" in flags:
            other = "--device cuda" if on_cpu else "--device cpu"
            raise ConfigError(
                f"--use_cpu {str(not on_cpu).lower()} contradicts {asked_by}: the device decides where the run "
                f"trains; drop --use_cpu, or pass {other}"
            )
        train_kw["use_cpu"] = on_cpu
        notes.append(f"{asked_by}: use_cpu {str(on_cpu).lower()}, so that the run trains on {script.device}")
    if script.device in ("cuda", "rocm") and present and train_kw.get("bf16") and not devices.cuda_supports_bf16():
        train_kw.update(bf16=False, fp16=True)
        model_kw["dtype"] = "float16"
        notes.append("this GPU lacks bf16: training in fp16, and 4-bit compute in fp16")
    if not present:
        notes.append(f"device {script.device} is not present on this machine: shown as the profile sets it")
    return present
