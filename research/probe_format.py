"""Where a model's greedy replies break the format: greedy games on the training secrets that GRPO plays (``rl``, or
``--split val``: the validation secrets) from several openings, the share of replies that fail, and at each failing
state the model's top tokens step by step along its greedy reply (what took the place of the right token). Optionally
writes those states as game-mode start rows for ``grpo_train.py --dataset`` (the trap replay of the research log, e80).
``--shares N`` also prints how much of what the later layers read at each reply position is the reply's own token (e87),
at the failing states and at N sampled states whose reply kept the format. ``--closing`` prints, over the states whose
reply kept the format, the probability the model gave ``</think>`` and ``</guess>`` where it wrote them, by how many
lines one green repeats in (e89). ``--margins`` prints, over the same kept replies, at each of the reply's steps the
probability of the token written and the most that a token which would have broken the format had: a broken reply is
a step where such a token won, so the steps where one came close count the near misses. ``--start`` (with ``--adapter``) prints, at each
failing state, the first step where the reply broke the format, and how likely the token that broke it and the tokens
that would have kept it were with the adapter and without it (the start on the same state).

    python research/probe_format.py tinymodel/model [--adapter outputs/cpu] [--seeds 0 1 2] [--show 10]
    python research/probe_format.py tinymodel/model --seeds 0 --show 0 --shares 300 --closing
    python research/probe_format.py tinymodel/model --seeds 0 1 2 --rows traps.jsonl --copies 3 --row_seed 42

``--rows`` writes game mode's default start states (``training.data.game_starts`` of the rl secrets, share 0.5,
``--row_seed``: what the main job with that seed plays) followed by each distinct failing state ``--copies`` times.
A failing state is the game's state before its first reply that broke the format; greedy play then repeats that
reply to the game's end, so one such state counts as several failed replies (the table by state counts each game's
states up to its first broken reply). Prints figures, never asserts; no held-out secret is played, and
``--rows`` only writes ``rl`` states (a validation state in training would spoil the split settings are chosen on).
"""

from __future__ import annotations

import argparse
import functools
import random
from collections import Counter, defaultdict
from pathlib import Path

import torch

from evaluation.play import ModelPlayer
from models.loading import load_for_inference
from tinymodel.data import think_text
from tinymodel.tokenizer import COLUMN_TAGS, THINK_LETTERS, WORDS
from training.data import game_starts, make_row, save_rows
from wordle import is_allowed, render_prompt, train_secrets
from wordle.game import play
from wordle.openings import Opening

OPENINGS = ("own", "answer", "allowed", "answer:2")


def depth(history) -> tuple[int, int]:
    """A state's past guesses, and the most lines that one green (letter, column) repeats in: the broken replies
    cluster in late states whose lines share their greens (research log, e83)."""
    greens = Counter((word[i], i) for word, pattern in history for i in range(5) if pattern[i].upper() == "G")
    return len(history), max(greens.values(), default=0)


def think_shape(history) -> tuple[int, bool]:
    """The letters a state's think places, and whether it places one letter twice (``.ELL.``): at the same number
    of placed letters, those thinks broke the reply several times as often (research log, e86)."""
    letters = think_text(history).replace(".", "")
    return len(letters), len(set(letters)) < len(letters)


def kind(reply: str) -> str:
    """Which decision a broken reply got wrong, read off its text."""
    think, closed, rest = reply.removeprefix("<think>").partition("</think>")
    if not closed:
        return "the think never closes"
    if len(think) != 5:
        return "a think of other than 5 characters"
    if not rest.startswith("<guess>"):
        return "no <guess> after the think"
    word, closed, _ = rest.removeprefix("<guess>").partition("</guess>")
    if is_allowed(word[:5]) and (not closed or len(word) > 5):
        return "no </guess> after the word"
    return "other" if is_allowed(word) else "a guess that is no word (a think letter or more)"


def print_shares(by: str, counts: dict[tuple, list[int]], label) -> None:
    """One table of states by ``by``: each key's states, how many broke the reply, and their share."""
    print(f"\nstates by {by}: states, broken, share")
    for key in sorted(counts):
        fine, broken = counts[key]
        print(f"  {label(key)}: {fine + broken}, {broken}, {100 * broken / (fine + broken):.2f}%")


