"""DOUBLES of the model hubs for tests (no hub is reachable here): the Hugging Face Hub (and its
CDN) and ModelScope's file API, each a real HTTP server on loopback serving a real model directory,
recording every request and injecting the faults a flaky hub has (``faults.py``).

Usage::

    repository = RepositoryDouble.from_directory("modelyard-test/tiny", build_sharded_model(path))
    with HuggingFaceHubDouble([repository]) as hub:
        ...  # HF_ENDPOINT=hub.endpoint
        hub.log.for_file("model-00001-of-00002.safetensors")[-1].range
"""

from modelyard.testing.hub_doubles.faults import Faults, Hold
from modelyard.testing.hub_doubles.huggingface import HuggingFaceHubDouble
from modelyard.testing.hub_doubles.modelscope import ModelScopeDouble
from modelyard.testing.hub_doubles.repository import RepositoryDouble, ServedFile
from modelyard.testing.hub_doubles.serving import RecordedRequest, RequestLog

__all__ = [
    "Faults",
    "Hold",
    "HuggingFaceHubDouble",
    "ModelScopeDouble",
    "RecordedRequest",
    "RepositoryDouble",
    "RequestLog",
    "ServedFile",
]
