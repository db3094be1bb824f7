"""Profile resolution through the real entry point: what --dry-run prints, and the one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import TURN_MODE

import grpo_train
from rewards import DEFAULT_WEIGHTS, GAME_WEIGHTS
from runtime import device as devices
from settings import arguments, checks
from settings import config as config_mod
from settings.arguments import ScriptArguments, available_profiles
from settings.config import load_profile, resolve
from settings.errors import ConfigError
from settings.summary import summary

ROOT = Path(__file__).resolve().parent.parent


def dry_run(capsys, *argv: str) -> dict:
    assert grpo_train.main([*argv, "--dry-run"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def error_of(capsys, *argv: str) -> str:
    assert grpo_train.main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, f"error is not one line: {err!r}"
    assert err.startswith("error: ")
    return err


def test_profiles_are_the_documented_four():
    assert available_profiles() == ["cpu", "cuda", "mps", "rocm"]


def test_mps_profile_resolves_to_seed_002s_configuration(capsys):
    out = dry_run(capsys, "--profile", "mps")
    assert out["device"] == {"target": "mps", "present": False}
    assert out["generation"]["max_completion_length"] == 128
    assert out["batch"]["per_device_train_batch_size"] == 1
    assert out["batch"]["gradient_accumulation_steps"] == 2
    assert out["batch"]["num_generations"] == 2
    assert out["batch"]["effective_completions_per_step"] == 2
    assert out["batch"]["effective_prompts_per_step"] == 1
    assert out["memory"]["gradient_checkpointing"] is True
    assert out["memory"]["optimizer"] == "adamw_torch"
    assert out["memory"]["mps_empty_cache_steps"] > 0
    assert out["precision"] == "fp32"
    assert out["model"]["dtype"] == "float32"
    assert out["quantization"] == "none"
    assert out["model"]["name_or_path"] == "Qwen/Qwen2.5-3B-Instruct"
    assert out["grpo_config"]["bf16"] is False and out["grpo_config"]["fp16"] is False
    assert out["grpo_config"]["dataloader_pin_memory"] is False
    assert out["grpo_config"]["save_steps"] == 50 and out["grpo_config"]["save_total_limit"] == 3
    assert out["lora"]["r"] > 0


def test_max_completion_is_the_rollback_flag(capsys):
    out = dry_run(capsys, "--profile", "mps", "--max-completion", "96")
    assert out["generation"]["max_completion_length"] == 96
    assert any("96" in note for note in out["notes"])


def test_cuda_profile_is_4bit_nf4_double_quant_qlora(capsys):
    out = dry_run(capsys, "--profile", "cuda")
    assert out["quantization"]["bits"] == 4
    assert out["quantization"]["type"] == "nf4"
    assert out["quantization"]["double_quant"] is True
    assert out["quantization"]["compute_dtype"] == "bfloat16"
    assert out["precision"] == "bf16 mixed"
    assert out["memory"]["optimizer"] == "paged_adamw_8bit"
    assert out["grpo_config"]["max_grad_norm"] == 0.3
    assert out["batch"]["per_device_train_batch_size"] >= 4
    assert out["batch"]["num_generations"] > 2
    assert out["generation"]["use_vllm"] is False


def test_no_4bit_turns_quantization_and_the_8bit_optimizer_off(capsys):
    out = dry_run(capsys, "--profile", "cuda", "--no-4bit")
    assert out["quantization"] == "none"
    assert out["memory"]["optimizer"] == "adamw_torch"


@pytest.mark.parametrize("profile", ["cpu", "cuda", "mps", "rocm"])
def test_every_profile_sets_precision_explicitly(profile):
    data = yaml.safe_load((ROOT / "profiles" / f"{profile}.yaml").read_text())
    for key in (
        "bf16",
        "fp16",
        "dtype",
        "device",
        "max_completion_length",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "num_generations",
        "activation_checkpointing",
        "optim",
        "save_steps",
        "save_total_limit",
        "output_dir",
        "report_to",
        "use_peft",
    ):
        assert key in data, f"{profile}.yaml does not set {key}"


def test_command_line_beats_config_file_beats_profile(tmp_path, capsys):
    user = tmp_path / "mine.yaml"
    user.write_text("learning_rate: 3.0e-4\nlora_r: 4\n")
    out = dry_run(capsys, "--profile", "cpu", "--config", str(user), "--lora_r", "2")
    assert out["grpo_config"]["learning_rate"] == 3.0e-4  # from the file
    assert out["lora"]["r"] == 2  # the command line wins over the file


def test_auto_picks_by_what_the_machine_has(monkeypatch, capsys):
    monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(devices.torch.backends.mps, "is_available", lambda: True)
    out = dry_run(capsys, "--profile", "auto")
    assert out["profile"] == "mps"
    assert any("auto -> mps" in n for n in out["notes"])
    monkeypatch.setattr(devices.torch.backends.mps, "is_available", lambda: False)
    assert dry_run(capsys, "--profile", "auto")["profile"] == "cpu"


def test_cuda_without_bf16_falls_back_to_fp16(monkeypatch):
    monkeypatch.setattr(config_mod.devices, "has_device", lambda d: d == "cuda")
    monkeypatch.setattr(config_mod.devices, "cuda_supports_bf16", lambda: False)
    # transformers checks fp16 against the machine when the config is built; this one has no GPU.
    monkeypatch.setattr(config_mod, "GRPOConfig", _lenient_grpo_config())
    r = resolve(["--profile", "cuda"])
    assert (r.training.bf16, r.training.fp16, r.model.dtype) == (False, True, "float16")
    assert any("fp16" in n for n in r.notes)


def _lenient_grpo_config():
    from trl import GRPOConfig

    class Lenient(GRPOConfig):
        def __post_init__(self):
            fp16, self.fp16 = self.fp16, False
            super().__post_init__()
            self.fp16 = fp16

    return Lenient


def test_dry_run_needs_no_model_and_prints_the_resolved_yaml():
    # A fresh interpreter: the dry run must not load torch models or touch the hub.
    proc = subprocess.run(
        [sys.executable, "grpo_train.py", "--profile", "cuda", "--dry-run"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = yaml.safe_load(proc.stdout)
    for key in ("profile", "device", "model", "precision", "quantization", "lora", "batch", "grpo_config"):
        assert key in out
    assert (
        out["batch"]["generation_batch_size"]
        == out["batch"]["per_device_train_batch_size"] * out["batch"]["steps_per_generation"]
    )


# --- errors: one line, exit code 2, naming what to do --------------------------------------------


def test_unknown_profile_lists_the_profiles(capsys):
    err = error_of(capsys, "--profile", "mpx")
    assert "'mpx'" in err and "did you mean mps" in err
    for name in ("auto", "cpu", "cuda", "mps", "rocm"):
        assert name in err


def test_unknown_command_line_option_is_named_with_suggestions(capsys):
    err = error_of(capsys, "--profile", "cpu", "--lora_rank", "4")
    assert "--lora_rank" in err and "--lora_r" in err


def test_unknown_key_in_config_file(tmp_path, capsys):
    user = tmp_path / "bad.yaml"
    user.write_text("max_completion_lenght: 64\n")
    err = error_of(capsys, "--profile", "cpu", "--config", str(user))
    assert "max_completion_lenght" in err and "max_completion_length" in err and str(user) in err


def test_unknown_key_in_a_profile(monkeypatch, tmp_path, capsys):
    (tmp_path / "odd.yaml").write_text("device: cpu\nbatch_size: 4\n")
    monkeypatch.setattr(arguments, "PROFILES_DIR", tmp_path)
    err = error_of(capsys, "--profile", "odd")
    assert "batch_size" in err and "odd.yaml" in err


def test_missing_config_file(capsys):
    assert "does not exist" in error_of(capsys, "--profile", "cpu", "--config", "no/such.yaml")


def test_unknown_reward(capsys):
    err = error_of(capsys, "--profile", "cpu", "--rewards", "format_reward", "vibes_reward", "--dry-run")
    assert "vibes_reward" in err and "win_reward" in err


def test_mps_profile_where_mps_is_absent(monkeypatch, capsys):
    monkeypatch.setattr(devices.torch.backends.mps, "is_available", lambda: False)
    err = error_of(capsys, "--profile", "mps")
    assert "needs Apple MPS" in err and "sees none" in err and "--profile auto" in err and "cpu" in err


def test_cuda_profile_without_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: False)
    err = error_of(capsys, "--profile", "cuda")
    assert "GPU" in err and "--profile cpu" in err


def test_reward_weights_must_match_rewards():
    # The cpu profile's embedded-model section plays whole games: four turn rewards and game_reward.
    with pytest.raises(ConfigError, match="reward_weights has 2 values for 5 rewards"):
        resolve(["--profile", "cpu", "--reward_weights", "1.0", "2.0", "--dry-run"])
    with pytest.raises(ConfigError, match="reward_weights has 2 values for 4 rewards"):
        resolve(["--profile", "cpu", "--rollout", "turn", "--reward_weights", "1.0", "2.0", "--dry-run"])


# --- resolve()'s steps, each alone -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected_rewards", "expected_weights"),
    [
        ({}, list(DEFAULT_WEIGHTS), list(DEFAULT_WEIGHTS.values())),
        ({"rollout": "game"}, list(GAME_WEIGHTS), list(GAME_WEIGHTS.values())),
        # candidate_reward has no default weight: 1.0, as TRL's
        (
            {"rewards": ["candidate_reward", "format_reward"]},
            ["candidate_reward", "format_reward"],
            [1.0, DEFAULT_WEIGHTS["format_reward"]],
        ),
    ],
)
def test_rewards_step_fills_the_modes_defaults(kwargs, expected_rewards, expected_weights):
    script = ScriptArguments(**kwargs)
    train_kw = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 6, "num_generations": 8}
    checks.choose_rewards(script, train_kw, [])
    assert script.rewards == expected_rewards
    assert train_kw["reward_weights"] == expected_weights


@pytest.mark.parametrize(
    ("kwargs", "train_kw", "message"),
    [
        ({"rollout": "games"}, {}, "unknown rollout 'games'"),
        ({"rewards": ["win"]}, {}, "unknown reward 'win'"),
        ({"rewards": ["game_reward"]}, {}, "game_reward scores whole games: it needs --rollout game"),
        ({"rewards": ["format_reward"]}, {"reward_weights": [1.0, 2.0]}, "reward_weights has 2 values for 1 rewards"),
    ],
)
def test_rewards_step_refuses(kwargs, train_kw, message):
    with pytest.raises(ConfigError, match=message):
        checks.choose_rewards(ScriptArguments(**kwargs), train_kw, [])


def test_script_flags_step_wins_over_the_layers():
    train_kw = {"max_completion_length": 128, "optim": "paged_adamw_8bit"}
    model_kw = {"model_name_or_path": "tiny", "load_in_4bit": True}
    notes: list[str] = []
    script = ScriptArguments(model="some/model", max_completion=96, no_4bit=True)
    checks.apply_script_flags(script, train_kw, model_kw, notes)
    assert train_kw == {"max_completion_length": 96, "optim": "adamw_torch"}
    assert model_kw == {"model_name_or_path": "some/model", "load_in_4bit": False, "load_in_8bit": False}
    assert len(notes) == 2 and "needs bitsandbytes" in notes[1]


def test_device_step_notes_an_absent_device_or_refuses_it(monkeypatch):
    monkeypatch.setattr(devices, "has_device", lambda device: False)
    script, notes = ScriptArguments(profile="cuda", device="cuda"), []
    assert checks.check_device(script, {"bf16": True}, {}, notes, check=False) is False
    assert notes == ["device cuda is not present on this machine: shown as the profile sets it"]
    with pytest.raises(ConfigError, match="profile cuda needs an NVIDIA GPU"):
        checks.check_device(script, {}, {}, [], check=True)


# The device a run names is the one it trains on: transformers goes where use_cpu says, so the device sets it.
# (profile, --device or None, a GPU on this machine) -> use_cpu, and the note that says it was changed, if any.
DEVICE_TRUTH = [
    ("cpu", None, True, True, None),
    ("cpu", "cuda", True, False, "--device cuda: use_cpu false, so that the run trains on cuda"),
    ("cuda", None, True, False, None),
    ("cuda", "cpu", True, True, "--device cpu: use_cpu true, so that the run trains on cpu"),
    ("cuda", "cpu", False, True, "--device cpu: use_cpu true, so that the run trains on cpu"),
]


@pytest.mark.parametrize(("profile", "device", "gpu", "use_cpu", "note"), DEVICE_TRUTH)
def test_the_device_a_run_names_is_the_one_it_trains_on(monkeypatch, profile, device, gpu, use_cpu, note):
    monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(devices.torch.version, "hip", None)
    values = load_profile(profile)
    script = ScriptArguments(profile=profile, device=device or values["device"])
    train_kw, notes = {"use_cpu": values["use_cpu"]}, []
    flags = frozenset({"device"} if device else ())
    checks.check_device(script, train_kw, {}, notes, check=True, flags=flags, profile_device=values["device"])
    assert train_kw["use_cpu"] is use_cpu
    assert notes == ([] if note is None else [note])


def test_a_gpu_profile_run_on_the_cpu_trains_there():
    """The whole resolution, on a machine without a GPU (CI's): the config transformers reads says cpu."""
    resolved = resolve(["--profile", "cuda", "--device", "cpu", "--load_in_4bit", "false"])
    assert resolved.training.use_cpu and resolved.training.device.type == "cpu"


@pytest.mark.parametrize(
    ("device", "gpu", "source"), [("cpu", True, "rss"), ("cuda", True, "cuda"), ("mps", True, "rss")]
)
def test_the_memory_figure_is_the_run_devices(monkeypatch, device, gpu, source):
    """A run on the CPU of a GPU machine reports its own RSS, not the idle GPU's 0 MB."""
    monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(devices.torch.backends.mps, "is_available", lambda: False)
    assert devices.memory_source(device) == source


def test_merge_needs_a_lora_adapter():
    with pytest.raises(ConfigError, match="--merge merges a LoRA adapter; with --use_peft false"):
        resolve(["--profile", "cpu", "--use_peft", "false", "--merge"])


@pytest.mark.parametrize("value", [True, False])
def test_gradient_checkpointing_is_the_old_name_of_activation_checkpointing(value):
    # the cpu profile sets activation_checkpointing: false, the mps profile true; the old name must win over both
    for profile in ("cpu", "mps"):
        resolved = config_mod.resolve(
            ["--profile", profile, "--gradient_checkpointing", str(value).lower(), "--dry-run"]
        )
        assert resolved.training.gradient_checkpointing is value
        if config_mod.HAS_NEW_CHECKPOINTING:  # before transformers 5.20 (vLLM's), the old name is the only one
            assert resolved.training.activation_checkpointing is value
    # not given, the profile's own setting stands (read as gradient_checkpointing before 5.20)
    assert config_mod.resolve(["--profile", "cpu", "--dry-run"]).training.gradient_checkpointing is False
    assert config_mod.resolve(["--profile", "mps", "--dry-run"]).training.gradient_checkpointing is True


def test_dry_run_world_size_checks_the_batch_as_that_many_processes_would():
    # 4 per device x 2 processes = 8 completions: one group of 8, which one process alone could not form
    argv = ["--profile", "cpu", "--per_device_train_batch_size", "4", "--num_generations", "8", "--dry-run", *TURN_MODE]
    batch = summary(config_mod.resolve([*argv, "--world_size", "2"]))["batch"]
    assert (batch["processes"], batch["generation_batch_size"], batch["effective_prompts_per_step"]) == (2, 8, 1)
    with pytest.raises(ConfigError, match=r"generation_batch_size \(12\) must be divisible by num_generations"):
        config_mod.resolve([*argv, "--world_size", "3"])


@pytest.mark.parametrize(
    ("given", "expected"),
    [("tensorboard,wandb", ["tensorboard", "wandb"]), ("trackio", ["trackio"]), ("none", [])],
)
def test_report_to_takes_several_trackers_on_the_command_line(given, expected):
    resolved = resolve(["--profile", "cpu", "--report_to", given, "--dry-run"], check_device=False)
    assert resolved.training.report_to == expected
