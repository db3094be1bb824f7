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
import enum
import functools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from trl import GRPOConfig, ModelConfig, SFTConfig, TrlParser

from runtime import device as devices
from settings import arguments, checks, handoff
from settings.arguments import GRPO, SFT, STAGES, TINY, RunArguments, Stage, available_profiles
from settings.checks import HAS_NEW_CHECKPOINTING, NEW_CHECKPOINTING
from settings.cli import NO_PROFILE, HelpDefaults
from settings.errors import ConfigError, unknown
from wordle.decoding import Decoding
from wordle.words import TRAIN_PARTS

logger = logging.getLogger(__name__)

# A profile's section of settings tuned for the embedded model: they apply only when the model is tiny.
EMBEDDED_SECTION = "tiny"
SECTIONS = (EMBEDDED_SECTION, SFT.section)  # a profile's sections: the embedded model's, the warm start's


@dataclass
class Resolved:
    script: RunArguments  # the stage's: ScriptArguments or SFTArguments
    training: GRPOConfig | SFTConfig
    model: ModelConfig
    notes: list[str]
    changed: dict[str, dict[str, Any]]  # per dataclass, the fields set to something other than the default
    argv: list[str] = field(default_factory=list)  # the command line it was resolved from
    stage: Stage = GRPO

    @property
    def reply_budget(self) -> int:
        """The GRPO stage's reply limit in tokens: the one the supervised rows are written to fit."""
        holder = self.training if self.stage.generates else self.script
        return holder.max_completion_length

    @property
    def quantized(self) -> bool:
        return bool(self.model.load_in_4bit or self.model.load_in_8bit)

    @property
    def decoding(self) -> Decoding:
        """How the run's evaluation and held-out check play: greedy, with the training reply limit."""
        return Decoding(max_new_tokens=self.reply_budget, seed=self.training.seed)

    @property
    def weights(self) -> dict[str, float]:
        """Each reward the run uses, with its weight."""
        return dict(zip(self.script.rewards, self.training.reward_weights, strict=True))


def _field_names(stage: Stage | None = None) -> list[str]:
    """The keys a file or the command line may set: the stage's, or either stage's (a profile or a --config file
    serves both)."""
    names = set().union(*(s.field_names() for s in ([stage] if stage else STAGES)))
    return sorted(names | {NEW_CHECKPOINTING})  # valid in a file on every supported transformers


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
            allowed = _field_names(SFT) if key == SFT.section else valid
            nested = next((k for k in value if k not in allowed), None)
            if nested is not None:
                raise unknown("key", f"{key}.{nested}", allowed, str(path), "see python grpo_train.py --help-all")
        elif key not in valid:
            raise unknown("key", str(key), valid, str(path), "see python grpo_train.py --help-all")
    return data


def load_profile(name: str) -> dict[str, Any]:
    names = available_profiles()
    if name not in names:
        raise unknown("profile", name, ["auto", *names], "--profile")
    return _read_yaml(arguments.PROFILES_DIR / f"{name}.yaml", "profile", sections=SECTIONS)


class _Parser(TrlParser):
    """TrlParser whose errors are one ConfigError line, never argparse's usage block and exit."""

    def error(self, message: str):  # type: ignore[override]
        raise ConfigError(message.splitlines()[0])

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # A value outside a field's choices (--rollout, --optim, ...) reads as every other unknown name does,
        # from the choices themselves: argparse's own message words them differently across Python releases.
        if action.choices is not None and value not in action.choices:
            flag = action.option_strings[0]
            raise unknown(flag.lstrip("-").replace("_", " "), str(value), [str(c) for c in action.choices], flag)
        super()._check_value(action, value)


def make_parser(defaults: HelpDefaults | None = None, stage: Stage = GRPO) -> TrlParser:
    """The parser of every field of ``stage``. With ``defaults`` (for ``--help-all``) its defaults are a profile's,
    and its help says so, as ``--help`` does."""
    formatter = functools.partial(_HelpFormatter, defaults=defaults)
    parser = _Parser(stage.dataclasses(), formatter_class=formatter)
    parser.add_argument("--config", help="YAML file layered between the profile and the command line")
    for action in parser._actions:  # the one spelling the docs use comes first: the usage line and errors show it
        if action.dest in arguments.DASHED:
            action.option_strings.sort(key=lambda flag: "_" in flag)
    if defaults is not None:
        parser.set_defaults_with_config(**{k: v for k, v in defaults.values.items() if k != "profile"})
    return parser


