"""Arguments, profiles and their resolution into one configuration a user can inspect.

Precedence, lowest first: TRL's defaults, ``profiles/NAME.yaml`` (with its ``tiny:`` section when
the model is the embedded one: settings tuned for that model alone), ``--config FILE``, the
command line. Then the script's own flags apply (``--model``, ``--max-completion``, ``--no-4bit``),
every value is range-checked, and the device check and precision fallback run. Everything that
was decided is recorded in ``Resolved.notes`` and printed by ``--dry-run``. A bad value anywhere
is a one-line ``ConfigError``, never argparse's usage block.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import errno
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from trl import GRPOConfig, ModelConfig, TrlParser

from rewards import GAME_ONLY, REWARD_FUNCS, default_rewards
from training import arguments, distributed
from training import device as devices
from training.arguments import ScriptArguments, available_profiles
from training.rollout import SLOTS
from wordle.completion import guess_regex
from wordle.decoding import Decoding
from wordle.openings import Opening
from wordle.words import TRAIN_PARTS, train_secrets

logger = logging.getLogger(__name__)

TINY = "tiny"
# A profile's section of settings tuned for the embedded model: they apply only when the model is tiny.
EMBEDDED_SECTION = "tiny"
MERGE_DTYPES = ("auto", "float32", "bfloat16", "float16")
ROLLOUTS = ("turn", "game")
CONFIG_FILE = "wordle_grpo_config.yaml"  # the resolved configuration, saved beside a run's adapter
# transformers 5.20 renamed gradient_checkpointing to activation_checkpointing. vLLM pins older releases
# (0.31: transformers <5.18), where only the old name exists: profiles keep the new name, read as the old one there.
NEW_CHECKPOINTING = "activation_checkpointing"
HAS_NEW_CHECKPOINTING = NEW_CHECKPOINTING in {f.name for f in dataclasses.fields(GRPOConfig)}
# On CPU, vLLM sizes its KV cache from this variable (GiB), else from a share of RAM (peaks of 3.6-4.5 GB
# measured on the embedded model, 2.1 GB with 1 GiB). A run that uses vLLM on CPU sets it if the user did not.
VLLM_CPU_KV_ENV, VLLM_CPU_KV_DEFAULT = "VLLM_CPU_KVCACHE_SPACE", "1"


class ConfigError(ValueError):
    """A user error in the configuration: reported as one line, never a traceback."""


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # an OSError's errno when no space is left, or the user's quota is spent


@dataclass
class Resolved:
    script: ScriptArguments
    training: GRPOConfig
    model: ModelConfig
    notes: list[str]
    changed: dict[str, dict[str, Any]]  # per dataclass, the fields set to something other than the default
    argv: list[str] = field(default_factory=list)  # the command line it was resolved from

    @property
    def quantized(self) -> bool:
        return bool(self.model.load_in_4bit or self.model.load_in_8bit)

    @property
    def decoding(self) -> Decoding:
        """How the run's evaluation and held-out check play: greedy, with the training reply limit."""
        return Decoding(max_new_tokens=self.training.max_completion_length, seed=self.training.seed)

    @property
    def weights(self) -> dict[str, float]:
        """Each reward the run uses, with its weight."""
        return dict(zip(self.script.rewards, self.training.reward_weights, strict=True))


def _dataclasses() -> tuple[type, ...]:
    return (ScriptArguments, GRPOConfig, ModelConfig)


def _field_names() -> list[str]:
    names = {f.name for dc in _dataclasses() for f in dataclasses.fields(dc) if f.init}
    return sorted(names | {NEW_CHECKPOINTING})  # valid in a file on every supported transformers


