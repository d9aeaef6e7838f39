"""Give the client back the deployment name where the engine answered with its own model name.

transformers serve answers with the model path it was started with (``"model":"/data/m"``);
clients sent the deployment name and expect it back. The rewrite is a bytes replace of the
JSON-encoded ``"model": "<served>"`` pair, so no event is parsed for it.
"""

from __future__ import annotations

import json


class ModelNameRewrite:
    """Replaces ``"model":"<served name>"`` with ``"model":"<deployment name>"`` in JSON bytes.

    Usage::

        rewrite = ModelNameRewrite.between("/data/models/demo", "demo")
        if rewrite is not None:
            event = rewrite.apply(event)
    """

    def __init__(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self._pairs = pairs

    @classmethod
    def between(cls, served_model_name: str, deployment_name: str) -> ModelNameRewrite | None:
        """None when the names are equal (vLLM and SGLang with ``--served-model-name``)."""
        if served_model_name == deployment_name:
            return None
        pairs: list[tuple[bytes, bytes]] = []
        # Compact (pydantic) and spaced (json.dumps) separators; raw UTF-8 and \u escapes.
        for ensure_ascii in (False, True):
            served = json.dumps(served_model_name, ensure_ascii=ensure_ascii).encode()
            deployment = json.dumps(deployment_name, ensure_ascii=ensure_ascii).encode()
            for separator in (b":", b": "):
                pair = (b'"model"' + separator + served, b'"model"' + separator + deployment)
                if pair not in pairs:
                    pairs.append(pair)
        return cls(pairs)

    def apply(self, data: bytes) -> bytes:
        for old, new in self._pairs:
            if old in data:
                data = data.replace(old, new)
        return data