def help_defaults(argv: list[str], stage: Stage = GRPO) -> HelpDefaults:
    """What a run with ``argv`` would start from: the layers of ``resolve``, before the command line's own values."""
    layers = _layers(_pre_parse(argv), [], stage)
    keys = set(layers.from_profile)
    values = {k: v for k, v in layers.values.items() if k != "profile"}  # --profile's default stays auto, said above
    for flag, field_name in (("model", "model_name_or_path"), ("max_completion", "max_completion_length")):
        if field_name in values:  # the script's flag shows the field it sets
            values[flag] = values[field_name]
            keys |= {flag} if field_name in keys else set()
    auto = f" (--profile auto on this machine: {layers.detected})" if layers.detected else ""
    header = (
        f"Defaults are profile {layers.profile}'s{auto}"
        + (", with its settings for the embedded model" if layers.embedded else "")
        + (f", with its {stage.section}: section" if stage.section else "")
        + "; --profile NAME --help shows another's."
    )
    return HelpDefaults(layers.profile, values, keys, header)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults as ``--help`` words them: a profile's value says so, an enum shows its value, a
    help text that gives its default in its own words keeps them, and a default of None shows nothing."""

    def __init__(self, *args: Any, defaults: HelpDefaults | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.defaults = defaults

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default:" in text or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        note = (self.defaults or NO_PROFILE).note(action.dest, action.default)
        return text if note is None else f"{text} {note}".replace("%", "%%")


def _construct(cls: type, kwargs: dict[str, Any], label: str) -> Any:
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
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


class _Layers(NamedTuple):
    profile: str  # the profile's name, "auto" resolved
    values: dict[str, Any]  # the profile's values, its embedded-model section's where it applies, then --config's
    from_profile: set[str]  # the keys the profile (and that section) set
    detected: str | None  # why --profile auto chose this profile; None when the user named it
    embedded: bool  # whether the profile's embedded-model section applies
    device: str | None  # the device the profile itself names (--device and --config may name another)


def _layers(known: argparse.Namespace, notes: list[str], stage: Stage = GRPO) -> _Layers:
    """The profile's values, its embedded-model section when the model is the embedded one (GRPO), or its section
    for the stage (``sft:``), then --config; only the keys the stage has."""
    profile, detected = known.profile, None
    if profile == "auto":
        profile, detected = devices.detect()
        notes.append(f"profile auto -> {profile}: {detected}")
    values = load_profile(profile)
    device = values.get("device")
    embedded = values.pop(EMBEDDED_SECTION, {})
    own = values.pop(SFT.section, {})
    config = _read_yaml(Path(known.config), "config file") if known.config else {}
    model = known.model or config.get("model") or config.get("model_name_or_path") or values["model_name_or_path"]
    applies = bool(embedded) and model == TINY and stage is GRPO
    if embedded and stage is GRPO:
        summary = ", ".join(f"{k} {plain(v)}" for k, v in embedded.items())
        if applies:
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
    if stage.section:
        values.update(own)
        if own:
            notes.append(
                f"the profile's {stage.section}: settings apply, under --config and the command line "
                f"({', '.join(f'{k} {plain(v)}' for k, v in own.items())})"
            )
    # A profile serves both stages: the keys of the other one's are not this stage's business.
    mine = stage.field_names() | {NEW_CHECKPOINTING}
    values = {k: v for k, v in values.items() if k in mine}
    others = sorted(k for k in config if k not in mine)
    if others:
        notes.append(f"--config {known.config}: {', '.join(others)} are not {stage.entry} settings, left out")
    from_profile = set(values)
    values.update({k: v for k, v in config.items() if k in mine})
    values["profile"] = profile
    if not HAS_NEW_CHECKPOINTING and NEW_CHECKPOINTING in values:
        values.setdefault("gradient_checkpointing", values.pop(NEW_CHECKPOINTING))
    return _Layers(profile, values, from_profile, detected, applies, device)


def _parse(
    argv: list[str], values: dict[str, Any], stage: Stage = GRPO
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The command line over the layered values, split per dataclass."""
    parser = make_parser(stage=stage)
    parser.set_defaults_with_config(**values)
    namespace, leftover = parser.parse_known_args(argv)
    if leftover:
        flags = [a for a in leftover if a.startswith("-")]
        if not flags:
            raise ConfigError(
                f"unexpected value {leftover[0]!r} on the command line (the option before it takes one value)"
            )
        name = flags[0].split("=")[0].lstrip("-").replace("-", "_")
        valid = [f"--{n}" for n in ["config", *_field_names(stage)]]
        raise unknown("option", f"--{name}", valid, "the command line", f"see python {stage.entry} --help-all")
    raw = vars(namespace)
    script_kw, train_kw, model_kw = (
        {f.name: raw[f.name] for f in dataclasses.fields(dc) if f.init and f.name in raw} for dc in stage.dataclasses()
    )
    return script_kw, train_kw, model_kw


