"""How fast a random-weight stand-in learns fixed supervised rows by heart: the rate behind issue 87's CPU bar.

    python research/probe_stand_in_recall.py                               # the bench's stand-in and settings
    python research/probe_stand_in_recall.py --readout 10 --no-train_head  # a trained model's logit range, LoRA alone
    python research/probe_stand_in_recall.py --shape 256 4 1024 4 2        # wider and deeper

``benchmarks/bench_warm_start.py`` trains through TRL, whose fused head scores every position of the batch on a CPU
(about 1 s a row here). This loop scores the reply's positions alone, a quarter of the head's work, so it measures
the *rate* of memorisation in epochs at a fraction of the cost. Per epoch it prints the loss, the share of reply
tokens the model puts first under teacher forcing, the rows whose every reply token is first (greedy decoding then
writes the row's reply word for word) and the rows whose guess tokens are first.

``--readout`` sets the final norm's weight: the stand-in's 0.02-scale tied embeddings cap every logit near 1, where a
trained model's span tens. Prints figures, asserts nothing; its results are in docs/warm-start.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from tinymodel.stand_in import SMALL_QWEN, QwenShape, build_qwen_dir
from training.sft_data import Budget, build_sft_rows

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def tokenized(tokenizer, rows: list[dict]) -> list[tuple[list[int], int, tuple[int, int]]]:
    """Each row's prompt and reply through the end of turn, as the chat template renders them: (ids, where the reply
    starts, the span of the guess's tokens)."""
    out = []
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for row in rows:
        prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        full = tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
        start = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        ids = ids[: ids.index(end_of_turn, start) + 1]
        guess_at = full.rindex(row["guess"])
        before = len(tokenizer(full[:guess_at], add_special_tokens=False)["input_ids"])
        through = len(tokenizer(full[: guess_at + len(row["guess"])], add_special_tokens=False)["input_ids"])
        out.append((ids, start, (before, through)))
    return out


def padded(items, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _, _ in items)
    ids = torch.full((len(items), width), pad_id)
    attention = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), -100)
    for i, (row, start, _) in enumerate(items):
        ids[i, : len(row)] = torch.tensor(row)
        attention[i, : len(row)] = 1
        labels[i, start : len(row)] = torch.tensor(row[start:])
    return ids, attention, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", nargs=5, type=int, default=list(SMALL_QWEN), metavar=("H", "L", "I", "HEADS", "KV"))
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=45)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=5e-3)
    parser.add_argument("--lora_r", type=int, default=16)
    parser.add_argument("--train_head", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--readout", type=float, default=1.0, help="the final norm's weight (the stand-in's: 1)")
    parser.add_argument("--seed", type=int, default=3)
    a = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_qwen_dir(Path(tmp), QwenShape(*a.shape))
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rows, _ = build_sft_rows(a.rows, a.seed, tokenizer, Budget(128))
    data = tokenized(tokenizer, rows)
    with torch.no_grad():
        model.model.norm.weight.fill_(a.readout)
    lora = LoraConfig(
        r=a.lora_r,
        lora_alpha=2 * a.lora_r,
        lora_dropout=0.0,
        target_modules=TARGETS,
        modules_to_save=["lm_head"] if a.train_head else None,
    )
    model = get_peft_model(model, lora)
    backbone, head = model.base_model.model.model, model.get_output_embeddings()
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=a.learning_rate, weight_decay=0
    )
    order = torch.Generator().manual_seed(a.seed)
    prompt = sum(start for _, start, _ in data) / len(data)
    reply = sum(len(ids) - start for ids, start, _ in data) / len(data)
    print(f"{a.rows} rows: prompt {prompt:.0f} tokens, reply {reply:.0f} (end of turn included), mean")
    print(
        "| epoch | loss | reply tokens first | rows word for word | rows' guess | seconds |\n|---|---|---|---|---|---|"
    )
    started = time.perf_counter()
    for epoch in range(1, a.epochs + 1):
        model.train()
        losses = []
        for at in range(0, len(data), a.batch):
            ids, attention, labels = padded(
                [data[i] for i in torch.randperm(len(data), generator=order)[at : at + a.batch]], tokenizer.pad_token_id
            )
            hidden = backbone(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1]
            labels = labels[:, 1:]
            scored = labels != -100
            loss = torch.nn.functional.cross_entropy(head(hidden[scored]).float(), labels[scored])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        model.eval()
        first = total = whole = guessed = 0
        with torch.no_grad():
            for at in range(0, len(data), 16):
                chunk = data[at : at + 16]
                ids, attention, labels = padded(chunk, tokenizer.pad_token_id)
                hidden = backbone(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1]
                labels = labels[:, 1:]
                right = (head(hidden).argmax(-1) == labels) | (labels == -100)
                first += int((right & (labels != -100)).sum())
                total += int((labels != -100).sum())
                whole += int(right.all(1).sum())
                guessed += sum(bool(right[i, b - 1 : e - 1].all()) for i, (_, _, (b, e)) in enumerate(chunk))
        print(
            f"| {epoch} | {sum(losses) / len(losses):.3f} | {first / total:.3f} | {whole}/{len(data)} | "
            f"{guessed}/{len(data)} | {time.perf_counter() - started:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
