"""The script's own arguments: a dataclass that TrlParser parses beside TRL's GRPOConfig and ModelConfig.

Every field here is a flag (``--rollout game``) and a key of a profile or ``--config`` file; how the
layers combine is ``settings.config``.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from trl import GRPOConfig, ModelConfig, SFTConfig

from rewards import REWARD_FUNCS
from settings.errors import unknown
from wordle import MAX_GUESSES

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"
TINY = "tiny"  # --model tiny: the embedded model (tinymodel/)
CONFIG_FILE = "wordle_grpo_config.yaml"  # the resolved configuration, saved beside a run's adapter
MERGE_DTYPES = ("auto", "float32", "bfloat16", "float16")
SLOTS = MAX_GUESSES  # game mode: one sample slot per possible turn of each game


class Rollout(str, enum.Enum):
    """How a step's completions are made. Decided once, when the arguments are parsed; the rest of the
    code asks it (``script.rollout.plays_games``) rather than comparing names."""

    TURN = "turn"  # each completion answers one game state of the training rows
    GAME = "game"  # each step plays whole games with the current policy, one sample per turn

    @property
    def plays_games(self) -> bool:
        return self is Rollout.GAME


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


# The flags that the docs, the errors and the rollback advice spell with dashes, as --help shows them
# (argparse takes --max_completion as well); every other flag is its field's name, as in a YAML file.
DASHED = ("max_completion", "no_4bit", "dry_run")


@dataclass
class RunArguments:
    """The flags both stages take (grpo_train.py, sft_train.py); every field of the stage's TRL config and of
    ModelConfig is also accepted."""

    profile: str = field(
        default="auto",
        metadata={
            "help": f"hardware profile: {', '.join(available_profiles())}, or auto "
            "(cuda, then rocm, then mps, then cpu)"
        },
    )
    device: str = field(default="cpu", metadata={"help": "device the profile is for: cuda, rocm, mps or cpu"})
    model: str | None = field(
        default=None,
        metadata={
            "help": "model to train: 'tiny' (the embedded model), a hub id or a local path; sets model_name_or_path"
        },
    )
    max_completion: int | None = field(
        default=None, metadata={"help": "rollback flag: sets max_completion_length (96 when memory is short)"}
    )
    no_4bit: bool = field(default=False, metadata={"help": "turn 4-bit quantization off (no bitsandbytes needed)"})
    dry_run: bool = field(default=False, metadata={"help": "print the resolved configuration as YAML and exit"})
    world_size: int | None = field(
        default=None,
        metadata={"help": "with --dry-run: preview a launch on this many processes (default: the processes launched)"},
    )
    resume: bool = field(default=False, metadata={"help": "continue from the newest checkpoint in output_dir"})
    merge: bool = field(
        default=False,
        metadata={
            "help": "also write the LoRA merged into the base model under OUTPUT_DIR/merged; on a finished run's "
            "output_dir it merges without training"
        },
    )
    merge_dtype: str = field(
        default="auto",
        metadata={"help": "dtype of the merged model: auto (the base checkpoint's own), float32, bfloat16 or float16"},
    )
    dataset: str | None = field(
        default=None,
        metadata={
            "help": "training rows: loaded from PATH (.jsonl, .parquet, or a course .csv) if it exists, "
            "else built and saved there"
        },
    )
    train_rows: int = field(default=2000, metadata={"help": "game states to build when no dataset file is given"})
    game_eval_steps: int = field(
        default=0,
        metadata={
            "help": "every N steps, play game_eval_games validation secrets greedily, from its own opening and a "
            "random one: the learning curve (0: never)"
        },
    )
    game_eval_games: int = field(default=50, metadata={"help": "games per set of that periodic check"})
    torch_threads: int = field(
        default=0,
        metadata={"help": "CPU threads for torch (0: torch's default, one per core); 1 is fastest for tiny models"},
    )
    mps_empty_cache_steps: int = field(
        default=0, metadata={"help": "on MPS, synchronize and empty the cache every N steps (0: never)"}
    )


@dataclass
class ScriptArguments(RunArguments):
    """grpo_train.py's own flags; every GRPOConfig and ModelConfig field is also accepted."""

    adapter: str | None = field(
        default=None,
        metadata={
            "help": "start from this LoRA adapter (sft_train.py's output_dir), trained on: GRPO continues it, and with "
            "beta > 0 it is the reference; the LoRA settings are the adapter's"
        },
    )
    secrets: str = field(
        default="all",
        metadata={
            "help": "the training secrets that built rows and game starts come from: all, or a part, sft or rl "
            "(the embedded model's SFT learnt from sft, so its profile section trains on rl); val, the "
            "validation secrets that --game_eval_steps plays, is in none of them"
        },
    )
    explore: float = field(
        default=0.3, metadata={"help": "share of exploratory (non-solver) guesses in built game histories"}
    )
    max_prompt_length: int | None = field(
        default=None,
        metadata={
            "help": "drop prompts longer than this many tokens (default: the model's context minus "
            "max_completion_length)"
        },
    )
    rollout: Rollout = field(
        default=Rollout.TURN,
        metadata={
            "help": "turn: each completion answers one game state from the training rows; game: each step plays "
            "num_generations whole games per start state with the current policy, one sample per turn"
        },
    )
    rewards: list[str] | None = field(
        default=None,
        metadata={
            "help": f"reward functions, from: {', '.join(REWARD_FUNCS)} (default: the four per-turn ones, plus "
            "game_reward with --rollout game)"
        },
    )
    game_openings: float = field(
        default=0.0,
        metadata={
            "help": "with --rollout game: the share of start states opened by one or two random guesses (it "
            "learns to read feedback, not to follow its opening)"
        },
    )
    skip_eval: bool = field(default=False, metadata={"help": "skip the full-game evaluation before and after training"})
    eval_games: int = field(
        default=300,
        metadata={
            "help": "full games played by the evaluation before and after training (of the 300 held-out secrets)"
        },
    )
    eval_openings: list[str] = field(
        default_factory=lambda: ["own", "answer"],
        metadata={
            "help": "how the final evaluation's games start, a table each (as evaluate.py --openings): own, "
            "answer, allowed, answer:K, allowed:K, words:W1,W2"
        },
    )
    stop_on_collapse: bool = field(
        default=True,
        metadata={
            "help": "stop a run whose policy collapsed after a healthy start (most replies failing the format for 3 "
            "logged steps in a row), keeping the last healthy checkpoint; false: warn and train on"
        },
    )
    merged_generation: bool = field(
        default=False,
        metadata={
            "help": "generate from a copy of the model with the LoRA merged in, refreshed each step: one matrix per "
            "projection instead of three (and no 4-bit dequantisation), for a copy of the weights in memory"
        },
    )
    constrain_vllm: str | None = field(
        default=None,
        metadata={
            "help": "with use_vllm: constrain rollouts to '<think>…</think><guess>WORD</guess>' with WORD an "
            "allowed word ('allowed'), through vllm_structured_outputs_regex"
        },
    )

    def __post_init__(self) -> None:
        # A profile's or --config's value arrives as text that argparse never checked: the one place it becomes a mode.
        try:
            self.rollout = Rollout(self.rollout)
        except ValueError:
            raise unknown("rollout", str(self.rollout), [r.value for r in Rollout], "--rollout") from None


