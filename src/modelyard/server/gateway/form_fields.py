"""The few fields the gateway needs from a ``multipart/form-data`` body (``/v1/audio/*``).

Audio routes take a form: the file, ``model``, and options such as ``stream``. The gateway reads
``model`` (to route) and ``stream``, and, when the engine answers to another name, replaces the
bytes of the ``model`` value in place; the file is never copied out or re-encoded. Parsing is
python-multipart's (the parser Starlette uses).

Usage::

    form = read_form_fields(body, content_type)
    form.values["model"]                      # "whisper"
    body = form.with_value(body, "model", "/models/whisper-large")
"""

from __future__ import annotations

from dataclasses import dataclass, field

from python_multipart.multipart import MultipartParser, parse_options_header

from modelyard.server.gateway.errors import InvalidJsonBody

# Only these fields are read (and only their first 4 KiB); file parts are skipped.
_WANTED = frozenset({"model", "stream"})
_MAX_VALUE_BYTES = 4096


@dataclass
class FormFields:
    values: dict[str, str] = field(default_factory=dict)
    # Where each wanted value lies in the body: (start, end) byte offsets.
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)

    def with_value(self, body: bytes, name: str, value: str) -> bytes:
        """``body`` with field ``name``'s value replaced (the rest byte for byte)."""
        start, end = self.spans[name]
        return body[:start] + value.encode() + body[end:]


def read_form_fields(body: bytes, content_type: bytes | None) -> FormFields:
    """The ``model`` and ``stream`` fields of a form body; ``InvalidJsonBody`` when it is no form."""
    kind, options = parse_options_header(content_type or b"")
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        given = (content_type or b"none").decode("latin-1")
        raise InvalidJsonBody(
            f"this route takes a multipart/form-data body, got {given!r}",
            hint="send the audio file and 'model' as form fields (the OpenAI SDKs do)",
        )
    form = FormFields()
    current: dict[str, object] = {}
    header_field = bytearray()
    header_value = bytearray()

    def on_part_begin() -> None:
        current.clear()

    def on_header_field(data: bytes, start: int, end: int) -> None:
        header_field.extend(data[start:end])

    def on_header_value(data: bytes, start: int, end: int) -> None:
        header_value.extend(data[start:end])

    def on_header_end() -> None:
        if bytes(header_field).lower() == b"content-disposition":
            _, disposition = parse_options_header(bytes(header_value))
            name = disposition.get(b"name", b"").decode("utf-8", errors="replace")
            if name in _WANTED and b"filename" not in disposition:
                current["name"] = name
        header_field.clear()
        header_value.clear()

    def on_part_data(data: bytes, start: int, end: int) -> None:
        name = current.get("name")
        if not isinstance(name, str):
            return
        span = current.get("span")
        current["span"] = (start, end) if not isinstance(span, tuple) else (span[0], end)

    def on_part_end() -> None:
        name = current.get("name")
        span = current.get("span")
        if isinstance(name, str) and name not in form.values:
            start, end = span if isinstance(span, tuple) else (0, 0)
            if end - start <= _MAX_VALUE_BYTES:
                form.values[name] = body[start:end].decode("utf-8", errors="replace")
                form.spans[name] = (start, end)

    parser = MultipartParser(
        boundary,
        callbacks={
            "on_part_begin": on_part_begin,
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
        },
    )
    try:
        parser.write(body)
        parser.finalize()
    except ValueError as error:  # python-multipart's parse errors are ValueErrors
        raise InvalidJsonBody(
            f"the form body could not be read ({error})", hint="send a valid multipart/form-data body"
        ) from error
    return form
