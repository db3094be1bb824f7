"""The warm start on what this machine can run: correctness, not Wordle skill.

    python benchmarks/bench_warm_start.py                  # the CPU proof: a stand-in learns 64 fixed states
    python benchmarks/bench_warm_start.py --shape 2048 36 11008 16 2 --device cuda --rows 3200 --curve 25
                                                           # on a GPU: a 3B-shaped stand-in's learning curve

No pretrained hub weights exist here, so the model is a stand-in (``tinymodel.stand_in``): random weights beside
Qwen's real tokenizer and chat template. In a fresh process each:

1. ``sft_train.py`` trains a LoRA on 64 fixed states of the teacher (``--dataset``, built here) for ``--epochs``
   epochs: the loss, step by step;
2. the adapter answers those 64 prompts greedily (as ``evaluate.py`` plays): the share of replies that parse, that
   name the row's guess, and their length in generated tokens;
3. ``grpo_train.py --adapter`` takes one step with ``beta`` > 0: its logged KL, the reference being the supervised
   adapter (TRL's copy of it);
4. the KL that a reference taken from the base model would have shown, on replies the adapter samples at GRPO's
   temperature (TRL's estimator, per completion token).

With ``--curve N`` the supervised run plays ``--curve_games`` validation games every N steps (its
``--game_eval_steps``): format failures against supervised steps, the learning curve a GPU can afford.
Prints a table. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from evaluation.play import ModelPlayer
from models.loading import load_for_inference
from tinymodel.stand_in import QwenShape, build_qwen_dir
from training.sft_data import Budget, build_sft_rows, save_sft_dataset
from wordle import parse_completion
from wordle.decoding import Decoding
from wordle.game import GameView

ROOT = Path(__file__).resolve().parent.parent
# The tests' stand-in: on 2 cores a step's cost is Qwen's 151,936-way head over every position of the batch.
SHAPE = QwenShape(hidden=64, layers=2, intermediate=128, heads=4, kv_heads=2)


def run(script: str, *args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode:
        sys.exit(f"{script} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def history_of(out: Path) -> list[dict]:
    newest = max(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    return json.loads((newest / "trainer_state.json").read_text())["log_history"]


@torch.no_grad()
def kl_to_base(model, tokenizer, rows: list[dict], temperature: float, max_new_tokens: int, seed: int) -> float:
    """TRL's per-token KL estimate (exp(ref - logp) - (ref - logp) - 1) between the adapter and the base model, on
    replies the adapter samples at ``temperature``, averaged over completion tokens."""
    torch.manual_seed(seed)
    texts = tokenizer.apply_chat_template([r["prompt"] for r in rows], add_generation_prompt=True, tokenize=False)
    batch = tokenizer(texts, padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt")
    batch = batch.to(model.device)
    width = batch["input_ids"].shape[1]
    out = model.generate(
        **batch,
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
    )
    completion = out[:, width:]
    mask = torch.ones_like(completion, dtype=torch.bool)
    for i, row in enumerate(completion.tolist()):  # up to and with the end of turn
        end = next((k for k, t in enumerate(row) if t == tokenizer.eos_token_id), len(row) - 1)
        mask[i, end + 1 :] = False
    attention = torch.cat([batch["attention_mask"], torch.ones_like(completion)], dim=1)

    def logps() -> torch.Tensor:
        logits = model(input_ids=out, attention_mask=attention).logits[:, width - 1 : -1].float() / temperature
        return torch.log_softmax(logits, -1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)

    policy = logps()
    with model.disable_adapter():
        base = logps()
    kl = torch.exp(base - policy) - (base - policy) - 1
    return float(kl[mask].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", nargs=5, type=int, default=list(SHAPE), metavar=("H", "L", "I", "HEADS", "KV"))
    parser.add_argument("--device", default="cpu", help="cpu, or cuda with a GPU (the cuda profile then)")
    parser.add_argument("--rows", type=int, default=64, help="fixed states the supervised stage learns")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument(
        "--learning_rate", type=float, default=5e-3, help="a stand-in's random weights need more than 2e-4"
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lora_r", type=int, default=16)
    parser.add_argument(
        "--train_head",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train the LM head beside the LoRA (--lora_modules_to_save lm_head): a random stand-in has no readout "
        "to adapt, and its 0.02-scale tied embeddings cap every logit near 1 (a real model's head is trained)",
    )
    parser.add_argument("--curve", type=int, default=0, help="play validation games every N supervised steps")
    parser.add_argument("--curve_games", type=int, default=100)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--work", help="a directory to keep the model, rows and runs in (default: a temporary one)")
    a = parser.parse_args()
    profile = "cuda" if a.device == "cuda" else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(a.work or tmp)
        model_dir = work / "stand-in"
        if not (model_dir / "config.json").is_file():
            build_qwen_dir(model_dir, QwenShape(*a.shape), device=a.device)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        budget = Budget(128)
        rows, stats = build_sft_rows(a.rows, a.seed, tokenizer, budget)
        save_sft_dataset(rows, stats, work / "rows")
        steps = a.epochs * -(-a.rows // a.batch)
        sft = work / "sft"
        common = ["--profile", profile, "--model", str(model_dir), "--seed", str(a.seed), "--disable_tqdm", "true"]
        flags = [*common, "--dataset", str(work / "rows"), "--output_dir", str(sft), "--max_steps", str(steps)]
        flags += ["--per_device_train_batch_size", str(a.batch), "--gradient_accumulation_steps", "1"]
        flags += ["--learning_rate", str(a.learning_rate), "--lr_scheduler_type", "constant", "--warmup_steps", "0"]
        flags += ["--lora_r", str(a.lora_r), "--lora_alpha", str(2 * a.lora_r), "--lora_dropout", "0"]
        flags += ["--lora_modules_to_save", "lm_head"] if a.train_head else []
        flags += ["--save_steps", str(steps), "--logging_steps", "1"]
        if a.curve:
            flags += ["--game_eval_steps", str(a.curve), "--game_eval_games", str(a.curve_games)]
        seconds = run("sft_train.py", *flags)
        logs = history_of(sft)
        losses = [h["loss"] for h in logs if "loss" in h]
        times = [h["step_time"] for h in logs if "step_time" in h]

        model, tok = load_for_inference(str(model_dir), str(sft), device=a.device)
        player = ModelPlayer(model, tok, Decoding(max_new_tokens=budget.tokens))
        views = [GameView(tuple(map(tuple, r["past_guess_history"])), 1) for r in rows]
        replies = player.replies(views)
        parsed = [parse_completion(r) for r in replies]
        # Generated tokens, the end of turn included; a reply that never ended took the whole budget (clipped).
        tokens = [min(len(tok(r, add_special_tokens=False)["input_ids"]) + 1, budget.tokens) for r in replies]
        clipped = sum(p is None and n == budget.tokens for p, n in zip(parsed, tokens, strict=True))
        named = sum(p == r["guess"] for p, r in zip(parsed, rows, strict=True))
        exact = sum(reply == r["completion"][0]["content"] for reply, r in zip(replies, rows, strict=True))
        kl_base = kl_to_base(model, tok, rows[:16], temperature=1.0, max_new_tokens=budget.tokens, seed=a.seed)

        grpo = work / "grpo"
        flags = [*common, "--adapter", str(sft), "--output_dir", str(grpo), "--max_steps", "1", "--save_steps", "1"]
        flags += ["--beta", "0.04", "--skip_eval", "true", "--rollout", "turn", "--train_rows", "8"]
        flags += ["--num_generations", "4", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1"]
        flags += ["--temperature", "1.0", "--logging_steps", "1"]
        grpo_seconds = run("grpo_train.py", *flags)
        step = next(h for h in history_of(grpo) if "kl" in h)

    shape = "x".join(map(str, a.shape))
    print(
        f"Stand-in Qwen2 {shape} with Qwen's tokenizer, {a.device}; {a.rows} states, {a.epochs} epochs of batch "
        f"{a.batch} at lr {a.learning_rate:g}, LoRA r{a.lora_r}\n"
    )
    print("| measure | value |\n|---|---|")
    print(
        f"| supervised steps, wall time | {len(losses)}, {seconds:.0f} s ({statistics.median(times):.2f} s/step median) |"
    )
    print(f"| loss: first step, last step | {losses[0]:.3f}, {losses[-1]:.4f} |")
    print(f"| greedy replies that parse | {sum(p is not None for p in parsed)}/{len(rows)} |")
    print(f"| ... that name the row's guess | {named}/{len(rows)} |")
    print(f"| ... that are the row's reply, word for word | {exact}/{len(rows)} |")
    print(
        f"| reply tokens, end of turn included: median (budget {budget.tokens}); replies cut off at it | "
        f"{statistics.median(tokens):g}; {clipped}/{len(rows)} |"
    )
    print(
        f"| GRPO step 1 from the adapter, beta 0.04: logged KL (reference: the supervised adapter) | {step['kl']:.6f} |"
    )
    print(f"| KL of the same adapter to the base model, on its own samples at temperature 1 | {kl_base:.4f} |")
    print(
        f"| GRPO step 1: reward, format, wall time | {step['reward']:.3f}, "
        f"{step.get('rewards/format_reward/mean', float('nan')):.3f}, {grpo_seconds:.0f} s |"
    )
    curve = [h for h in logs if "val/invalid_rate" in h]
    if curve:
        print("\n| supervised step | validation games won | invalid replies |\n|---|---|---|")
        for h in curve:
            print(f"| {h.get('step', 0)} | {h['val/win_rate']:.2f} | {h['val/invalid_rate']:.2f} |")


if __name__ == "__main__":
    main()
