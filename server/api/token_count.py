"""Token counts for the OpenAI-compatible endpoint's `usage`, with tiktoken's o200k_base encoding.

tiktoken downloads its BPE files on first use unless they are in its cache directory. litellm (a
dependency already, for the LLM grader) ships the o200k_base and cl100k_base files in that layout,
so the encoding is loaded from there and nothing is fetched at run time (docs/llm.md, "Usage").
Without the files the counts fall back to an estimate (4 characters a token), never to a download."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
from collections.abc import Iterable
from functools import lru_cache

import tiktoken

log = logging.getLogger(__name__)

ENCODINGS = ("o200k_base", "cl100k_base")  # o200k first: the convention of current models
_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
# OpenAI's accounting for chat messages: each message costs a few tokens besides its text, and
# every reply is primed with three (the cookbook's "tokens_per_message" / reply priming).
TOKENS_PER_MESSAGE = 3
REPLY_PRIMING = 3


def bundled_dir() -> str | None:
    """litellm's copy of tiktoken's cache: files named by the sha1 of the encoding's URL.
    Found without importing litellm (its import is slow and reaches for the network)."""
    spec = importlib.util.find_spec("litellm")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(root, "litellm_core_utils", "tokenizers")
        if os.path.isdir(path):
            return path
    return None


def _cached(directory: str, name: str) -> bool:
    key = hashlib.sha1(_URL.format(name).encode()).hexdigest()
    return os.path.isfile(os.path.join(directory, key))


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding | None:
    """The first encoding whose file is on disk; tiktoken checks the file's sha256 itself."""
    directory = os.environ.get("TIKTOKEN_CACHE_DIR") or bundled_dir()
    if directory is None:
        log.warning("no tiktoken encoding files found; token counts are estimates")
        return None
    # tiktoken reads its cache directory from the environment; litellm sets the same on import.
    os.environ["TIKTOKEN_CACHE_DIR"] = directory
    for name in ENCODINGS:
        if _cached(directory, name):
            return tiktoken.get_encoding(name)
    log.warning("no tiktoken encoding files in %s; token counts are estimates", directory)
    return None


def count(text: str) -> int:
    enc = encoding()
    if enc is None:
        return (len(text) + 3) // 4
    return len(enc.encode_ordinary(text))


def prompt_tokens(messages: Iterable[tuple[str, str]]) -> int:
    return REPLY_PRIMING + sum(TOKENS_PER_MESSAGE + count(r) + count(t) for r, t in messages)


def truncate(text: str, max_tokens: int) -> tuple[str, int, bool]:
    """`text` cut to `max_tokens` tokens: (text, its token count, whether it was cut)."""
    enc = encoding()
    if enc is None:
        limit = max_tokens * 4
        return text[:limit], min(count(text), max_tokens), len(text) > limit
    tokens = enc.encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text, len(tokens), False
    # A cut can split a character's bytes: drop the broken tail rather than show U+FFFD.
    cut = enc.decode_bytes(tokens[:max_tokens]).decode("utf-8", errors="ignore")
    return cut, max_tokens, True