@dataclass
class SFTArguments(RunArguments):
    """sft_train.py's own flags; every SFTConfig and ModelConfig field is also accepted."""

    dataset: str | None = field(
        default=None,
        metadata={
            "help": "the supervised rows: a directory of .parquet or .jsonl files in TRL's prompt/completion format, "
            "loaded if it exists, else built there (default: built into OUTPUT_DIR/sft_data)"
        },
    )
    max_completion_length: int = field(
        default=128,
        metadata={
            "help": "the GRPO stage's reply limit in tokens, end-of-turn included: the rows' replies are written to fit "
            "it (--max-completion sets it)"
        },
    )


class Stage(NamedTuple):
    """A training stage: its entry script, its arguments and TRL config, the profile section of its own settings (the
    supervised warm start differs from GRPO in learning rate, batch and length of training), and whether its steps
    generate (GRPO's rollouts: a KV cache, fewer generations to roll back to, the reply limit in its TRL config)."""

    name: str
    entry: str
    script: type
    config: type
    section: str | None
    generates: bool

    def dataclasses(self) -> tuple[type, ...]:
        return (self.script, self.config, ModelConfig)

    def field_names(self) -> set[str]:
        return {f.name for dc in self.dataclasses() for f in dataclasses.fields(dc) if f.init}


GRPO = Stage("grpo", "grpo_train.py", ScriptArguments, GRPOConfig, None, generates=True)
SFT = Stage("sft", "sft_train.py", SFTArguments, SFTConfig, "sft", generates=False)
STAGES = (GRPO, SFT)
