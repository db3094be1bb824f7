"""The guess bag, and its wiring into a fresh Qwen2's layer 0 (the start that made the embedded model learn).

The bag is a softmax regression for the guessed answer whose logits are the mean, over the prompt's
tokens, of one learned row per token. With column-tagged marks every Wordle constraint is one such
row, so it composes any number of feedback lines; a transformer trained from scratch did not learn
that at this compute (docs/embedded-model.md, tries). ``research/probe_guess_bag.py`` measures both.
"""

from __future__ import annotations

import itertools
import logging

import datasets
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from tinymodel.tokenizer import COLUMN_TAGS, TAGGED_LETTERS, USER, WORDS, past_guess_ids

logger = logging.getLogger(__name__)


def guess_states(encoded: datasets.Dataset) -> list[tuple[int, list[int], list[int]]]:
    """Every row whose reply guesses an answer token: its index, its token ids up to and including
    ``<guess>``, and its candidate answers' ids. The columns are read once: indexing a datasets
    column row by row re-reads it each time (3 s per 5000 rows, measured)."""
    columns = encoded.to_dict()
    return [
        (i, ids[:pos], cands)
        for i, (ids, pos, cands) in enumerate(zip(columns["input_ids"], columns["word_pos"], columns["candidates"]))
        if pos > 0
    ]


