"""The memory estimator: weights, KV cache and engine overheads per GPU, from config.json and
safetensors headers only (no weights loaded, no model class needed).

Usage::

    from modelyard.estimate import estimate_memory, parse_gpu_specs
    from modelyard.modeldir import read_model_facts

    facts = read_model_facts(Path("/models/Qwen3-32B"))
    estimate = estimate_memory(facts, "vllm", parse_gpu_specs("2x48GB"), ["--tensor-parallel-size 2"])

Its verdict as findings is ``modelyard.doctor.memory.memory_findings``.
"""

from modelyard.estimate.engine_arguments import EngineArguments, parse_engine_arguments
from modelyard.estimate.estimate_result import MemoryEstimate, MemoryPlan
from modelyard.estimate.gpus import GpuSpec, gpu_specs_from_inventory, parse_gpu_specs
from modelyard.estimate.memory import estimate_memory, kv_tokens_from_bytes

__all__ = [
    "EngineArguments",
    "GpuSpec",
    "MemoryEstimate",
    "MemoryPlan",
    "estimate_memory",
    "gpu_specs_from_inventory",
    "kv_tokens_from_bytes",
    "parse_engine_arguments",
    "parse_gpu_specs",
]
