"""A model path that is a Hugging Face cache repository folder (``model.hub-cache-repo-folder``).

The hub cache keeps a repository as ``<cache>/hub/models--<org>--<name>/`` with ``blobs/``,
``refs/`` and ``snapshots/<revision>/``; the model's files (config.json, the shards, the tokenizer)
are only under ``snapshots/<revision>/``. Given the repository folder itself, neither engine finds
a config.json there: vLLM (``vllm/transformers_utils/config.py``: ``file_or_path_exists`` of
config.json) and SGLang (transformers' ``AutoConfig.from_pretrained``) then take the path for a
hub id, and huggingface_hub refuses it ("Repo id must be in the form 'repo_name' or
'namespace/repo_name'"), or transformers says the directory "does not appear to have a file named
config.json". Both stop at start on every release: an error.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.hub_paths import hub_cache_repository
from modelyard.doctor.parameters.context import ParameterContext

PATH_ENGINES = ("vllm", "sglang")


def check_model_path(context: ParameterContext) -> list[Finding]:
    if context.engine not in PATH_ENGINES or not context.model_argument:
        return []
    path = context.model_argument.rstrip("/")
    repository = hub_cache_repository(path)
    if repository is None:
        return []
    cache = PurePosixPath(path).parent
    home = cache.parent if cache.name == "hub" else cache
    return [
        Finding(
            "model.hub-cache-repo-folder",
            Severity.ERROR,
            f"{path} is a Hugging Face cache repository folder: the model's files are under its "
            f"snapshots/<revision>/, so it has no config.json of its own; {context.label} then takes the "
            "path for a hub id and huggingface_hub refuses it (\"Repo id must be in the form 'repo_name' or "
            "'namespace/repo_name'\")",
            fix=f"give the snapshot folder ({path}/snapshots/<revision>, `ls {path}/snapshots`), or the "
            f"repo id {repository} with HF_HOME={home} (and HF_HUB_OFFLINE=1 to stay off the network)",
            details={"path": path, "repository": repository},
        )
    ]
