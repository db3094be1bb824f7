"""The wordle-grpo tiny model's tokenizer: tokenizer.json loaded as it is (see tinymodel/tokenizer.py)."""

from transformers import TokenizersBackend


class WordleTinyTokenizer(TokenizersBackend):
    pass