def resolve(argv: list[str], *, check_device: bool = True, stage: Stage = GRPO) -> Resolved:
    """Profile, then --config, then the command line, then the script's flags; see the module docstring.

    ``check_device=False`` (what ``--dry-run`` uses) resolves a profile for a device this machine
    lacks, so that any profile can be inspected anywhere.
    """
    known = _pre_parse(argv)
    notes: list[str] = []
    layers = _layers(known, notes, stage)
    profile, values = layers.profile, layers.values
    script_kw, train_kw, model_kw = _parse(argv, values, stage)
    script_kw["profile"] = profile  # the resolved name, not "auto"
    script = _construct(stage.script, script_kw, "script")
    if script.device not in devices.DEVICES:
        raise ConfigError(f"unknown device {script.device!r} in profile {profile}; valid: {', '.join(devices.DEVICES)}")
    flags = frozenset(a.split("=")[0].lstrip("-").replace("-", "_") for a in argv if a.startswith("--"))
    budget = train_kw if stage.generates else script_kw  # where the reply limit lives
    checks.apply_script_flags(script, train_kw, model_kw, notes, budget)
    if not stage.generates:
        script.max_completion_length = script_kw["max_completion_length"]
    checks.old_names(argv, values, train_kw, notes)
    checks.check_ranges(script, train_kw, model_kw, budget)
    given = frozenset(values) | flags
    if stage is GRPO:
        handoff.continue_adapter(script, model_kw, notes, flags, given)
        checks.constrain_vllm(script, train_kw, notes)
        checks.vllm_on_device(script, train_kw, model_kw, notes)
        checks.merged_generation(script, train_kw, model_kw)
        checks.choose_rewards(script, train_kw, notes, given)
        trainable = [part for part in TRAIN_PARTS if part != "val"]  # val chooses settings: no run trains on it
        if script.secrets not in trainable:
            raise unknown("part of the training secrets", script.secrets, trainable, "--secrets")
    else:
        handoff.supervised(script, model_kw)
    checks.check_launch(script, train_kw)
    check = check_device and not known.dry_run
    present = checks.check_device(script, train_kw, model_kw, notes, check, flags, layers.device)
    training, model, precision = _construct_configs(stage, train_kw, model_kw, present, script.world_size)
    changed = _changed(stage, script_kw, train_kw, model_kw, precision)
    return Resolved(
        script=script, training=training, model=model, notes=notes, changed=changed, argv=list(argv), stage=stage
    )


class _PreviewGRPOConfig(GRPOConfig):
    """GRPOConfig as N processes see it: TRL sizes and checks the generation batch with ``world_size``,
    which is 1 in a dry run without a launcher (``--dry-run --world_size N``)."""

    preview_world_size = 1

    @property
    def world_size(self) -> int:
        return self.preview_world_size


def _construct_configs(
    stage: Stage, train_kw: dict[str, Any], model_kw: dict[str, Any], present: bool, preview_world: int | None = None
) -> tuple[GRPOConfig | SFTConfig, ModelConfig, dict[str, Any]]:
    """TRL's config of the stage and ModelConfig, and the precision flags as asked for.

    transformers validates bf16/fp16 against this machine when the config is built; a dry run
    for another device builds it without them and puts them back afterwards.
    """
    precision = {k: train_kw.get(k) for k in ("bf16", "fp16")}
    if not present:
        train_kw.update(bf16=False, fp16=False)
    cls: type = stage.config
    if preview_world and stage is GRPO:
        cls = type("GRPOConfig", (_PreviewGRPOConfig,), {"preview_world_size": preview_world})
    training = _construct(cls, train_kw, "training")
    for key, value in precision.items():
        setattr(training, key, value)
    return training, _construct(ModelConfig, model_kw, "model"), precision


def _changed(
    stage: Stage,
    script_kw: dict[str, Any],
    train_kw: dict[str, Any],
    model_kw: dict[str, Any],
    precision: dict[str, Any],
) -> dict[str, dict[str, Any]]:
    """Every field that differs from what argparse yields with no profile, config or flags (TRL's defaults)."""
    baseline = vars(make_parser(stage=stage).parse_known_args([])[0])
    config = f"{stage.name}_config"
    changed = {
        name: {k: plain(v) for k, v in kw.items() if plain(v) != plain(baseline.get(k))}
        for name, kw in (("script", script_kw), (config, train_kw), ("model_config", model_kw))
    }
    changed[config].update({k: v for k, v in precision.items() if v is not None})
    if "vllm_structured_outputs_regex" in changed[config]:  # 80 kB of words: summarised, not printed
        regex = changed[config]["vllm_structured_outputs_regex"]
        changed[config]["vllm_structured_outputs_regex"] = f"<{len(regex)}-character regex of guesses>"
    return changed


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
