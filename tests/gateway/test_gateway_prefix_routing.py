"""Prefix-aware routing through the gateway: prompts that begin alike reach the same replica."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from modelyard.control.endpoints import Endpoint
from modelyard.server.gateway.prefix_routing import prefix_hash, prompt_prefix, ranked_by_prefix

from .conftest import GatewayHarness, ReferenceServers, engine_counter, unique_name

SYSTEM = "You are a careful assistant. " * 60  # about 1,800 characters: longer than the prefix hashed
SHORT_SYSTEM = "Be brief."  # a conversation far shorter than the prefix hashed for its first turns
PREFIX_CHARACTERS = 1024  # the gateway's default


@pytest.mark.parametrize("system", [SYSTEM, SHORT_SYSTEM], ids=["long-system-prompt", "short-conversation"])
def test_turns_of_one_conversation_go_to_one_replica_and_others_spread(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers, system: str
) -> None:
    servers = [engines.get(f"prefix-{letter}", served_model_names=["prefix-model"]) for letter in "ab"]
    deployment = unique_name("prefix")
    gateway.publish(deployment, servers, served_model_name="prefix-model")
    gateway.call(lambda: gateway.context.endpoints.set_routing(deployment, "prefix"))
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=api_key, max_retries=0)

    def served() -> list[float]:
        return [engine_counter(server, "request_success") for server in servers]

    before = served()
    history = [{"role": "system", "content": system}, {"role": "user", "content": "first question"}]
    for turn in range(6):
        answer = client.chat.completions.create(model=deployment, messages=history, max_tokens=2)  # type: ignore[arg-type]
        history += [
            {"role": "assistant", "content": answer.choices[0].message.content or ""},
            {"role": "user", "content": f"follow-up {turn}"},
        ]
    conversation = [after - start for after, start in zip(served(), before, strict=True)]
    assert sorted(conversation) == [0, 6], conversation
    before = served()
    for index in range(24):
        client.chat.completions.create(
            model=deployment,
            messages=[{"role": "user", "content": f"conversation {index}: " + "words " * 300}],
            max_tokens=2,
        )
    others = [after - start for after, start in zip(served(), before, strict=True)]
    assert all(count > 0 for count in others) and sum(others) == 24, others


def test_the_prefix_is_the_beginning_of_the_prompt_in_every_api_shape() -> None:
    chat = {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ]
    }
    assert prompt_prefix(chat, 100) == "system\x1fsys\x1fuser\x1fhi"
    assert prompt_prefix({"prompt": "a b c"}, 3) == "a b"
    assert prompt_prefix({"instructions": "be brief", "input": "question"}, 100) == "be brief\x1fquestion"
    anthropic = {"system": "sys", "messages": [{"role": "user", "content": "hello"}]}
    assert prompt_prefix(anthropic, 100) == "sys\x1fuser\x1fhello"
    assert prefix_hash({"messages": []}, 100) is None
    # Past the hashed length, what follows does not change the key.
    long_turn = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "x"}]}
    longer = {"messages": [*long_turn["messages"], {"role": "user", "content": "y"}]}
    assert prefix_hash(long_turn, 1024) == prefix_hash(longer, 1024)


def turns(first_question: str, count: int) -> list[dict[str, Any]]:
    """The requests of one short conversation, turn by turn (each sends the history so far)."""
    history: list[dict[str, str]] = [
        {"role": "system", "content": SHORT_SYSTEM},
        {"role": "user", "content": first_question},
    ]
    requests = []
    for turn in range(count):
        requests.append({"messages": list(history)})
        history += [
            {"role": "assistant", "content": f"answer {turn} " * 5},
            {"role": "user", "content": f"and then {turn}?"},
        ]
    return requests


@pytest.mark.parametrize(
    "wrap",
    [
        lambda messages: {"messages": messages},
        lambda messages: {"system": messages[0]["content"], "messages": messages[1:]},  # Anthropic
        lambda messages: {"instructions": messages[0]["content"], "input": messages[1:]},  # Responses
    ],
    ids=["chat", "anthropic", "responses"],
)
def test_every_turn_of_a_short_conversation_has_the_key_of_its_first_turn(wrap: Any) -> None:
    keys = {
        prefix_hash(wrap(request["messages"]), PREFIX_CHARACTERS) for request in turns("what is a GPU?", 8)
    }
    assert len(keys) == 1 and None not in keys


def test_short_conversations_that_open_differently_spread_over_the_replicas() -> None:
    replicas = [Endpoint("chat", index, f"http://10.0.0.{index}:8000", "chat") for index in range(2)]
    first_turns = [turns(f"question {index}", 1)[0] for index in range(32)]
    keys = [prefix_hash(request, PREFIX_CHARACTERS) for request in first_turns]
    assert len(set(keys)) == 32
    chosen = [ranked_by_prefix(replicas, key)[0].base_url for key in keys if key is not None]
    assert {url: chosen.count(url) for url in set(chosen)}.keys() == {r.base_url for r in replicas}
