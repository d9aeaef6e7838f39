"""Checks of the flags against the model: parsers for its family, MTP layers, the served name.

Ids: ``param.tool-call-parser-mismatch``, ``param.reasoning-parser-mismatch``,
``param.mtp-without-layers``, ``param.served-model-name``.

The family comes from config.json (``model_type``, ``architectures``) and the chat template:
Qwen3.5/3.6 templates write tool calls as XML (``<function=name><parameter=...>``), which only
the ``qwen3_coder`` parser (vLLM also ``qwen3_xml``) reads; ``hermes`` reads the JSON inside
``<tool_call>`` that Qwen2.5/Qwen3 write.

Templates that open the thinking in the prompt (the generation prompt ends with ``<think>\n``:
Qwen3.5/3.6, the Qwen3 ``-Thinking-2507`` models) leave the model's output with ``</think>`` only.
vLLM's ``qwen3`` reasoning parser before 0.17.0 returns an output without both tags as content
(``vllm/reasoning/qwen3_reasoning_parser.py``, read in 0.10.0, 0.15.0 and 0.16.0); from 0.17.0 it
strips a ``<think>`` if present and splits at ``</think>``. Such a template with ``qwen3`` on an
older release is ``param.reasoning-parser-mismatch``, a warning: the engine serves, the reasoning
lands in ``content``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.estimate.versions import version_before
from modelyard.modeldir import ModelFacts

QWEN35_MODEL_TYPES = {"qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"}
XML_TOOL_PARSERS = {"qwen3_coder", "qwen3_xml"}
JSON_TOOL_PARSERS = {"hermes", "qwen25", "qwen"}
THINK_REASONING_PARSERS = {"qwen3", "qwen3-thinking", "deepseek_r1", "deepseek-r1"}
MTP_LAYER_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")
# The release whose qwen3 reasoning parser reads thinking the chat template opened in the prompt.
QWEN3_PARSER_READS_OPENED_THINKING = "0.17.0"
# In the generation prompt, a string that ends right after an opening <think> (Qwen3.5/3.6's
# '<think>\n', Thinking-2507's 'assistant\n<think>\n'); a closed '<think>\n\n</think>' (thinking
# switched off) does not open one.
_OPENS_THINKING = re.compile(r"<think>(?:\\n|\n)?['\"]")


def is_qwen35_family(model: ModelFacts) -> bool:
    model_type = (model.model_type or "").lower()
    text_type = str(model.text_config.get("model_type", "")).lower()
    architecture = model.architecture or ""
    return (
        model_type in QWEN35_MODEL_TYPES
        or text_type in QWEN35_MODEL_TYPES
        or architecture.startswith("Qwen3_5")
    )


def opens_thinking_in_prompt(model: ModelFacts) -> bool:
    """Whether the chat template's generation prompt opens the thinking block (Qwen3.5/3.6 do)."""
    template = model.chat_template.text
    if template is not None:
        prompt = template.rsplit("add_generation_prompt", 1)
        return len(prompt) == 2 and bool(_OPENS_THINKING.search(prompt[1]))
    return is_qwen35_family(model)


def tool_call_format(model: ModelFacts) -> str | None:
    """``xml`` (Qwen3.5/3.6, Qwen3-Coder), ``json`` (Hermes-style ``<tool_call>`` JSON), else None."""
    template = model.chat_template.text or ""
    if "<function=" in template and "<parameter=" in template:
        return "xml"
    if "<tool_call>" in template:
        return "json"
    if is_qwen35_family(model):
        return "xml"
    return None


def _model_name(model: ModelFacts) -> str:
    return model.architecture or model.model_type or model.directory.name


def check_parsers(context: ParameterContext) -> list[Finding]:
    model = context.model
    if model is None or context.engine not in {"vllm", "sglang"}:
        return []
    findings: list[Finding] = []
    parsed = context.parameters
    tool_parser = (parsed.value_of("--tool-call-parser") or "").strip()
    if tool_parser == "auto":  # SGLang 0.5.21+ picks the parser from the chat template itself
        tool_parser = ""
    tool_format = tool_call_format(model)
    available = set(context.table.tool_call_parsers) if context.table else XML_TOOL_PARSERS
    xml_parsers = sorted(XML_TOOL_PARSERS & available) or ["qwen3_coder"]
    if tool_parser and tool_format == "xml" and tool_parser not in XML_TOOL_PARSERS:
        findings.append(
            Finding(
                "param.tool-call-parser-mismatch",
                Severity.ERROR,
                f"--tool-call-parser {tool_parser} does not read {_model_name(model)}'s tool calls: its chat "
                "template writes them as XML (<function=...><parameter=...>), so tool calls would come back "
                "as plain text",
                fix=f"use --tool-call-parser {xml_parsers[0]}",
                details={"parser": tool_parser, "format": "xml"},
            )
        )
    elif tool_parser in XML_TOOL_PARSERS and tool_format == "json":
        findings.append(
            Finding(
                "param.tool-call-parser-mismatch",
                Severity.WARNING,
                f"--tool-call-parser {tool_parser} reads XML tool calls, but {_model_name(model)}'s "
                "chat template writes JSON inside <tool_call>",
                fix="use --tool-call-parser hermes"
                if context.engine == "vllm"
                else "use --tool-call-parser qwen25",
                details={"parser": tool_parser, "format": "json"},
            )
        )
    findings.extend(_reasoning(context, model))
    return findings