def constraint_rows(tokenizer: PreTrainedTokenizerFast) -> tuple[torch.Tensor, torch.Tensor]:
    """Two fixed (vocabulary x answers) matrices, 1 where a marked letter's token rules an answer out:

    - *placed*: what the token says about its own column (``R(✓)₂``: not R there rules a word out; ``R(~)₂``
      and ``R(-)₂``: R there does);
    - *present*: what it says about the word (``R(~)₂``: no R rules it out; ``R(-)₂``: an R does, unless the same
      line marks another R, which one token cannot see).

    Every other token's rows are 0. Their sum over a prompt counts the feedback a word breaks, the same for any
    opening; the fitted rows learn that from the secrets they see, and ranked a ruled-out word first in 15% of
    four-guess validation states. With these rows beside them, 5% at learnt weights and none at a fixed 400
    (``research/probe_guess_bag.py --constraint_weight W``; the research log, where builds with them are measured:
    the wiring loses most of what the bag reads)."""
    placed = torch.zeros(len(tokenizer), len(WORDS))
    present = torch.zeros(len(tokenizer), len(WORDS))
    letters = [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    at = torch.tensor(
        [[[word[i] == x for x in letters] for i in range(5)] for word in WORDS]
    ).float()  # word, column, letter
    has = at.amax(1)  # word, letter
    for token in TAGGED_LETTERS:
        letter, mark, column = token.strip()[0], token.strip()[2], COLUMN_TAGS.index(token[-1])
        row, c = tokenizer.convert_tokens_to_ids(token), ord(letter) - ord("A")
        placed[row] = 1 - at[:, column, c] if mark == "✓" else at[:, column, c]
        if mark != "✓":
            present[row] = 1 - has[:, c] if mark == "~" else has[:, c]
    return placed, present


def fit_guess_bag(
    encoded: datasets.Dataset,
    tokenizer: PreTrainedTokenizerFast,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    pooling: str = "mean",
    constraint_weight: float = 0.0,
) -> torch.Tensor:
    """A softmax regression for the guessed answer: its logits are the mean, over the tokens before it,
    of one learned row per token, fitted to the soft target of :class:`tinymodel.sft.SoftTargetTrainer`.

    With column-tagged marks every Wordle constraint is one such row (an absent S lowers every word
    with an S; a green R in column 2 raises every word with R there), so the bag composes any number
    of feedback lines, which a transformer trained from scratch did not learn to do at this compute
    (docs/embedded-model.md, tries). Returns the (vocabulary x answers) matrix, answers in ``WORDS`` order.
    ``pooling="sum"`` sums the rows instead, so that a constraint keeps its weight however long the prompt:
    for ``research/probe_guess_bag.py`` only, since the wiring computes a mean.

    ``constraint_weight`` adds :func:`constraint_rows` beside the fitted rows, fixed: each constraint a word
    breaks costs it that many logits (over the prompt's length, as every row), so the fitted rows rank the
    words that fit. The build fits with them at 400 (tinymodel.build.Scale.constraint_weight; docs/research-log.md).

    A past-guess token's row (``⟦W⟧``, see ``tinymodel.tokenizer.PAST_GUESSES``) is not free: it is
    ``-c`` in W's own column and 0 elsewhere, one ``c`` for all. Free rows, each seen a few dozen times,
    learnt the training secrets instead (validation states' top answer still possible after two guesses:
    0.78, against 0.87 without the tokens; docs/research-log.md).
    """
    generator = torch.Generator().manual_seed(seed)
    states = guess_states(encoded)
    prefixes = [prefix for _, prefix, _ in states]
    word_ids = tokenizer.convert_tokens_to_ids(list(WORDS))
    column = {token: j for j, token in enumerate(word_ids)}
    targets = [torch.tensor([column[c] for c in cands]) for _, _, cands in states]
    past = {token: j for j, token in enumerate(past_guess_ids(tokenizer))}
    # The bag's own rows: every token but the past-guess ones, which share one row held at 0 (Adam moves
    # no weight whose gradient is always 0); their -c is added below. A smaller table fits faster.
    own = [t for t in range(len(tokenizer)) if t not in past]
    row_of = torch.full((len(tokenizer),), len(own), dtype=torch.long)
    row_of[own] = torch.arange(len(own))
    prefixes = [row_of[torch.tensor(prefix)].tolist() for prefix in prefixes]
    guessed_in = [[(past[t], prefix.count(t)) for t in set(prefix) if t in past] for _, prefix, _ in states]
    # The constraint rows in the bag's own row order, placed and present interleaved and summed at each step as the
    # measured builds did (a matrix summed beforehand rounds otherwise).
    fixed = None
    if constraint_weight:
        placed, present = (rows[own + [own[0]]] for rows in constraint_rows(tokenizer))  # the held row: any own row
        placed[-1], present[-1] = 0.0, 0.0
        fixed = torch.nn.EmbeddingBag.from_pretrained(torch.stack([placed, present], -1).flatten(1), mode=pooling)
    words = len(word_ids)
    bag = torch.nn.EmbeddingBag(len(own) + 1, len(word_ids), mode=pooling)
    torch.nn.init.zeros_(bag.weight)
    bag.weight.register_hook(lambda grad: grad.index_fill(0, torch.tensor([len(own)]), 0.0))
    temperature = torch.nn.Parameter(torch.tensor(10.0))
    not_guessed = torch.nn.Parameter(torch.tensor(1.0))  # c
    optimizer = torch.optim.Adam([bag.weight, temperature, not_guessed], lr=learning_rate)
    for step in range(steps):
        batch = torch.randint(len(states), (batch_size,), generator=generator).tolist()
        flat = torch.tensor([t for i in batch for t in prefixes[i]])
        offsets = torch.tensor([0, *itertools.accumulate(len(prefixes[i]) for i in batch)][:-1])
        guessed = torch.zeros(batch_size, len(word_ids))  # each past guess's share of the pool
        for k, i in enumerate(batch):
            for j, count in guessed_in[i]:
                guessed[k, j] = count / len(prefixes[i]) if pooling == "mean" else count
        logits = temperature * (bag(flat, offsets) - not_guessed * guessed)
        if fixed is not None:
            logits = logits - constraint_weight * fixed(flat, offsets).view(batch_size, words, 2).sum(-1)
        logp = logits.log_softmax(-1)
        # The soft target as one (batch x answers) matrix, each row uniform over its state's candidates.
        soft = torch.zeros_like(logp)
        for k, i in enumerate(batch):
            soft[k, targets[i]] = 1.0 / len(targets[i])
        loss = -(soft * logp).sum(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    logger.info(
        "guess bag: %d steps, last loss %.3f, past-guess weight %.2f, temperature %.1f",
        steps,
        loss.item() if steps else float("nan"),
        not_guessed.item(),
        temperature.item(),
    )
    matrix = bag.weight.detach()[row_of]
    for token, j in past.items():
        matrix[token, j] = -not_guessed.item()
    matrix = temperature.detach() * matrix
    if fixed is not None:
        matrix = matrix - constraint_weight * fixed.weight.view(-1, words, 2).sum(-1)[row_of]
    return matrix


@torch.no_grad()
def wire_guess_bag(
    model: Qwen2ForCausalLM,
    matrix: torch.Tensor,
    word_ids: list[int],
    encoded: datasets.Dataset,
) -> None:
    """Make layer 0 compute the bag's mean before any training, so that SFT starts from a model that
    already composes feedback lines (measured on an earlier bag: the untrained wired model's top answer
    fits every line in 93% of one-guess states and 67% of two-guess ones; research/probe_guess_bag.py).

    - embeddings: an SVD of ``matrix`` (rank hidden - hidden/8) gives each token a row and each answer an
      output vector; the last hidden/8 coordinates are slack that gives every token row the same norm, so
      layer 0's RMSNorm scales them all alike instead of reweighting them. Each token's slack points its own
      random way: a row the bag hardly uses (eos, the reply's tags and letters) is mostly slack, and one shared
      slack direction started them all as one vector, which SFT never pulled far apart (cosine 0.8-0.9 after it);
      eos then took the mass of a doubtful think letter and broke the reply. The output layer (untied) starts as a
      copy of these rows, so the answers' output vectors are the bag's;
    - layer 0: queries and keys zero (uniform attention over the prefix, so its output is the mean),
      values and output projections the identity;
    - later layers and every MLP start at a tenth of their output scale, close to the identity, so
      they add the reply's format without drowning the wired path;
    - the final norm is scaled so that the answers' logits have the bag's spread (least squares on
      256 training states).
    """
    config = model.config
    if config.num_key_value_heads != config.num_attention_heads:
        raise ValueError("wiring the guess bag needs one key/value head per attention head")
    d = config.hidden_size
    rank = d - max(1, d // 8)
    embeddings = model.get_input_embeddings().weight
    row_norm = float(embeddings.std()) * d**0.5  # the init's typical row norm
    u, s, vh = torch.linalg.svd(matrix, full_matrices=False)
    rows = torch.zeros_like(embeddings)
    rows[:, :rank] = u[:, :rank] * s[:rank].sqrt()
    # The init's own random directions (the padding row is zero there, so it stays without slack: never attended to).
    slack = torch.nn.functional.normalize(embeddings[:, rank:], dim=1)
    rows[:, rank:] = slack * (rows.norm(dim=1).max() ** 2 * 1.0201 - rows.pow(2).sum(1)).sqrt().unsqueeze(1)
    words = vh[:rank].T * s[:rank].sqrt()
    rows *= row_norm / rows.norm(dim=1).max()
    rows[word_ids] = 0
    rows[word_ids, :rank] = words * row_norm / words.norm(dim=1).mean()
    embeddings.copy_(rows)
    model.get_output_embeddings().weight.copy_(rows)
    for i, layer in enumerate(model.model.layers):
        attention = layer.self_attn
        if i == 0:
            for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
                projection.weight.zero_()
                projection.bias.zero_()
            attention.v_proj.weight[:rank, :rank] = torch.eye(rank)
            attention.o_proj.weight.copy_(torch.eye(d))
        else:
            attention.o_proj.weight.mul_(0.1)
        layer.mlp.down_proj.weight.mul_(0.1)
    model_logits, bag_logits = [], []
    for _, prefix, _ in guess_states(encoded)[:256]:
        z = model(torch.tensor([prefix])).logits[0, -1, word_ids]
        b = matrix[prefix].mean(0)
        model_logits.append(z - z.mean())
        bag_logits.append(b - b.mean())
    z, b = torch.cat(model_logits), torch.cat(bag_logits)
    model.model.norm.weight.mul_(float((z * b).sum() / (z * z).sum()))


# --- heads of their own for the past-guess tokens (docs/research-log.md) -------------------------------------------


def _ridge(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The weighted ridge least-squares solution of ``x @ solution ~ y`` (ridge 1e-3)."""
    a = x * weight.sqrt()[:, None]
    return torch.linalg.solve(a.T @ a + 1e-3 * torch.eye(x.shape[1]), a.T @ (y * weight.sqrt()))


def _least_squares(rows: torch.Tensor, ones: torch.Tensor, zeros: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A direction and bias scoring ``rows[ones]`` 1 and ``rows[zeros]`` 0, each class weighted alike however
    many rows it has."""
    x = torch.cat([rows[ones], rows[zeros]])
    x = torch.cat([x, torch.ones(len(x), 1)], 1)
    y = torch.cat([torch.ones(int(ones.sum())), torch.zeros(int(zeros.sum()))])
    solution = _ridge(x, y, torch.where(y > 0, 1.0 / ones.sum(), 1.0 / zeros.sum()))
    return solution[:-1], solution[-1]


def _query_direction(rows: torch.Tensor, target: int) -> torch.Tensor:
    """A direction scoring ``rows[target]`` 1 and every other row 0, the target weighted 100 (no bias)."""
    y = torch.zeros(len(rows))
    y[target] = 1.0
    weight = torch.ones(len(rows))
    weight[target] = 100.0
    return _ridge(rows, y, weight)


def widened(model: Qwen2ForCausalLM, added: int) -> Qwen2ForCausalLM:
    """The same model with ``added`` zero heads appended to every layer (head_dim kept): it computes the same."""
    config = model.config.to_dict()
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    heads = model.config.num_attention_heads + added
    config.update(num_attention_heads=heads, num_key_value_heads=heads, head_dim=head_dim)
    for key in ("architectures", "transformers_version", "model_type"):
        config.pop(key, None)
    wide = Qwen2ForCausalLM(Qwen2Config(**config))
    state = wide.state_dict()
    for name, old in model.state_dict().items():
        new = torch.zeros_like(state[name])
        if "o_proj" in name:
            new[:, : old.shape[1]] = old
        else:
            new[: old.shape[0]] = old
        state[name] = new
    wide.load_state_dict(state)
    wide.generation_config = model.generation_config
    return wide


@torch.no_grad()
def key_query_directions(
    model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layer 0's key direction (and bias) that scores the past-guess tokens 1 and the other prompt tokens 0, and
    the query direction that scores ``<guess>`` 1 and every other token 0, both on layer 0's normalised rows.
    ``<|user|>`` scores 1 too: somewhere to look before any past guess (the fit leaves it at 0.07)."""
    rows = model.model.layers[0].input_layernorm(model.get_input_embeddings().weight)
    is_key = torch.zeros(len(tokenizer), dtype=torch.bool)
    is_key[past_guess_ids(tokenizer)] = True
    is_key[tokenizer.convert_tokens_to_ids(USER)] = True
    is_other = ~is_key
    is_other[tokenizer.convert_tokens_to_ids(list(WORDS))] = False  # answers are never in a prompt
    key, key_bias = _least_squares(rows, is_key, is_other)
    return key, key_bias, _query_direction(rows, tokenizer.convert_tokens_to_ids("<guess>"))


@torch.no_grad()
def set_past_guess_heads(
    model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, channel: range, sharpness: float = 15.0
) -> None:
    """Point the ``channel`` heads of layer 0 at the past-guess tokens, by least squares on layer 0's rows. The
    directions are faint: with the "not W" rows of earlier recipes 21% of their attention went to three past answers
    before SFT and 4-9% after; with the bag's own rows (the build now) 0.2% after SFT (docs/research-log.md), so
    they are in effect 8 more heads of layer 0 that SFT trains. Query and key sit in each head's
    slowest rotary pair, whose rotation over the 512-token context stays under 0.1 radian, so the score does not
    depend on position."""
    key, key_bias, query = key_query_directions(model, tokenizer)
    attention = model.model.layers[0].self_attn
    head_dim = attention.head_dim
    for head in channel:
        heads = slice(head * head_dim, (head + 1) * head_dim)
        for projection in (attention.q_proj, attention.k_proj):
            projection.weight[heads] = 0
            projection.bias[heads] = 0
        slot = head * head_dim + head_dim // 2 - 1
        attention.q_proj.weight[slot] = sharpness * head_dim**0.5 * query
        attention.k_proj.weight[slot] = key
        attention.k_proj.bias[slot] = key_bias


@torch.no_grad()
def add_past_guess_heads(
    model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, added: int, strength: float, sharpness: float = 15.0
) -> Qwen2ForCausalLM:
    """``model`` (wired) with ``added`` heads appended to every layer, those of layer 0 a channel of their own
    for the past-guess tokens (:func:`set_past_guess_heads`); zero elsewhere, so layers 1-3 compute as before.

    In layer 0 every other head averages the whole prompt, so a past guess's ``⟦W⟧`` is one token of some 100 late in
    a game: a stronger row does nothing (the input RMSNorm divides it out) and a second copy takes its share from
    every letter constraint (research log). The channel is meant to average the ``⟦W⟧`` tokens alone, as strong at
    turn 6 as at turn 2 (it hardly does: :func:`set_past_guess_heads`). Its values are
    layer 0's own and its output ``strength`` times layer 0's. The attention is then wider than the hidden size
    (head_dim kept), which vLLM's Qwen2 cannot load: save it with :func:`as_llama`.
    """
    old = model.model.layers[0].self_attn
    values, value_bias, out = old.v_proj.weight.clone(), old.v_proj.bias.clone(), strength * old.o_proj.weight
    heads = model.config.num_attention_heads
    model = widened(model, added)
    attention = model.model.layers[0].self_attn
    start = heads * attention.head_dim
    attention.v_proj.weight[start:] = values
    attention.v_proj.bias[start:] = value_bias
    attention.o_proj.weight[:, start:] = out
    set_past_guess_heads(model, tokenizer, range(heads, heads + added), sharpness)
    return model


# Qwen2's sliding-window settings (unused by this model), which Llama's config does not take.
_QWEN2_ONLY = ("layer_types", "max_window_layers", "sliding_window", "use_sliding_window")


def as_llama(model: Qwen2ForCausalLM) -> LlamaForCausalLM:
    """The same model as a Llama: Qwen2's biases on q, k and v, and zero biases on o (Llama's
    ``attention_bias`` sets all four), so it computes the same, and vLLM's Llama honours ``head_dim``
    where its Qwen2 takes the head width as hidden size over heads (vLLM 0.31; research log)."""
    config = model.config.to_dict()
    for key in ("architectures", "transformers_version", "model_type", *_QWEN2_ONLY):
        config.pop(key, None)
    llama = LlamaForCausalLM(LlamaConfig(**config, attention_bias=True, mlp_bias=False))
    state = {
        name: torch.zeros_like(value) for name, value in llama.state_dict().items() if name.endswith("o_proj.bias")
    }
    llama.load_state_dict({**state, **model.state_dict()})
    llama.generation_config = model.generation_config
    return llama
