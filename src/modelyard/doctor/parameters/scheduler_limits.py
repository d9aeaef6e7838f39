"""vLLM's scheduler limits against each other, as ``SchedulerConfig`` checks them at start.

vLLM's ``SchedulerConfig`` (``_verify_args``; ``verify_max_model_len`` in later releases) refuses:

- ``max_num_batched_tokens < max_num_seqs``: "max_num_batched_tokens (X) must be greater than or
  equal to max_num_seqs (Y)" (every step schedules at least one token per sequence);
- ``max_num_batched_tokens < max_model_len`` without chunked prefill: "max_num_batched_tokens (X)
  is smaller than max_model_len (Y). This effectively limits the maximum sequence length to
  max_num_batched_tokens and makes vLLM reject longer sequences". Chunked prefill is on by
  default in the V1 engine (0.8 and later); the V0 engine before it turned it on by itself only
  above 32K tokens of context.

Both are ``param.batched-tokens-too-small``, an error. They fire only on values the plan gives (a
default that depends on the GPU and release is not guessed); the context is ``--max-model-len`` or
the model's own length.
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.errors import InvalidInput
from modelyard.estimate.config_overrides import context_length_of, overridden_text_config
from modelyard.estimate.versions import version_before

BATCHED = "--max-num-batched-tokens"
# V1, chunked prefill on by default, from vLLM 0.8.0; V0 chunked above 32K tokens of context.
V1_DEFAULT_SINCE = "0.8.0"
V0_LONG_CONTEXT_TOKENS = 32 * 1024


def check_scheduler_limits(context: ParameterContext) -> list[Finding]:
    if context.engine != "vllm":
        return []
    parsed = context.parameters
    try:
        batched = parsed.integer(BATCHED)
        sequences = parsed.integer("--max-num-seqs")
        length = parsed.integer("--max-model-len")
    except InvalidInput:
        return []  # param.invalid-number names it
    if batched is None:
        return []
    findings: list[Finding] = []
    if sequences is not None and batched < sequences:
        findings.append(
            Finding(
                "param.batched-tokens-too-small",
                Severity.ERROR,
                f"{BATCHED} {batched:,} is smaller than --max-num-seqs {sequences:,}; {context.label} "
                f'refuses it ("max_num_batched_tokens ({batched}) must be greater than or equal to '
                f'max_num_seqs ({sequences})")',
                fix=f"raise {BATCHED} to at least {sequences:,}, or lower --max-num-seqs to {batched:,}",
                details={"max_num_batched_tokens": batched, "max_num_seqs": sequences},
            )
        )
    if length is None and context.model is not None:
        derived = context_length_of(overridden_text_config(context.model.text_config, "vllm", parsed))
        length = derived[0] if derived else None
    if length is not None and batched < length and not _chunked_prefill(context, length):
        findings.append(
            Finding(
                "param.batched-tokens-too-small",
                Severity.ERROR,
                f"{BATCHED} {batched:,} is smaller than the context of {length:,} tokens and chunked "
                f'prefill is off; {context.label} refuses it ("max_num_batched_tokens ({batched}) is '
                f'smaller than max_model_len ({length})")',
                fix=f"raise {BATCHED} to {length:,}, lower --max-model-len to {batched:,}, or add "
                "--enable-chunked-prefill",
                details={"max_num_batched_tokens": batched, "max_model_len": length},
            )
        )
    return findings


def _chunked_prefill(context: ParameterContext, length: int) -> bool:
    given = context.parameters.switch("--enable-chunked-prefill")
    if given is not None:
        return given
    # vLLM's boolean flags take a --no- form (argparse BooleanOptionalAction); without a flag table
    # (no version given) the parser sees it as a flag of its own.
    if context.parameters.find("--no-enable-chunked-prefill") is not None:
        return False
    if context.version and version_before(context.version, V1_DEFAULT_SINCE):
        return length > V0_LONG_CONTEXT_TOKENS
    return True