def _reasoning(context: ParameterContext, model: ModelFacts) -> list[Finding]:
    parser = (context.parameters.value_of("--reasoning-parser") or "").strip()
    if not parser or parser in {"auto", "none"}:
        return []
    template = model.chat_template.text
    if is_qwen35_family(model) and parser in {"deepseek_r1", "deepseek-r1"}:
        # The vLLM recipes for Qwen3.5 use it: it reads the thinking the template opens in the
        # prompt, but takes a whole answer for reasoning when enable_thinking is false.
        return [
            Finding(
                "param.reasoning-parser-mismatch",
                Severity.INFO,
                f"--reasoning-parser {parser} reads {_model_name(model)}'s thinking, but a request with "
                "enable_thinking false comes back with its whole answer as reasoning",
                fix="use --reasoning-parser qwen3 if clients turn thinking off",
                details={"parser": parser},
            )
        ]
    if parser == "qwen3" and context.engine == "vllm" and opens_thinking_in_prompt(model):
        older = version_before(context.version, QWEN3_PARSER_READS_OPENED_THINKING)
        if older is not False:
            release = context.version or "a release without a version given"
            when = "" if older else f" if it is older than {QWEN3_PARSER_READS_OPENED_THINKING}"
            return [
                Finding(
                    "param.reasoning-parser-mismatch",
                    Severity.WARNING,
                    f"{_model_name(model)}'s chat template opens <think> in the prompt, so its output has "
                    f"only </think>; vLLM's qwen3 reasoning parser in {release}{when} needs both tags and "
                    "returns the whole answer, reasoning included, as content",
                    fix=f"use --reasoning-parser deepseek_r1 (it reads an output without <think>), or vLLM "
                    f"{QWEN3_PARSER_READS_OPENED_THINKING} or later, whose qwen3 parser reads it",
                    details={"parser": parser, "fixed_in": QWEN3_PARSER_READS_OPENED_THINKING},
                )
            ]
        return []
    if is_qwen35_family(model) and parser != "qwen3":
        return [
            Finding(
                "param.reasoning-parser-mismatch",
                Severity.WARNING,
                f"--reasoning-parser {parser} is not the parser of Qwen3.5/3.6 ({_model_name(model)})",
                fix="use --reasoning-parser qwen3",
                details={"parser": parser},
            )
        ]
    if template is not None and parser in THINK_REASONING_PARSERS and "<think>" not in template:
        return [
            Finding(
                "param.reasoning-parser-mismatch",
                Severity.WARNING,
                f"--reasoning-parser {parser} looks for <think> blocks, but {_model_name(model)}'s "
                "chat template never writes one; answers may be misread as reasoning",
                fix="remove --reasoning-parser, or pick the parser of this model's family",
                details={"parser": parser},
            )
        ]
    return []


def mtp_layer_count(model: ModelFacts) -> int:
    for source in (model.text_config, model.config):
        for key in MTP_LAYER_KEYS:
            value = source.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return 0


def _speculative_method(context: ParameterContext) -> str | None:
    """The MTP method asked for, when speculative decoding uses the model's own MTP layers."""
    parsed = context.parameters
    if context.engine == "vllm":
        method = parsed.value_of("--speculative-config.method")
        config: dict[str, Any] = {}
        raw = parsed.value_of("--speculative-config")
        if raw:
            try:
                loaded = json.loads(raw)
            except json.JSONDecodeError:
                loaded = None  # param.invalid-json names it
            config = loaded if isinstance(loaded, dict) else {}
        method = method or config.get("method")
        if isinstance(method, str) and "mtp" in method.lower() and not config.get("model"):
            return method
        return None
    if context.engine == "sglang":
        algorithm = (parsed.value_of("--speculative-algorithm") or "").strip().upper()
        draft = parsed.value_of("--speculative-draft-model-path")
        if algorithm == "NEXTN" or (algorithm == "EAGLE" and not draft):
            return algorithm
    return None


def check_mtp(context: ParameterContext) -> list[Finding]:
    model = context.model
    if model is None:
        return []
    method = _speculative_method(context)
    if method is None or mtp_layer_count(model) > 0:
        return []
    return [
        Finding(
            "param.mtp-without-layers",
            Severity.ERROR,
            f"speculative decoding by MTP ({method}) needs the model's multi-token-prediction layers, but "
            f"{_model_name(model)}'s config.json declares none ({' / '.join(MTP_LAYER_KEYS)})",
            fix="remove the speculative decoding flags, or give a draft model "
            '(vLLM: "model" in --speculative-config; SGLang: --speculative-draft-model-path)',
            details={"method": method},
        )
    ]


def check_served_model_name(context: ParameterContext) -> list[Finding]:
    if context.deployment_name is None or context.engine not in {"vllm", "sglang"}:
        return []
    option = context.parameters.find("--served-model-name")
    if option is None or not option.values:
        return []
    names = [value.strip() for value in option.values]
    if context.deployment_name in names:
        return []
    return [
        Finding(
            "param.served-model-name",
            Severity.ERROR,
            f"--served-model-name {' '.join(names)} differs from the deployment name "
            f"{context.deployment_name!r}; "
            f'clients asking for model {context.deployment_name!r} would get "model not found"',
            fix="remove --served-model-name (modelyard sets it to the deployment name), "
            f"or name the deployment {names[0]!r}",
            details={"served_model_name": names, "deployment": context.deployment_name},
        )
    ]
