"""What the audit log keeps of a change's details: never a secret, everything else as it came."""

from __future__ import annotations

from modelyard.secret_names import MASK
from modelyard.services.audit import scrubbed


def test_secrets_are_masked_env_values_dropped_and_counts_kept() -> None:
    details = {
        "password": "hunter2-hunter2",
        "key": "my-3f9a1c0d",
        "hf_token": "hf_abc",
        "env": {"HF_TOKEN": "hf_abc", "OMP_NUM_THREADS": "4"},
        "backend_parameters": ["--api-key", "sk-1", "--max-model-len", "4096"],
        "limits": {"token_quota": 5000, "tokens_per_minute": None},
        "replicas": 2,
    }
    assert scrubbed(details) == {
        "password": MASK,
        "key": MASK,
        "hf_token": MASK,
        "env_names": ["HF_TOKEN", "OMP_NUM_THREADS"],
        "backend_parameters": ["--api-key", MASK, "--max-model-len", "4096"],
        "limits": {"token_quota": 5000, "tokens_per_minute": None},
        "replicas": 2,
    }
