"""The same knob under another engine's name, for "unknown flag" findings.

``EQUIVALENTS[engine][flag of the other engine]`` is the flag to use on ``engine`` and a note on
what differs. Only pairs that really correspond are listed; the check shows one only when the
flag exists in the version's table.
"""

from __future__ import annotations

from typing import NamedTuple


class Equivalent(NamedTuple):
    flag: str
    note: str = ""


EQUIVALENTS: dict[str, dict[str, Equivalent]] = {
    # SGLang flags typed on vLLM.
    "vllm": {
        "--mem-fraction-static": Equivalent(
            "--gpu-memory-utilization",
            "it is a fraction of the whole GPU memory for everything vLLM allocates, while SGLang's "
            "covers weights and KV cache only; start from 0.9",
        ),
        "--tp-size": Equivalent("--tensor-parallel-size"),
        "--tp": Equivalent("--tensor-parallel-size"),
        "--pp-size": Equivalent("--pipeline-parallel-size"),
        "--dp-size": Equivalent("--data-parallel-size"),
        "--context-length": Equivalent("--max-model-len"),
        "--model-path": Equivalent("--model", "or give the path as the first argument of vllm serve"),
        "--max-running-requests": Equivalent("--max-num-seqs"),
        "--chunked-prefill-size": Equivalent("--max-num-batched-tokens"),
        "--disable-radix-cache": Equivalent("--no-enable-prefix-caching"),
        "--disable-cuda-graph": Equivalent("--enforce-eager"),
        "--speculative-algorithm": Equivalent(
            "--speculative-config", 'as JSON, e.g. \'{"method": "mtp", "num_speculative_tokens": 2}\''
        ),
        "--speculative-algo": Equivalent(
            "--speculative-config", 'as JSON, e.g. \'{"method": "mtp", "num_speculative_tokens": 2}\''
        ),
        "--speculative-num-draft-tokens": Equivalent(
            "--speculative-config", 'with "num_speculative_tokens" in its JSON'
        ),
        "--json-model-override-args": Equivalent("--hf-overrides"),
        "--enable-metrics": Equivalent("", "vLLM always serves /metrics; drop the flag"),
        "--host-ip": Equivalent("--host"),
    },
    # vLLM flags typed on SGLang.
    "sglang": {
        "--gpu-memory-utilization": Equivalent(
            "--mem-fraction-static",
            "it covers weights and KV cache only (activations and CUDA graphs come on top), so use a "
            "lower value than vLLM's, e.g. 0.8",
        ),
        "--max-model-len": Equivalent("--context-length"),
        "--max-num-seqs": Equivalent("--max-running-requests"),
        "--max-num-batched-tokens": Equivalent("--chunked-prefill-size"),
        "--pipeline-parallel-size": Equivalent("--pp-size"),
        "--data-parallel-size": Equivalent("--dp-size"),
        "--no-enable-prefix-caching": Equivalent("--disable-radix-cache"),
        "--enable-prefix-caching": Equivalent("", "SGLang's radix cache is on by default; drop the flag"),
        "--enforce-eager": Equivalent("--disable-cuda-graph"),
        "--enable-auto-tool-choice": Equivalent("", "SGLang needs only --tool-call-parser; drop the flag"),
        "--speculative-config": Equivalent(
            "--speculative-algorithm",
            "e.g. --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4 (MTP models need no draft model path)",
        ),
        "--hf-overrides": Equivalent("--json-model-override-args"),
        "--model": Equivalent("--model-path"),
        "--max-logprobs": Equivalent("", "SGLang has no such limit; drop the flag"),
    },
}
