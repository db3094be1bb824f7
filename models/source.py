"""Where a model comes from: the embedded model's directory, a local directory, or a hub id, and its
config.json, read without loading (or downloading) any weights.

Every failure a user can cause here becomes one ``ConfigError`` line that says what to do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, hf_hub_download, try_to_load_from_cache
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, OfflineModeIsEnabled, RepositoryNotFoundError
from huggingface_hub.utils import validate_repo_id

import tinymodel
from settings.arguments import TINY
from settings.errors import ConfigError

# The hub client's network errors: requests' (huggingface_hub < 1) are OSErrors; httpx's (1.x, and
# httpx2 in 2.x) share their base class with HfHubHTTPError, whatever the package is called.
HUB_NETWORK_ERRORS = (OSError, *HfHubHTTPError.__bases__)
# What from_pretrained loads weights from: one file or a sharded index, safetensors or pickle.
_WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "pytorch_model.bin.index.json")


def _looks_like_path(name: str) -> bool:
    # A hub id is "name" or "org/name"; anything else with a separator is meant as a directory.
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or name.endswith("/") or "\\" in name


def model_source(name: str, *, weights: bool = True) -> str:
    """A loadable location for ``name``: the embedded model's directory, a local directory, or a hub id.

    A hub id that is neither cached nor reachable fails here, in seconds, rather than after
    transformers' retries. ``weights=False`` accepts a directory without them (the memory preflight
    needs only config.json: the question "will it fit?" comes before the download).
    """
    if name == TINY:
        try:
            return str(tinymodel.model_dir())
        except tinymodel.MissingModelError as err:
            raise ConfigError(str(err)) from None
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"model directory {path.resolve()} has no config.json (is it a model saved with save_pretrained?)"
            )
        read_config(path / "config.json")
        if weights and not any(next(path.glob(pattern), None) for pattern in _WEIGHT_PATTERNS):
            raise ConfigError(
                f"model directory {path.resolve()} has a config.json but no weights (*.safetensors, *.bin): "
                "an unfinished download or save?"
            )
        return str(path)
    if _looks_like_path(name) or path.exists():
        raise ConfigError(f"model path {path.resolve()} does not exist")
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise ConfigError(f"{name!r} is neither a local directory nor a valid hub id (ORG/NAME)") from None
    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return name  # in the local hub cache: loads offline
    try:
        HfApi().model_info(name, timeout=10)
    except RepositoryNotFoundError:
        raise ConfigError(f"no model {name!r} on the Hugging Face hub, and no local directory of that name") from None
    except OfflineModeIsEnabled:
        raise ConfigError(
            f"{name!r} is not in the local hub cache and HF_HUB_OFFLINE is set; pass a downloaded directory with "
            "--model PATH, or use --model tiny"
        ) from None
    except HUB_NETWORK_ERRORS as exc:
        raise ConfigError(
            f"the Hugging Face hub is unreachable, so {name!r} cannot be downloaded ({type(exc).__name__}); "
            "pass a downloaded directory with --model PATH, or use --model tiny"
        ) from None
    return name


def read_config(path: str | Path) -> dict[str, Any]:
    """A config.json (or adapter_config.json) as a dict; ConfigError naming the file when it is not a JSON object."""
    try:
        config = json.loads(Path(path).read_text())
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file: a damaged download or an unfinished save?") from None
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{path} is not valid JSON ({err.msg}, line {err.lineno}): a damaged download or an unfinished save?"
        ) from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path} holds a JSON {type(config).__name__}, not a config (a JSON object)")
    return config


def model_config(source: str, revision: str | None = None) -> dict[str, Any]:
    """``source``'s config.json: read from its directory, the hub cache, or the hub (a few kB, never weights)."""
    if Path(source).is_dir():
        return read_config(Path(source) / "config.json")
    try:
        return read_config(hf_hub_download(source, "config.json", revision=revision))
    except HUB_NETWORK_ERRORS as exc:
        raise ConfigError(
            f"{source}'s config.json is not in the local hub cache, and the hub is unreachable ({type(exc).__name__}); "
            "pass a directory holding its config.json with --model PATH"
        ) from None
