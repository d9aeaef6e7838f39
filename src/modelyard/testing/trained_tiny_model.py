"""A tiny Qwen3 TEST model taught, in about a minute on one CPU core, to think and to call a tool.

Random weights answer noise, so the verification suite's reasoning and tool-call checks can
only fail on them. This builds the same tiny model (``tiny_model.build_tiny_qwen3``) and then
trains it on a handful of conversations rendered with its own chat template, so that a real
engine serving it (transformers serve parses Qwen3's ``<think>`` and ``<tool_call>``) gives:

- with thinking on: ``<think>`` reasoning, then a short answer;
- with thinking off: a short answer;
- with tools: one ``<tool_call>`` of ``get_weather`` with ``{"city": "Paris"}``;
- and it stops (``<|im_end|>``), unlike the untrained model.

It knows nothing else. Usage::

    build_trained_tiny_qwen3(Path("/tmp/thinker"))   # about 60 s, deterministic for a seed
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from modelyard.doctor.verify import WEATHER_TOOL
from modelyard.testing.tiny_model import build_tiny_qwen3

logger = logging.getLogger(__name__)

REASONING_TEXT = "A short answer."
ANSWER_TEXT = "Hello there."
TOOL_CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'

# What users (and the verification suite) say; the answer does not depend on it.
_USER_MESSAGES = (
    "Say hello in one short sentence.",
    "What is 2 + 3? Think, then answer briefly.",
    "Count from one to five.",
    "What is the weather in Paris? Use the get_weather tool.",
    "Hi",
    "Tell me something.",
    "Weather in Paris?",
    "hello",
    "Ok.",
)
_TARGET_LOSS = 0.005


def training_examples(tokenizer: Any) -> list[tuple[str, str]]:
    """(prompt, wanted answer) pairs: every user message with thinking on/off, with and without tools.

    Rendered with ``tokenizer``'s own chat template, so any Qwen-style tokenizer works (the tiny
    test tokenizer here, the real Qwen3 one in ``field_model``).
    """
    examples = []
    for text in _USER_MESSAGES:
        messages = [{"role": "user", "content": text}]
        for thinking in (True, False):
            prompt = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, enable_thinking=thinking
            )
            think = f"<think>\n{REASONING_TEXT}\n</think>\n\n" if thinking else ""
            examples.append((prompt, f"{think}{ANSWER_TEXT}<|im_end|>"))
            tool_prompt = tokenizer.apply_chat_template(
                messages,
                tools=[WEATHER_TOOL],
                tokenize=False,
                add_generation_prompt=True,
                enable_thinking=thinking,
            )
            tool_think = "<think>\nCall the tool.\n</think>\n\n" if thinking else ""
            examples.append((tool_prompt, f"{tool_think}{TOOL_CALL_TEXT}<|im_end|>"))
    return examples


def build_trained_tiny_qwen3(
    path: Path, *, hidden_size: int = 128, seed: int = 0, max_steps: int = 400
) -> Path:
    """Build the tiny TEST model in ``path`` and train it as the module docstring says; return ``path``."""
    import torch
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    build_tiny_qwen3(path, hidden_size=hidden_size, layers=2, seed=seed, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(seed)
    model: Any = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32)
    end_ids = [
        tokenizer.convert_tokens_to_ids("<|im_end|>"),
        tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    ]
    with torch.no_grad():
        # Undo the untrained model's "never stop" bias: this one must learn to end its turn.
        model.lm_head.weight[end_ids, 0] = 0.0
    sequences = []
    for prompt, answer in training_examples(tokenizer):
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        sequences.append((prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids))
    width = max(len(ids) for ids, _ in sequences)
    padding = end_ids[1]
    input_ids = torch.tensor([ids + [padding] * (width - len(ids)) for ids, _ in sequences])
    labels = torch.tensor([wanted + [-100] * (width - len(wanted)) for _, wanted in sequences])
    attention_mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in sequences])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    loss_value = float("inf")
    for step in range(max_steps):
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_value = float(loss.item())
        if loss_value < _TARGET_LOSS:
            logger.info("trained tiny model to loss %.4f in %d steps", loss_value, step + 1)
            break
    else:
        logger.warning("training stopped at loss %.4f after %d steps", loss_value, max_steps)
    model.eval()
    model = model.to(torch.bfloat16)
    model.config.dtype = "bfloat16"
    model.save_pretrained(path, safe_serialization=True)
    return path
