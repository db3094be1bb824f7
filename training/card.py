"""What a saved adapter says about itself: its model card (README.md) and a portable adapter_config.json.

TRL's ``save_model`` writes a generic card (its base model "[None]") and peft records the base as the
absolute path it was loaded from, which means nothing on another machine. Both are rewritten here
from what the run knows: the model as the user named it, the profile, the command and the rewards.
"""

from __future__ import annotations

import inspect
import json
import re
import shlex
from pathlib import Path
from typing import Literal

import yaml
from transformers import TrainerCallback

from rewards import REWARD_FUNCS, REWARD_RANGES
from settings.arguments import CONFIG_FILE, TINY

ADAPTER_CONFIG = "adapter_config.json"
CARD = "README.md"
TAGS = ["grpo", "trl", "wordle", "lora"]

BaseKind = Literal["tiny", "local", "hub"]


def base_kind(base_model: str) -> BaseKind:
    """What ``--model`` named: the embedded model, a local directory or a hub id, decided in the order
    ``models.source.model_source`` decides it (a directory wins over a hub id of the same name)."""
    if base_model == TINY:
        return "tiny"
    return "local" if Path(base_model).expanduser().is_dir() else "hub"


def make_adapter_config_portable(out_dir: Path, base_model: str) -> None:
    """Set ``adapter_config.json``'s ``base_model_name_or_path`` to the base as the user named it: the
    hub id, ``"tiny"`` for the embedded model, or a local directory's path as given (relative stays
    relative), instead of the absolute path peft recorded.

    Only some peft APIs read this field. ``PeftModel.from_pretrained(base, out_dir)`` ignores it, so it
    loads the same before and after. ``AutoPeftModelForCausalLM.from_pretrained(out_dir)`` loads the
    base from it: that works for a hub id, and for a local path where the path resolves (from the
    same working directory), but not for ``"tiny"``, which is no hub id: the card says how to get the
    embedded model's directory instead.
    """
    path = Path(out_dir) / ADAPTER_CONFIG
    config = json.loads(path.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base_model
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")  # as peft writes it


class PortableCheckpoints(TrainerCallback):
    """Each checkpoint as portable as the final adapter: ``adapter_config.json`` names the base as the run
    named it, and no card. PEFT writes its empty template there (39 "More Information Needed"); the
    project's card is the output directory's, written when the run ends."""

    def __init__(self, base_model: str) -> None:
        self.base_model = base_model

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if (folder / ADAPTER_CONFIG).is_file():
                make_adapter_config_portable(folder, self.base_model)
            (folder / CARD).unlink(missing_ok=True)
        return control


def _meaning(name: str) -> str:
    """A reward's docstring on one line, less its closing "Range [...]" (the card's own column)."""
    doc = " ".join(inspect.getdoc(REWARD_FUNCS[name]).split())
    return re.sub(r"\s*Range \[[^\]]*\]\.?$", "", doc)


def _rewards_section(rewards: dict[str, float]) -> str:
    rows = [
        f"| `{name}` | {weight:g} | [{REWARD_RANGES[name][0]:g}, {REWARD_RANGES[name][1]:g}] | {_meaning(name)} |"
        for name, weight in rewards.items()
    ]
    spans = [sorted((w * REWARD_RANGES[n][0], w * REWARD_RANGES[n][1])) for n, w in rewards.items()]
    low, high = sum(s[0] for s in spans), sum(s[1] for s in spans)
    table = "\n".join(["| reward | weight | range | what it scores |", "|---|---|---|---|", *rows])
    return f"{table}\n\nThe weighted total that GRPO maximises ranges over [{low:g}, {high:g}]."


def _base_section(base_model: str, kind: BaseKind) -> str:
    if kind == "tiny":
        return (
            "`tiny`: wordle-grpo's embedded model, a small Llama-shaped model with its own Wordle tokenizer (one token per "
            "answer word and per marked letter). It is on no model hub: it ships in the wordle-grpo package as "
            "`tinymodel/model/` and loads with `--model tiny`. `adapter_config.json` therefore names it "
            '`"tiny"`, which `AutoPeftModelForCausalLM` cannot load; load it as below.'
        )
    if kind == "local":
        return (
            f"The local model directory `{base_model}`, as given on the command line. `adapter_config.json` "
            "names it by that path, so load the base from wherever that model lives on your machine."
        )
    return f"[`{base_model}`](https://huggingface.co/{base_model}) from the Hugging Face hub."


def _load_section(base_model: str, kind: BaseKind, out: str) -> str:
    if kind == "tiny":
        base = [
            "from tinymodel import model_dir  # the wordle-grpo package (pip install -e . in its repository)",
            "",
            "BASE = model_dir()  # the package's tinymodel/model directory",
        ]
    else:
        note = "the hub id" if kind == "hub" else "the local directory it was trained on"
        base = ["", f"BASE = {json.dumps(base_model)}  # {note}"]
    snippet = [
        "```python",
        "from peft import PeftModel",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        *base,
        f"OUT = {json.dumps(out)}  # this adapter's directory",
        "model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), OUT)",
        "tokenizer = AutoTokenizer.from_pretrained(OUT)  # saved beside the adapter",
        "```",
    ]
    model_flag = TINY if kind == "tiny" else base_model
    return (
        "\n".join(snippet) + "\n\nTo play full games on the held-out secrets against the solver and random "
        "baselines, from a checkout of wordle-grpo:\n\n"
        f"```bash\npython evaluate.py --model {shlex.quote(model_flag)} --adapter {shlex.quote(out)}\n```"
    )


def write_model_card(
    out_dir: Path,
    *,
    base_model: str,
    profile: str,
    command: str,
    rewards: dict[str, float] | None = None,
    steps: int,
    eval_markdown_table: str | None = None,
    supervised_rows: str | None = None,
    warning: str | None = None,
    continues: str | None = None,
) -> Path:
    """Write ``out_dir/README.md``, replacing TRL's generic card, and return its path.

    ``base_model`` is ``--model`` as the user gave it, ``rewards`` maps each reward's name to its
    weight, and ``eval_markdown_table`` is the before/after table in Markdown (None when the
    evaluation was skipped). ``supervised_rows``: the dataset directory of a supervised warm start (sft_train.py),
    whose card then describes that stage instead of GRPO's.
    """
    if supervised_rows is not None:
        return _write_sft_card(Path(out_dir), base_model, profile, command, steps, supervised_rows)
    out_dir = Path(out_dir)
    kind = base_kind(base_model)
    # The hub validates base_model as a hub id, so it is named only when it is one.
    front = {**({"base_model": base_model} if kind == "hub" else {}), "library_name": "peft"}
    front |= {"pipeline_tag": "text-generation", "tags": TAGS}
    evaluation = (
        f"Full games on the held-out secrets, none of them in a training row:\n\n{eval_markdown_table.strip()}"
        if eval_markdown_table is not None
        else "The full-game evaluation was skipped for this run (`--skip_eval`): there is no before/after table."
    )
    summary = (
        f"A LoRA adapter for `{base_model}`, trained for {steps} GRPO steps (TRL's `GRPOTrainer`) by wordle-grpo "
        "to play Wordle by reasoning. Each prompt is a game state (the guesses so far and their feedback); the "
        "reply is `<think>…</think><guess>WORD</guess>`, scored by the rewards below."
    )
    if continues:
        summary += (
            f" GRPO continued the supervised adapter `{continues}` (`sft_train.py`: the teacher's games), its reference "
            "too; the tables below play the base model, that adapter (before) and this one (after) on the same games."
        )
    made = (
        f"Profile `{profile}` (`profiles/{profile}.yaml`; the fully resolved configuration is `{CONFIG_FILE}` "
        f"beside this card), with this command:\n\n```bash\n{command}\n```"
    )
    blocks = [
        f"---\n{yaml.safe_dump(front, sort_keys=False)}---",
        f"# {out_dir.resolve().name}: a LoRA adapter that plays Wordle, trained with GRPO",
        *(
            [f"> **This run collapsed.** {warning[0].upper()}{warning[1:]}. This adapter is what the collapse left."]
            if warning
            else []
        ),
        summary,
        "## Base model",
        _base_section(base_model, kind),
        "## How it was made",
        made,
        "## Rewards",
        _rewards_section(rewards),
        "## Before and after training",
        evaluation,
        "## Load it",
        _load_section(base_model, kind, str(out_dir)),
    ]
    path = out_dir / CARD
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


def _write_sft_card(out_dir: Path, base_model: str, profile: str, command: str, steps: int, rows: str) -> Path:
    kind = base_kind(base_model)
    front = {**({"base_model": base_model} if kind == "hub" else {}), "library_name": "peft"}
    front |= {"pipeline_tag": "text-generation", "tags": ["sft", "trl", "wordle", "lora"]}
    blocks = [
        f"---\n{yaml.safe_dump(front, sort_keys=False)}---",
        f"# {out_dir.resolve().name}: the supervised warm start of a Wordle player",
        (
            f"A LoRA adapter for `{base_model}`, trained for {steps} steps of TRL's `SFTTrainer` by wordle-grpo on the "
            "teacher's games: each prompt is a game state, each reply `<think>\\n…\\n</think>\\n\\n<guess>WORD</guess>`, "
            "the think stating what the feedback established and the guess the answer still possible of most expected "
            "information. It is the start GRPO continues."
        ),
        "## Base model",
        _base_section(base_model, kind),
        "## How it was made",
        (
            f"Profile `{profile}` (`profiles/{profile}.yaml`, its `sft:` section; the resolved configuration is "
            f"`{CONFIG_FILE}` beside this card), with this command:\n\n```bash\n{command}\n```\n\nThe rows, with their "
            f"own card: `{rows}`."
        ),
        "## Next: GRPO",
        (
            f"```bash\npython grpo_train.py --profile {profile} --model {shlex.quote(base_model)} --adapter "
            f"{shlex.quote(str(out_dir))}\n```\n\nGRPO continues this adapter (with `beta > 0` it is the reference), and "
            "its before-and-after tables play the base model, this adapter and the GRPO adapter on the same games."
        ),
        "## Load it",
        _load_section(base_model, kind, str(out_dir)),
    ]
    path = out_dir / CARD
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path