def _unknown(kind: str, name: str, valid: list[str], where: str, more: str | None = None) -> ConfigError:
    """One short line: the name, the closest matches, and the valid choices or where to see them."""
    close = difflib.get_close_matches(name, valid, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    choices = f"valid: {', '.join(valid)}" if more is None else more
    return ConfigError(f"unknown {kind} {name!r} in {where}{hint}; {choices}")


def _read_yaml(path: Path, what: str, sections: tuple[str, ...] = ()) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{what} {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must be a YAML mapping of field: value")
    valid = _field_names()
    for key, value in data.items():
        if key in sections:
            if not isinstance(value, dict):
                raise ConfigError(f"{what} {path}: {key} must be a mapping of field: value")
            nested = next((k for k in value if k not in valid), None)
            if nested is not None:
                raise _unknown("key", f"{key}.{nested}", valid, str(path), "see python grpo_train.py --help-all")
        elif key not in valid:
            raise _unknown("key", str(key), valid, str(path), "see python grpo_train.py --help-all")
    return data


def load_profile(name: str) -> dict[str, Any]:
    names = available_profiles()
    if name not in names:
        raise _unknown("profile", name, ["auto", *names], "--profile")
    return _read_yaml(arguments.PROFILES_DIR / f"{name}.yaml", "profile", sections=(EMBEDDED_SECTION,))


class _Parser(TrlParser):
    """TrlParser whose errors are one ConfigError line, never argparse's usage block and exit."""

    def error(self, message: str):  # type: ignore[override]
        raise ConfigError(message.splitlines()[0])


def make_parser() -> TrlParser:
    parser = _Parser(_dataclasses())
    parser.add_argument("--config", help="YAML file layered between the profile and the command line")
    return parser


def _construct(cls: type, kwargs: dict[str, Any], label: str) -> Any:
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"invalid {label} configuration: {str(exc).splitlines()[0]}") from None


def _pre_parse(argv: list[str]) -> argparse.Namespace:
    """The flags that decide which layers apply, read before the layers are parsed."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--profile", default="auto")
    pre.add_argument("--config")
    pre.add_argument("--model", "--model_name_or_path", "--model-name-or-path", dest="model")
    pre.add_argument("--dry-run", "--dry_run", dest="dry_run", nargs="?", const="true", default="false")
    known, _ = pre.parse_known_args(argv)
    known.dry_run = known.dry_run.lower() in ("true", "1", "yes")
    return known


def _layers(known: argparse.Namespace, notes: list[str]) -> tuple[str, dict[str, Any]]:
    """The profile's values, its embedded-model section when the model is the embedded one, then --config."""
    profile = known.profile
    if profile == "auto":
        profile, why = devices.detect()
        notes.append(f"profile auto -> {profile}: {why}")
    values = load_profile(profile)
    embedded = values.pop(EMBEDDED_SECTION, {})
    config = _read_yaml(Path(known.config), "config file") if known.config else {}
    model = known.model or config.get("model") or config.get("model_name_or_path") or values["model_name_or_path"]
    if embedded:
        summary = ", ".join(f"{k} {plain(v)}" for k, v in embedded.items())
        if model == TINY:
            values.update(embedded)
            # The section's values, not the resolved ones: --config and the command line still override them.
            notes.append(
                f"model tiny: the profile's settings for the embedded model apply, under --config and the command line "
                f"({summary})"
            )
        else:
            notes.append(
                f"model {model} is not the embedded model: the profile's settings tuned for it do not apply ({summary})"
            )
    values.update(config)
    values["profile"] = profile
    if not HAS_NEW_CHECKPOINTING and NEW_CHECKPOINTING in values:
        values.setdefault("gradient_checkpointing", values.pop(NEW_CHECKPOINTING))
    return profile, values


def _parse(argv: list[str], values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The command line over the layered values, split per dataclass."""
    parser = make_parser()
    parser.set_defaults_with_config(**values)
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:
        flags = [a for a in unknown if a.startswith("-")]
        if not flags:
            raise ConfigError(
                f"unexpected value {unknown[0]!r} on the command line (the option before it takes one value)"
            )
        name = flags[0].split("=")[0].lstrip("-").replace("-", "_")
        valid = [f"--{n}" for n in ["config", *_field_names()]]
        raise _unknown("option", f"--{name}", valid, "the command line", "see python grpo_train.py --help-all")
    raw = vars(namespace)
    script_kw, train_kw, model_kw = (
        {f.name: raw[f.name] for f in dataclasses.fields(dc) if f.init and f.name in raw} for dc in _dataclasses()
    )
    return script_kw, train_kw, model_kw


# (field, lowest valid value, what it counts): a value below is a typo, caught before anything runs.
_AT_LEAST = (
    ("max_completion_length", 1, "tokens"),
    ("per_device_train_batch_size", 1, "completions"),
    ("gradient_accumulation_steps", 1, "micro-steps"),
    ("num_generations", 2, "completions per prompt (GRPO compares at least two)"),
    ("save_steps", 1, "steps"),
    ("logging_steps", 1, "steps"),
)


def _check_ranges(script: ScriptArguments, train_kw: dict[str, Any], model_kw: dict[str, Any]) -> None:
    for name, low, unit in _AT_LEAST:
        value = train_kw.get(name)
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
    if not 0 <= script.explore <= 1:
        raise ConfigError(f"--explore is a share of guesses, between 0 and 1; got {script.explore}")
    if script.torch_threads < 0 or script.mps_empty_cache_steps < 0:
        raise ConfigError("--torch_threads and --mps_empty_cache_steps must be 0 (off) or more")
    if not 1 <= script.eval_games <= 300:
        raise ConfigError(f"--eval_games must be between 1 and 300 (the held-out secrets), got {script.eval_games}")
    if script.game_eval_steps < 0:
        raise ConfigError(f"--game_eval_steps must be 0 (off) or more, got {script.game_eval_steps}")
    if not 0 <= script.game_openings <= 1:
        raise ConfigError(f"--game_openings is a share of start states, between 0 and 1; got {script.game_openings}")
    for spec in script.eval_openings:
        try:
            Opening.parse(spec)
        except ValueError as exc:
            raise ConfigError(f"--eval_openings: {exc}") from None
    n_val = len(train_secrets("val"))  # the check plays at most every validation secret
    if not 1 <= script.game_eval_games <= n_val:
        raise ConfigError(
            f"--game_eval_games must be between 1 and {n_val} (the validation secrets), got {script.game_eval_games}"
        )
    if script.merge and not model_kw.get("use_peft", True):
        raise ConfigError("--merge merges a LoRA adapter; with --use_peft false the output is already a whole model")
    if script.merge_dtype not in MERGE_DTYPES:
        raise ConfigError(f"unknown --merge_dtype {script.merge_dtype!r}; valid: {', '.join(MERGE_DTYPES)}")


def resolve(argv: list[str], *, check_device: bool = True) -> Resolved:
    """Profile, then --config, then the command line, then the script's flags; see the module docstring.

    ``check_device=False`` (what ``--dry-run`` uses) resolves a profile for a device this machine
    lacks, so that any profile can be inspected anywhere.
    """
    known = _pre_parse(argv)
    notes: list[str] = []
    profile, values = _layers(known, notes)
    script_kw, train_kw, model_kw = _parse(argv, values)
    script_kw["profile"] = profile  # the resolved name, not "auto"
    script = _construct(ScriptArguments, script_kw, "script")
    if script.device not in devices.DEVICES:
        raise ConfigError(f"unknown device {script.device!r} in profile {profile}; valid: {', '.join(devices.DEVICES)}")
    _apply_script_flags(script, train_kw, model_kw, notes)
    _old_names(argv, values, train_kw, notes)
    _check_ranges(script, train_kw, model_kw)
    _constrain_vllm(script, train_kw, notes)
    _vllm_on_device(script, train_kw, model_kw, notes)
    _rewards(script, train_kw, notes)
    trainable = [part for part in TRAIN_PARTS if part != "val"]  # val chooses settings: no run trains on it
    if script.secrets not in trainable:
        raise _unknown("part of the training secrets", script.secrets, trainable, "--secrets")
    _check_launch(script, train_kw)
    present = _check_device(script, train_kw, model_kw, notes, check=check_device and not known.dry_run)
    training, model, precision = _construct_configs(train_kw, model_kw, present, script.world_size)
    changed = _changed(script_kw, train_kw, model_kw, precision)
    return Resolved(script=script, training=training, model=model, notes=notes, changed=changed, argv=list(argv))


def _apply_script_flags(
    script: ScriptArguments, train_kw: dict[str, Any], model_kw: dict[str, Any], notes: list[str]
) -> None:
    """The script's own flags, applied last so they win over every layer."""
    if script.model is not None:
        model_kw["model_name_or_path"] = script.model
    if script.max_completion is not None:
        train_kw["max_completion_length"] = script.max_completion
        notes.append(f"--max-completion {script.max_completion}: max_completion_length = {script.max_completion}")
    if script.world_size is not None:
        if not script.dry_run:
            raise ConfigError(
                "--world_size previews a launch with --dry-run; to run on N processes: torchrun --nproc_per_node N"
            )
        if script.world_size < 1:
            raise ConfigError(f"--world_size must be at least 1, got {script.world_size}")
    if script.no_4bit:
        model_kw["load_in_4bit"] = model_kw["load_in_8bit"] = False
        if "8bit" in str(train_kw.get("optim", "")):
            notes.append(f"--no-4bit: optimizer {train_kw['optim']} needs bitsandbytes, using adamw_torch")
            train_kw["optim"] = "adamw_torch"


def _old_names(argv: list[str], values: dict[str, Any], train_kw: dict[str, Any], notes: list[str]) -> None:
    """``gradient_checkpointing`` is transformers 5's old name for ``activation_checkpointing``, and the new one wins
    in TrainingArguments: a ``--gradient_checkpointing true`` beside a profile's ``activation_checkpointing: false``
    was silently ignored. Profiles use only the new name, so the old one, when given, is the user's."""
    flags = {"--gradient_checkpointing", "--gradient-checkpointing"}
    if not HAS_NEW_CHECKPOINTING:  # one name only: nothing to reconcile
        return
    if "gradient_checkpointing" in values or any(a.split("=")[0] in flags for a in argv):
        value = train_kw["activation_checkpointing"] = train_kw["gradient_checkpointing"]
        notes.append(f"gradient_checkpointing is activation_checkpointing in transformers 5: set to {value}")


def _constrain_vllm(script: ScriptArguments, train_kw: dict[str, Any], notes: list[str]) -> None:
    if script.constrain_vllm is None:
        return
    if script.constrain_vllm != "allowed":
        raise ConfigError(f"unknown --constrain_vllm {script.constrain_vllm!r}; valid: allowed")
    if not train_kw.get("use_vllm"):
        raise ConfigError("--constrain_vllm needs vLLM generation: pass --use_vllm true (pip install vllm)")
    train_kw["vllm_structured_outputs_regex"] = guess_regex()
    notes.append("--constrain_vllm allowed: vLLM rollouts can only guess allowed words (a regex of all 12972)")


def _vllm_on_device(
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


def _rewards(script: ScriptArguments, train_kw: dict[str, Any], notes: list[str]) -> None:
    """The rollout mode, its reward functions and their weights (the mode's defaults unless given)."""
    if script.rollout not in ROLLOUTS:
        raise _unknown("rollout", script.rollout, list(ROLLOUTS), "--rollout")
    defaults = default_rewards(script.rollout)
    if script.rewards is None:
        script.rewards = list(defaults)
    unknown_rewards = [r for r in script.rewards if r not in REWARD_FUNCS]
    if unknown_rewards:
        raise _unknown("reward", unknown_rewards[0], list(REWARD_FUNCS), "--rewards")
    game_only = [r for r in script.rewards if r in GAME_ONLY]
    if game_only and script.rollout != "game":
        raise ConfigError(f"{game_only[0]} scores whole games: it needs --rollout game")
    if script.rollout == "game":
        _game_batch(script, train_kw, notes)
    if train_kw.get("reward_weights") is None:
        train_kw["reward_weights"] = [defaults.get(r, 1.0) for r in script.rewards]
    elif len(train_kw["reward_weights"]) != len(script.rewards):
        raise ConfigError(
            f"reward_weights has {len(train_kw['reward_weights'])} values for {len(script.rewards)} rewards "
            f"({', '.join(script.rewards)})"
        )


def _check_launch(script: ScriptArguments, train_kw: dict[str, Any]) -> None:
    """How the run was launched (torchrun, accelerate launch) and sharded (DeepSpeed, FSDP): one line
    now for what would otherwise run other than asked, or fail after the model loaded."""
    if isinstance(train_kw.get("fsdp"), str) and train_kw["fsdp"].lower() in ("true", "false"):
        # --help says "pass --fsdp (or fsdp=True)"; transformers takes the string "true" for an unknown option.
        train_kw["fsdp"] = True if train_kw["fsdp"].lower() == "true" else None
    problem = distributed.launch_problem(script, train_kw)
    if problem is not None:
        raise ConfigError(problem)


def _check_device(
    script: ScriptArguments, train_kw: dict[str, Any], model_kw: dict[str, Any], notes: list[str], check: bool
) -> bool:
    """Whether the profile's device is on this machine (an error when ``check`` and it is not), and
    the fp16 fallback on a GPU without bf16."""
    present = devices.has_device(script.device)
    if check and not present:
        raise ConfigError(devices.absent_message(script.device, script.profile))
    if script.device in ("cuda", "rocm") and present and train_kw.get("bf16") and not devices.cuda_supports_bf16():
        train_kw.update(bf16=False, fp16=True)
        model_kw["dtype"] = "float16"
        notes.append("this GPU lacks bf16: training in fp16, and 4-bit compute in fp16")
    if not present:
        notes.append(f"device {script.device} is not present on this machine: shown as the profile sets it")
    return present


class _PreviewGRPOConfig(GRPOConfig):
    """GRPOConfig as N processes see it: TRL sizes and checks the generation batch with ``world_size``,
    which is 1 in a dry run without a launcher (``--dry-run --world_size N``)."""

    preview_world_size = 1

    @property
    def world_size(self) -> int:
        return self.preview_world_size


def _construct_configs(
    train_kw: dict[str, Any], model_kw: dict[str, Any], present: bool, preview_world: int | None = None
) -> tuple[GRPOConfig, ModelConfig, dict[str, Any]]:
    """TRL's GRPOConfig and ModelConfig, and the precision flags as asked for.

    transformers validates bf16/fp16 against this machine when the config is built; a dry run
    for another device builds it without them and puts them back afterwards.
    """
    precision = {k: train_kw.get(k) for k in ("bf16", "fp16")}
    if not present:
        train_kw.update(bf16=False, fp16=False)
    cls: type[GRPOConfig] = GRPOConfig
    if preview_world:
        cls = type("GRPOConfig", (_PreviewGRPOConfig,), {"preview_world_size": preview_world})
    training = _construct(cls, train_kw, "training")
    for key, value in precision.items():
        setattr(training, key, value)
    return training, _construct(ModelConfig, model_kw, "model"), precision


def _changed(
    script_kw: dict[str, Any], train_kw: dict[str, Any], model_kw: dict[str, Any], precision: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Every field that differs from what argparse yields with no profile, config or flags (TRL's defaults)."""
    baseline = vars(make_parser().parse_known_args([])[0])
    changed = {
        name: {k: plain(v) for k, v in kw.items() if plain(v) != plain(baseline.get(k))}
        for name, kw in (("script", script_kw), ("grpo_config", train_kw), ("model_config", model_kw))
    }
    changed["grpo_config"].update({k: v for k, v in precision.items() if v is not None})
    if "vllm_structured_outputs_regex" in changed["grpo_config"]:  # 80 kB of words: summarised, not printed
        regex = changed["grpo_config"]["vllm_structured_outputs_regex"]
        changed["grpo_config"]["vllm_structured_outputs_regex"] = f"<{len(regex)}-character regex of guesses>"
    return changed


def _game_batch(script: ScriptArguments, train_kw: dict[str, Any], notes: list[str]) -> None:
    """Game mode's batch: one optimizer step sees whole games, each as one sample per turn slot.

    The rollout lays out each start state's games as ``SLOTS`` consecutive groups (turn 1's
    num_generations samples, then turn 2's, ...), so a step's samples must be a multiple of
    ``SLOTS x num_generations``. ``per_device_train_batch_size`` stays the memory knob; the gradient
    accumulation is raised until a step holds whole games."""
    for key in ("generation_batch_size", "steps_per_generation"):
        if train_kw.get(key) is not None:
            raise ConfigError(f"--rollout game sets the generation batch itself (whole games per step): drop --{key}")
    for key in ("use_transformers_continuous_batching", "use_transformers_paged"):
        if train_kw.get(key):  # TRL's settings for its own generate call, which a game's turns do not go through
            raise ConfigError(
                f"--{key} does nothing with --rollout game (each turn generates with model.generate, or vLLM): "
                "drop it, or use --rollout turn"
            )
    generations = train_kw["num_generations"]
    block = SLOTS * generations
    per_device = train_kw["per_device_train_batch_size"]
    accumulation = train_kw["gradient_accumulation_steps"]
    needed = math.lcm(block, per_device) // per_device
    if accumulation % needed:
        raised = needed * -(-accumulation // needed)
        notes.append(
            f"--rollout game: gradient_accumulation_steps {accumulation} -> {raised}, so that a step holds whole "
            f"games ({SLOTS} turn slots x num_generations {generations} samples per start state)"
        )
        train_kw["gradient_accumulation_steps"] = raised


def plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
