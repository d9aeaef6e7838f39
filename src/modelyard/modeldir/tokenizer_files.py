"""The non-weight files of a model directory: tokenizer, chat template, generation config.

Each reader returns what it found and never raises for a missing or unreadable file; the caller
decides whether absence is an error. Unreadable files come back as problems (strings naming the
file and what is wrong).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Any one of these makes a tokenizer; pairs must both be present.
TOKENIZER_SINGLE_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.txt", "tiktoken.model")
TOKENIZER_FILE_PAIRS = (("vocab.json", "merges.txt"),)


@dataclass
class JsonRead:
    """A JSON file's content (``None`` when absent), and why it could not be read, if so."""

    content: dict[str, Any] | None = None
    problem: str | None = None


# A model's JSON files are read whole: config.json and its kin are kilobytes, tokenizer.json tens
# of megabytes. Larger is not such a file (and reading it would hold the server's memory).
MAXIMUM_JSON_FILE_BYTES = 16 * 1024 * 1024
MAXIMUM_TOKENIZER_JSON_BYTES = 256 * 1024 * 1024


def read_json_file(path: Path, max_bytes: int = MAXIMUM_JSON_FILE_BYTES) -> JsonRead:
    if not path.is_file():
        return JsonRead()
    try:
        size = path.stat().st_size
        if size > max_bytes:
            return JsonRead(
                problem=f"{path.name} is {size / 2**20:.0f} MiB; such a file is at most "
                f"{max_bytes // 2**20} MiB: is it the right file?"
            )
        content = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        return JsonRead(problem=f"{path.name} cannot be read ({error.strerror}); check its permissions")
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        return JsonRead(
            problem=f"{path.name} is not valid JSON ({error}); re-copy it from the original model"
        )
    if not isinstance(content, dict):
        return JsonRead(problem=f"{path.name} holds a {type(content).__name__}, not a JSON object")
    return JsonRead(content=content)


def find_tokenizer_files(directory: Path) -> list[str]:
    """The tokenizer files present, relative names; empty when the directory has no tokenizer."""
    found = [name for name in TOKENIZER_SINGLE_FILES if (directory / name).is_file()]
    for pair in TOKENIZER_FILE_PAIRS:
        if all((directory / name).is_file() for name in pair):
            found.extend(pair)
    found.extend(sorted(path.name for path in directory.glob("*.tiktoken") if path.is_file()))
    return found


@dataclass
class ChatTemplate:
    text: str | None = None
    # Which file it came from: "chat_template.jinja", "tokenizer_config.json", "chat_template.json".
    source: str | None = None

    @property
    def supports_tools(self) -> bool:
        return self.text is not None and "tools" in self.text

    @property
    def supports_thinking(self) -> bool:
        return self.text is not None and ("<think>" in self.text or "enable_thinking" in self.text)


def _template_from_value(value: object) -> str | None:
    """``chat_template`` is a string, or a list of ``{"name", "template"}`` (the ``default`` wins)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {str(item.get("name")): item.get("template") for item in value if isinstance(item, dict)}
        chosen = named.get("default") or next(iter(named.values()), None)
        return chosen if isinstance(chosen, str) else None
    return None


def find_chat_template(directory: Path, tokenizer_config: dict[str, Any] | None) -> ChatTemplate:
    """The chat template the engines would use: ``chat_template.jinja`` first (transformers 5's
    file), then ``tokenizer_config.json``'s ``chat_template``, then ``chat_template.json``."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        try:
            return ChatTemplate(text=jinja.read_text(encoding="utf-8"), source=jinja.name)
        except (OSError, UnicodeDecodeError):
            pass
    if tokenizer_config is not None:
        text = _template_from_value(tokenizer_config.get("chat_template"))
        if text:
            return ChatTemplate(text=text, source="tokenizer_config.json")
    chat_json = read_json_file(directory / "chat_template.json")
    if chat_json.content is not None:
        text = _template_from_value(chat_json.content.get("chat_template"))
        if text:
            return ChatTemplate(text=text, source="chat_template.json")
    return ChatTemplate()


def token_ids(value: object) -> list[int]:
    """``eos_token_id`` is an int, a list of ints, or absent."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, int) and not isinstance(item, bool)]
    return []


@dataclass
class TokenizerVocabulary:
    """The special (added) tokens by id, and the vocabulary size when tokenizer.json says it."""

    added_tokens: dict[int, str] = field(default_factory=dict)
    vocabulary_size: int | None = None


def read_tokenizer_vocabulary(
    tokenizer_json: dict[str, Any] | None, tokenizer_config: dict[str, Any] | None
) -> TokenizerVocabulary:
    """Added tokens from tokenizer.json and tokenizer_config.json's ``added_tokens_decoder``."""
    added: dict[int, str] = {}
    size: int | None = None
    if tokenizer_json is not None:
        for entry in tokenizer_json.get("added_tokens") or []:
            if isinstance(entry, dict) and isinstance(entry.get("id"), int):
                added[int(entry["id"])] = str(entry.get("content", ""))
        model = tokenizer_json.get("model") or {}
        vocab = model.get("vocab") if isinstance(model, dict) else None
        if isinstance(vocab, dict | list):
            size = len(vocab)
    if tokenizer_config is not None:
        decoder = tokenizer_config.get("added_tokens_decoder") or {}
        if isinstance(decoder, dict):
            for key, entry in decoder.items():
                if str(key).isdigit() and isinstance(entry, dict):
                    added.setdefault(int(key), str(entry.get("content", "")))
    if size is not None and added:
        size = max(size, max(added) + 1)
    return TokenizerVocabulary(added_tokens=dict(sorted(added.items())), vocabulary_size=size)
