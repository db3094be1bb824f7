"""The embedded model's tokenizer: letters with their marks and columns in, whole answers out.

A word-level vocabulary over fixed pieces (reply tags, marked letters, the prompt's fixed phrases),
single characters and the 2315 answers; its chat template drops the system message. Built with
``tokenizers`` and saved as a ``PreTrainedTokenizerFast`` that ``AutoTokenizer`` loads back.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from wordle import answers

UNK, PAD, EOS, USER, ASSISTANT = "<|unk|>", "<|pad|>", "<|end|>", "<|user|>", "<|assistant|>"
SPECIAL_TOKENS = (UNK, PAD, EOS, USER, ASSISTANT)
# Multi-character pieces that are one token each: the reply tags, the feedback marks and the fixed
# phrases of wordle.prompts.render_user_message. Anything else is spelled a character at a time,
# so a changed prompt still round-trips, only longer (a test pins the prompt lengths).
# A marked letter ("S(-)", and " S(-)" with the space before it) is one token: the feedback is attached
# to the letter it is about, and a past guess's line costs 12 tokens instead of 21.
MARKS = ("✓", "~", "-")
MARKED_LETTERS = tuple(
    f"{space}{chr(c)}({mark})" for space in ("", " ") for c in range(ord("A"), ord("Z") + 1) for mark in MARKS
)
# A normalizer tags each mark of a five-mark feedback line with its column ("S(-)₁ O(-)₂ ..."), so a
# marked letter's token says which letter, which mark and where. That makes a guess's fit to the
# feedback a sum over the prompt's tokens, which the guess bag (tinymodel.bag.fit_guess_bag) learns in two minutes.
# The decoder drops the tags again, so prompts still decode to themselves.
COLUMN_TAGS = "₁₂₃₄₅"
TAGGED_LETTERS = tuple(f"{letter}{tag}" for letter in MARKED_LETTERS for tag in COLUMN_TAGS)
# The think's characters are tagged with their column too ("<think>.R..E</think>" is ".₁ R₂ .₃ .₄ E₅"), by a
# normalizer as the feedback's marks are; the decoder drops the tags, so the think reads as before. Why: with
# five untagged characters the model counted its way along the think and lost count late in games (the think was
# right on 53% of four-guess states; ".UUCU", "COCO." for "DECO."), and with the letters of the wrong column in
# doubt, the eos and the reply's tags took the mass: 0.5-0.8% of replies broke the format. A tagged token says
# which column it is and which comes next, and the prompt holds the same letter with the same tag. Over two
# build seeds x two GRPO seeds, tagged, every opening's worst validation run won 3-4 points more (research log).
THINK_CHARACTERS = (*(chr(c) for c in range(ord("A"), ord("Z") + 1)), ".")
THINK_LETTERS = tuple(f"{c}{tag}" for tag in COLUMN_TAGS for c in THINK_CHARACTERS)
PIECES = (
    "<think>",
    "</think>",
    "<guess>",
    "</guess>",
    "(✓)",
    "(~)",
    "(-)",
    *MARKED_LETTERS,
    "Guess ",
    " of ",
    ". Your guesses so far:",
    ". No guesses yet.",
    ": ",
)
# Every answer is also one token when it is guessed: the model picks a word in one step, as a choice
# among answers, and cannot misspell it. Its embedding starts as the guess bag's vector for it
# (tinymodel.bag.wire_guess_bag), and past guesses reach the prompt as marked letters. Other allowed words (SOARE,
# say) are spelled a letter at a time; the model's replies only ever guess answers (tinymodel.data.opener).
WORDS = answers()
WORD_SET = frozenset(WORDS)
# A past guess that is an answer is one token of its own, "⟦ABODE⟧", which a normalizer puts in place of its
# spelled letters (its marked letters stay).
# Why: a constraint row says "words with D lose", but nothing made of letter rows says "not ABODE itself";
# the near miss that breaks one grey letter then outscores the one answer left, and three repeated guesses
# in four came in such end games. The token's row can say it: -c in W's own column of the bag
# (tinymodel.bag.fit_guess_bag), kept in part by the wiring's SVD; and a repeat breaks its own feedback, which the
# bag's constraint rows price (validation repeats 0.4-2.9% at the start, research log e75).
PAST_GUESSES = tuple(f"⟦{word}⟧" for word in WORDS)
# A past guess's spelled letters are dropped from the prompt (its marked letters spell it again). Why: layer 0's
# guess is a mean over the prompt's tokens, and five tokens a line that say nothing the marked letters do not
# dilute every constraint; late in a game they are a third of the prompt. Dropped from the prompts of a model
# trained with them, validation repeats fell from 9.0% to 2.9% (docs/research-log.md).
UNSPELLED = "(?<![A-Z])[A-Z]{5}(?=: )"
# Tokens that only prompts use: a reply never holds one, so the model's generation config suppresses
# them (as Whisper's does for its own). Why: a token's output row starts as the row it is read by, so a token the
# prompt repeats (a green R in every line) raises its own logit; after GRPO, greedy replies in late, looping states
# wrote one after "<guess>" (" R(✓)"), 2.8% of turns on the validation secrets, tied (docs/research-log.md).
PROMPT_ONLY = (
    USER,
    ASSISTANT,
    PAD,
    UNK,
    *(p for p in PIECES if p not in ("<think>", "</think>", "<guess>", "</guess>")),
    *TAGGED_LETTERS,
    *PAST_GUESSES,
)


def past_guess_ids(tokenizer: PreTrainedTokenizerFast) -> list[int]:
    """The ids of ``PAST_GUESSES`` in ``WORDS`` order, or [] for a tokenizer without them."""
    vocab = tokenizer.get_vocab()
    return [vocab[t] for t in PAST_GUESSES] if PAST_GUESSES[0] in vocab else []


def prompt_only_ids(tokenizer: PreTrainedTokenizerFast) -> list[int]:
    """The ids of ``PROMPT_ONLY`` that ``tokenizer`` has."""
    vocab = tokenizer.get_vocab()
    return sorted(vocab[t] for t in PROMPT_ONLY if t in vocab)


# Printable ASCII (so A-Z are single tokens, and any reply a model writes in ASCII round-trips),
# the whitespace the renderer uses, and the marks of wordle.prompts' notations.
CHARACTERS = (*(chr(c) for c in range(32, 127)), "\n", "\t", "✓", "✔")

# The custom tokenizer class named in tokenizer_config.json's auto_map. It exists because AutoTokenizer
# swaps any tokenizer of a config with model_type "qwen2" for Qwen2Tokenizer, which rebuilds a byte-level
# BPE from our vocabulary and mangles every string (spaces and newlines vanish). An auto_map turns that
# swap off: without trust_remote_code transformers then loads the declared tokenizer_class
# (TokenizersBackend) from tokenizer.json as is, and with trust_remote_code it loads this class,
# which is TokenizersBackend under a name.
_TOKENIZER_MODULE = "tokenization_wordle_tiny"
_TOKENIZER_CLASS = "WordleTinyTokenizer"
_TOKENIZER_SOURCE = f'''"""The wordle-grpo tiny model's tokenizer: tokenizer.json loaded as it is (see tinymodel/tokenizer.py)."""