def prompt_ids(tokenizer, history) -> list[int]:
    """The token ids of the prompt that play shows for ``history``, up to the reply."""
    text = tokenizer.apply_chat_template(render_prompt(history), add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def masked_probs(model, ids: list[int]) -> torch.Tensor:
    """The next token's distribution at every position of ``ids``, with the model's suppressed tokens masked as
    generation masks them."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    logits[:, list(model.generation_config.suppress_tokens or [])] = float("-inf")
    return logits.softmax(-1)


def top_tokens(model, tokenizer, history, steps: int = 12, k: int = 4) -> list[str]:
    """The greedy reply from ``history``, one line per token: the ``k`` most likely tokens (with the model's
    suppressed tokens masked, as generation masks them) and the share of all answers' tokens together."""
    vocab = tokenizer.get_vocab()
    answer_ids = [i for t, i in vocab.items() if len(t) == 5 and t.isalpha() and t.isupper()]
    ids = prompt_ids(tokenizer, history)
    lines = []
    for _ in range(steps):
        p = masked_probs(model, ids)[-1]
        top = p.topk(k)
        cells = " ".join(f"{tokenizer.convert_ids_to_tokens(int(i))} {v:.2f}" for v, i in zip(top.values, top.indices))
        lines.append(f"{cells} | answers {p[answer_ids].sum():.2f}")
        ids = ids + [int(top.indices[0])]
        if ids[-1] == tokenizer.eos_token_id:
            break
    return lines


def reply_shares(model, tokenizer, states) -> tuple[dict[int, float], float]:
    """At each position of a state's reply (0 is the prompt's last token, then ``<think>`` and the think's letters),
    the norm of the token's input row over the norm of layer 0's attention output, which adds the prompt's mean to
    every position; averaged over ``states`` ((history, reply) pairs). Also their prompts' mean length."""
    seen: dict[str, torch.Tensor] = {}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hooks = [
        base.model.embed_tokens.register_forward_hook(lambda m, i, out: seen.__setitem__("row", out[0])),
        base.model.layers[0].self_attn.register_forward_hook(lambda m, i, out: seen.__setitem__("mean", out[0][0])),
    ]
    by_position, lengths = defaultdict(list), []
    for history, reply in states:
        prompt = prompt_ids(tokenizer, history)
        with torch.no_grad():
            model(torch.tensor([prompt + tokenizer(reply, add_special_tokens=False)["input_ids"][:8]]))
        shares = seen["row"][len(prompt) - 1 :].norm(dim=-1) / seen["mean"][len(prompt) - 1 :].norm(dim=-1)
        for k, share in enumerate(shares.tolist()):
            by_position[k].append(share)
        lengths.append(len(prompt))
    for hook in hooks:
        hook.remove()
    return {k: sum(v) / len(v) for k, v in sorted(by_position.items())}, sum(lengths) / max(1, len(lengths))


def closing_odds(model, tokenizer, states) -> dict[int, dict[str, list[float]]]:
    """For each (history, reply) whose reply kept the format, the probability of ``</think>`` and of ``</guess>`` at
    the step that wrote them, keyed by the most lines one green repeats in (``depth``)."""
    tags = {tokenizer.convert_tokens_to_ids(tag): tag for tag in ("</think>", "</guess>")}
    odds: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for history, reply in states:
        prompt = prompt_ids(tokenizer, history)
        ids = prompt + tokenizer(reply, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            p = model(torch.tensor([ids])).logits[0].softmax(-1)
        for j in range(len(prompt), len(ids)):
            if ids[j] in tags:
                odds[depth(history)[1]][tags[ids[j]]].append(float(p[j - 1, ids[j]]))
    return odds


STEPS = ("<think>", *(f"think column {k}" for k in range(1, 6)), "</think>", "<guess>", "the word", "</guess>", "eos")


@functools.cache
def step_tokens(tokenizer) -> list[list[int]]:
    """The tokens that keep the format at each of a reply's eleven steps (``STEPS``): any letter or dot tagged
    with the step's column is a think, right or wrong, and any word token a guess; only the others break it."""
    ids = tokenizer.convert_tokens_to_ids
    columns = [[ids(t) for t in THINK_LETTERS if t.endswith(tag)] for tag in COLUMN_TAGS]
    tags = [[ids(tag)] for tag in ("<think>", "</think>", "<guess>", "</guess>")]
    return [tags[0], *columns, tags[1], tags[2], ids(list(WORDS)), tags[3], [tokenizer.eos_token_id]]


def step_odds(model, tokenizer, states) -> tuple[dict[str, list[tuple[float, float]]], int]:
    """For each (history, reply) whose reply kept the format in the eleven tokens of a word-token guess, at each
    step the probability of the token the model wrote and the most any token that breaks the format had (the
    suppressed tokens masked, as generation masks them), keyed by ``STEPS``; also the replies of other lengths."""
    keep = step_tokens(tokenizer)
    odds: dict[str, list[tuple[float, float]]] = defaultdict(list)
    skipped = 0
    for history, reply in states:
        prompt = prompt_ids(tokenizer, history)
        written = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if len(written) != len(STEPS):
            skipped += 1
            continue
        p = masked_probs(model, prompt + written)[len(prompt) - 1 : -1]
        for k, (name, token) in enumerate(zip(STEPS, written)):
            breaking = p[k].clone()
            breaking[keep[k]] = 0
            odds[name].append((float(p[k, token]), float(breaking.max())))
    return odds, skipped


def first_break(model, tokenizer, history) -> tuple[list[int], int] | None:
    """The greedy reply's tokens from ``history`` up to and with its first token that breaks the format
    (``STEPS``), and that step's index; None where the reply keeps the format."""
    keep, ids = step_tokens(tokenizer), prompt_ids(tokenizer, history)
    for k in range(len(STEPS)):
        token = int(masked_probs(model, ids)[-1].argmax())
        ids = ids + [token]
        if token not in keep[k]:
            return ids, k
    return None


def break_odds(model, tokenizer, ids: list[int], k: int) -> tuple[str, float, float]:
    """At step ``k``, the last token of ``ids``: the likeliest token that breaks the format, its probability, and
    the total of the tokens that keep it."""
    p, keep = masked_probs(model, ids[:-1])[-1], step_tokens(tokenizer)[k]
    keeping = p[keep].sum()
    breaking = p.clone()
    breaking[keep] = 0
    return tokenizer.convert_ids_to_tokens(int(breaking.argmax())), float(breaking.max()), float(keeping)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("model", help="a model directory (tinymodel/model, or a build's --out)")
    parser.add_argument("--adapter", help="a LoRA adapter directory to apply (grpo_train.py's output_dir)")
    parser.add_argument("--split", choices=("rl", "val"), default="rl", help="the secrets to play (never held out)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="opening seeds (own plays alike in each)")
    parser.add_argument("--show", type=int, default=10, help="failing states to print token by token")
    parser.add_argument("--rows", help="write game-mode start rows (.jsonl) with the failing states")
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--row_seed", type=int, default=42)
    parser.add_argument("--shares", type=int, default=0, help="states kept in format to compare reply shares on")
    parser.add_argument("--closing", action="store_true", help="the closing tags' odds, by green repeats")
    parser.add_argument("--margins", action="store_true", help="how sure the kept replies were, step by step")
    parser.add_argument("--start", action="store_true", help="the failing steps' odds with the adapter and without")
    args = parser.parse_args()
    if args.rows and args.split != "rl":
        parser.error("--rows writes training rows: only from --split rl")
    if args.start and not args.adapter:
        parser.error("--start compares the adapter with the start: it needs --adapter")
    torch.set_num_threads(1)
    model, tokenizer = load_for_inference(args.model, args.adapter, device="cpu")
    player, secrets = ModelPlayer(model, tokenizer), train_secrets(args.split)
    traps: dict[tuple, tuple] = {}  # (secret, guesses) -> (opening, the failing reply)
    states: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])  # depth -> [fine, broken]
    shapes: dict[tuple[int, bool], list[int]] = defaultdict(lambda: [0, 0])  # think_shape -> [fine, broken]
    kept: list[tuple] = []  # (history, reply) of the states whose reply kept the format
    for seed in args.seeds:
        for spec in OPENINGS:
            games = play(player, secrets, Opening.parse(spec).starts(secrets, seed))
            turns = [t for g in games for t in g.turns]
            failed = [t for t in turns if t.status == "format"]
            print(
                f"seed {seed}, {spec}: {len(failed)} of {len(turns)} replies broke the format "
                f"({100 * len(failed) / max(1, len(turns)):.2f}%)"
            )
            for g in games:
                for turn, history in zip(g.turns, g.histories()):
                    states[depth(history)][turn.status == "format"] += 1
                    shapes[think_shape(history)][turn.status == "format"] += 1
                    if turn.status == "format":
                        traps.setdefault((g.secret, history), (spec, turn.reply))
                        break  # greedy play repeats the broken reply from that state on
                    kept.append((history, turn.reply))
    print(f"{len(traps)} distinct failing states")
    for name, n in Counter(kind(reply) for _, reply in traps.values()).most_common():
        print(f"  {name}: {n}")
    print_shares("(past guesses, the most lines one green letter repeats in)", states, str)
    print_shares(
        "the think's placed letters, and whether it places one letter twice",
        shapes,
        lambda key: f"{key[0]} placed{', a letter twice' if key[1] else ''}",
    )
    for (secret, history), (spec, reply) in list(traps.items())[: args.show]:
        print(f"\n{secret} ({spec}) after {' '.join(w for w, _ in history) or 'no guess'}: {reply[:60]!r}")
        print("\n".join(top_tokens(model, tokenizer, history)))
    if args.shares:
        random.Random(0).shuffle(kept)
        late = [state for state in kept if depth(state[0])[1] >= 3]
        failing = [(history, reply) for (_, history), (_, reply) in traps.items()]
        print("\nthe own token's input row over layer 0's attention output, by reply position")
        groups = [
            ("broken", failing),
            ("kept, a green in 3+ lines", late[: args.shares]),
            ("kept", kept[: args.shares]),
        ]
        for name, group in groups:
            shares, length = reply_shares(model, tokenizer, group)
            cells = " ".join(f"{k}:{v:.2f}" for k, v in shares.items())
            print(f"  {name}: {len(group)} states, prompt {length:.0f} tokens; {cells}")
    if args.closing:
        print(
            "\nthe closing tags' probability where the kept replies wrote them, by the most lines one green repeats in"
        )
        for repeats, by_tag in sorted(closing_odds(model, tokenizer, kept).items()):
            cells = "; ".join(
                f"{tag} mean {sum(v) / len(v):.4f}, under 0.9 in {sum(x < 0.9 for x in v)} of {len(v)}"
                for tag, v in by_tag.items()
            )
            print(f"  {repeats} lines: {cells}")
    if args.margins:
        print(
            "\nthe kept replies' steps: the written token's mean probability, and the most likely token that would have"
            " broken the format: its mean, and the steps where it had over 0.01, 0.1 and 0.3"
        )
        odds, skipped = step_odds(model, tokenizer, kept)
        for name, pairs in odds.items():
            won, broke = [w for w, _ in pairs], [b for _, b in pairs]
            print(
                f"  {name}: {len(pairs)} steps, written {sum(won) / len(won):.4f}; breaking {sum(broke) / len(broke):.5f}, "
                + ", ".join(f"over {x} {sum(b > x for b in broke)}" for x in (0.01, 0.1, 0.3))
            )
        print(f"  ({skipped} kept replies of other than {len(STEPS)} tokens left out)")
    if args.start:
        print(
            "\nthe first broken step of each failing state: the likeliest token that breaks the format and its"
            " probability, and the format-keeping tokens' total; with the adapter, then at the start on the same prefix"
        )
        for secret, history in traps:
            ids, k = first_break(model, tokenizer, history) or ([], -1)
            if k < 0:
                continue
            after = break_odds(model, tokenizer, ids, k)
            with model.disable_adapter():
                before = break_odds(model, tokenizer, ids, k)
            print(
                f"  {secret} after {' '.join(w for w, _ in history)}, {STEPS[k]}: {after[0]} {after[1]:.2f},"
                f" keeping {after[2]:.2f}; start: {before[0]} {before[1]:.2f}, keeping {before[2]:.2f}"
            )
    if args.rows:
        rows = game_starts(secrets, 0.5, args.row_seed)
        rows += [make_row(secret, history) for secret, history in traps] * args.copies
        save_rows(rows, Path(args.rows))
        print(f"\nwrote {len(rows)} start rows to {args.rows}")


if __name__ == "__main__":
    main()
