"""A model without a chat template, served on the chat route.

vLLM and SGLang render ``/v1/chat/completions`` with the tokenizer's chat template: the
``--chat-template`` given, else ``chat_template.jinja`` / ``chat_template.json``, else
``chat_template`` in tokenizer_config.json. With none, transformers (4.44 and later, which every
vLLM from 0.6 and SGLang from 0.4 install) refuses to guess: "As of transformers v4.44, default
chat template is no longer allowed, so you must provide a chat template if the tokenizer does not
define one", and every chat request fails with 400. The engine starts; the route modelyard serves
and verifies (``verify.chat-answer``) does not work, so the instance never passes verification:
``model.chat-template-missing``, an error here.

It needs the tokenizer files read (``ModelFacts.tokenizer_config`` set): a plan that knows only
config.json says nothing. Pooling models (embeddings, rerankers) have no chat route and are skipped.
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.modeldir import ModelFacts

CHAT_ENGINES = ("vllm", "sglang")
# Flags that make the engine serve pooling (embeddings, scores) instead of generation.
POOLING_FLAGS = {
    "vllm": (("--task", ("embed", "embedding", "classify", "score", "reward")), ("--runner", ("pooling",))),
    "sglang": (("--is-embedding", ()),),
}
POOLING_ARCHITECTURE_ENDINGS = ("Model", "ForSequenceClassification", "ForEmbedding", "ForRewardModel")


def judges_chat_template(engine: str, model: ModelFacts | None) -> bool:
    """Whether this check decides ``model.chat-template-missing`` (in place of the directory check)."""
    return engine in CHAT_ENGINES and model is not None and model.tokenizer_config is not None


def check_chat_template(context: ParameterContext) -> list[Finding]:
    model = context.model
    if model is None or not judges_chat_template(context.engine, model):
        return []
    if model.chat_template.text is not None or context.parameters.value_of("--chat-template"):
        return []
    if _pooling(context):
        return []
    return [
        Finding(
            "model.chat-template-missing",
            Severity.ERROR,
            f"the model has no chat template (none in tokenizer_config.json, no chat_template.jinja) and "
            f"no --chat-template is given: {context.label} starts, but every /v1/chat/completions request "
            'fails ("default chat template is no longer allowed"), so the instance fails verification',
            fix="give --chat-template FILE (the instruct model's template), or copy chat_template.jinja / "
            "tokenizer_config.json from the original instruct model; a base model serves /v1/completions "
            "only (deploy it with skip_verification)",
        )
    ]


def _pooling(context: ParameterContext) -> bool:
    parsed = context.parameters
    for flag, values in POOLING_FLAGS.get(context.engine, ()):
        value = parsed.value_of(flag)
        if value is None:
            continue
        if not values or value.strip().lower() in values:
            return True
    architecture = context.model.architecture if context.model is not None else None
    return bool(architecture and architecture.endswith(POOLING_ARCHITECTURE_ENDINGS))
