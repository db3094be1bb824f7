"""Whether a think letter's output row points where the answers it names point: for each think letter (``D₁``: D,
tagged with column 1), the cosine between its row and the direction from the mean answer row to the mean row of the
answers with that letter in that column, beside a control (the answers with the letter two columns on). A positive
cosine means that a step of the word step's state toward those answers also raises the think letter there, the token
that breaks the format when it wins the guess (research log, e94). Reads the weights only; prints figures, never asserts.

    python research/probe_think_rows.py tinymodel/model [--min_words 20]

A LoRA adapter (GRPO's) leaves the output rows as they are, so a build's directory is all it reads.
"""

from __future__ import annotations

import argparse

import torch

from models.loading import load_for_inference
from tinymodel.tokenizer import COLUMN_TAGS, WORDS


def cosines(rows: torch.Tensor, tokenizer, shift: int, min_words: int) -> torch.Tensor:
    """For each think letter of column k and the answers with its letter in column k + ``shift`` (at least
    ``min_words`` of them): the cosine between its row and that group's mean answer row less every answer's mean."""
    words = list(WORDS)
    answers = rows[tokenizer.convert_tokens_to_ids(words)]
    centre = answers.mean(0)
    out = []
    for k, tag in enumerate(COLUMN_TAGS):
        column = (k + shift) % len(COLUMN_TAGS)
        for letter in sorted({w[column] for w in words}):
            group = [i for i, w in enumerate(words) if w[column] == letter]
            if len(group) < min_words:
                continue
            row = rows[tokenizer.convert_tokens_to_ids(letter + tag)]
            out.append(torch.nn.functional.cosine_similarity(row, answers[group].mean(0) - centre, dim=0))
    return torch.stack(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("model", help="a model directory (tinymodel/model, or a build's --out)")
    parser.add_argument("--min_words", type=int, default=20, help="the fewest answers a (letter, column) group holds")
    args = parser.parse_args()
    model, tokenizer = load_for_inference(args.model, device="cpu")
    rows = model.get_output_embeddings().weight.detach()
    for name, shift in (("the letter in its own column", 0), ("control: the letter two columns on", 2)):
        c = cosines(rows, tokenizer, shift, args.min_words)
        print(
            f"{name}: {len(c)} think letters, mean cosine {c.mean():.3f} (min {c.min():.3f}, max {c.max():.3f}), "
            f"positive {int((c > 0).sum())}"
        )


if __name__ == "__main__":
    main()