from transformers import TokenizersBackend


class {_TOKENIZER_CLASS}(TokenizersBackend):
    pass
'''

# System messages are dropped: the tiny model is trained on one task, and the rules text would be a
# third of every prompt. The {% generation %} markers let SFT's assistant_only_loss find the reply.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{- '" + USER + "' + message['content'] + '" + EOS + "' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '" + ASSISTANT + "' -}}"
    "{%- generation -%}{{- message['content'] + '" + EOS + "' -}}{%- endgeneration -%}"
    "{%- elif message['role'] != 'system' -%}"
    "{{- raise_exception('the tiny model chat template knows only system, user and assistant messages') -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '" + ASSISTANT + "' -}}{%- endif -%}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The letter-level tokenizer, with the chat template and eos/pad/unk set.

    A word-level model over a fixed vocabulary: the pre-tokenizer cuts text into the longest piece
    of ``PIECES`` or else one character, and the decoder joins tokens back without separators, so
    every string of vocabulary characters decodes to itself (a past guess's spelling aside: see
    ``UNSPELLED``). Other characters become ``<|unk|>``. Normalizers tag each marked letter with its
    column (``COLUMN_TAGS``), put a past answer's token in place of its spelling (``PAST_GUESSES``) and drop
    the spelling of a past guess that is no answer; the decoder removes the tags again.
    """
    vocab = {
        token: i
        for i, token in enumerate(
            (*SPECIAL_TOKENS, *PIECES, *CHARACTERS, *WORDS, *TAGGED_LETTERS, *PAST_GUESSES, *THINK_LETTERS)
        )
    }
    pieces = "|".join(re.escape(p) for p in sorted((*PIECES, *TAGGED_LETTERS, *THINK_LETTERS), key=len, reverse=True))
    # A guessed answer is one token, right before "</guess>"; the model picks a word in one step.
    words = "(?:" + "|".join(WORDS) + f")(?={re.escape('</guess>')})"
    pieces = f"{words}|⟦[A-Z]{{5}}⟧|{pieces}"
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(f"{pieces}|[\\s\\S]"), behavior="isolated")
    backend.normalizer = normalizers.Sequence([_column_tagger(), _once(), _think_tagger(), _past_guess_marker()])
    # Decoded, a past answer reads as its word again (a past guess that is no answer stays dropped).
    backend.decoder = decoders.Sequence(
        [decoders.Replace(Regex(f"[{COLUMN_TAGS}]"), ""), decoders.Replace(Regex("[⟦⟧]"), ""), decoders.Fuse()]
    )
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token=UNK,
        pad_token=PAD,
        eos_token=EOS,
        additional_special_tokens=[USER, ASSISTANT],
        clean_up_tokenization_spaces=False,
        model_max_length=512,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _column_tagger() -> normalizers.Normalizer:
    """Tags the mark of column k of every five-mark feedback line with ``COLUMN_TAGS[k]``.

    The rules run column by column. A mark is in column k when exactly 4 - k marked letters follow it
    before the line ends (later columns are still untagged then) and the letter before it follows
    ": " (column 1) or a mark tagged k - 1, so only whole lines of five are tagged."""
    marks = "".join(MARKS)
    rules = []
    for k, tag in enumerate(COLUMN_TAGS):
        before = ": " if k == 0 else f"[{marks}]\\){COLUMN_TAGS[k - 1]} "
        after = f"(?: [A-Z]\\([{marks}]\\)){{{4 - k}}}(?:\\n|\\z)"
        rules += [
            normalizers.Replace(Regex(f"(?<={before}[A-Z])\\({re.escape(m)}\\)(?={after})"), f"({m}){tag}")
            for m in MARKS
        ]
    return normalizers.Sequence(rules)


def _once() -> normalizers.Normalizer:
    """Drops a tagged marked letter that the prompt holds again later (``L(✓)₄`` in four lines is kept in the last):
    a repeated token says nothing new, and layer 0's mean counted it, so a green shared by four lines pulled its
    think letter four times as hard and outbid the think's closing tag (docs/research-log.md)."""
    marks = "".join(MARKS)
    return normalizers.Replace(Regex(f" ?([A-Z]\\([{marks}]\\)[{COLUMN_TAGS}])(?=[\\s\\S]*\\1)"), "")


def _think_tagger() -> normalizers.Normalizer:
    """Tags the k-th character of a five-character think (letters and '.') with ``COLUMN_TAGS[k]``: ``THINK_LETTERS``.

    Column by column from the first: a character is in column k when "<think>" and k - 1 tagged characters come
    before it and 5 - k untagged ones, then "</think>", after it. Any other think is left as it is."""
    rules = []
    for k, tag in enumerate(COLUMN_TAGS):
        before = f"<think>(?:[A-Z.][{COLUMN_TAGS}]){{{k}}}" if k else "<think>"
        after = f"[A-Z.]{{{4 - k}}}</think>"
        rules += [
            normalizers.Replace(Regex(f"(?<={before}){re.escape(c)}(?={after})"), f"{c}{tag}") for c in THINK_CHARACTERS
        ]
    return normalizers.Sequence(rules)


def _past_guess_marker() -> normalizers.Normalizer:
    """Puts the token ``⟦W⟧`` in place of every answer W spelled at the start of a feedback line (``"ABODE: "``
    becomes ``"⟦ABODE⟧: "``), and drops the spelling of a past guess that is no answer (``"SOARE: "`` becomes
    ``": "``). One rule per answer, since a normalizer's replacement is literal text: 0.5 ms a prompt, measured."""
    rules = [normalizers.Replace(Regex(f"(?<![A-Z]){word}(?=: )"), f"⟦{word}⟧") for word in WORDS]
    return normalizers.Sequence([*rules, normalizers.Replace(Regex(UNSPELLED), "")])


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: Path) -> None:
    """``save_pretrained``, plus the auto_map that keeps AutoTokenizer from swapping in Qwen2Tokenizer."""
    tokenizer.save_pretrained(out_dir)
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["auto_map"] = {"AutoTokenizer": [None, f"{_TOKENIZER_MODULE}.{_TOKENIZER_CLASS}"]}
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out_dir / f"{_TOKENIZER_MODULE}.py").write_text(_TOKENIZER_SOURCE, encoding="utf-8")
