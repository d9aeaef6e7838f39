"""The ready engine endpoints, published by the controller and read by the gateway.

The controller calls ``publish`` whenever the set of ready instances of a deployment changes
(an instance becomes running, fails, is stopped, the deployment is removed). The gateway calls
``endpoints_for`` on every request; it never touches the database on the hot path.
Everything runs in the server's one event loop, so no lock is needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Endpoint:
    """One ready engine replica that can take requests for a deployment."""

    deployment_name: str
    instance_id: int
    # e.g. "http://127.0.0.1:40123" (no trailing slash, no /v1)
    base_url: str
    # The "model" value the engine itself accepts (vLLM/SGLang: the deployment name through
    # --served-model-name; transformers serve: the model path it was started with).
    served_model_name: str
    # Where the engine puts reasoning text in its deltas/messages: "reasoning" or "reasoning_content".
    reasoning_field: str = "reasoning_content"
    # Which engine serves it (the backend's family: vllm, sglang, transformers, custom) and its
    # version, shown to clients in /v1/models so that benchmarks can record what they measured.
    engine: str = "custom"
    engine_version: str = ""
    # The key the engine itself asks for (its --api-key), sent upstream instead of the client's
    # modelyard key; never shown.
    engine_api_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class DeploymentNote:
    """Why a name the gateway will know is not a deployment yet."""

    message: str
    # True while it is on its way (clients are told to retry after a few seconds).
    coming: bool = True


@dataclass
class EndpointRegistry:
    """Ready endpoints by deployment name, plus each deployment's set of known names."""

    _endpoints: dict[str, tuple[Endpoint, ...]] = field(default_factory=dict)
    _known_deployments: set[str] = field(default_factory=set)
    # Names that are not deployments yet, with what the gateway tells clients meanwhile
    # (e.g. "demo is being prepared (42%)").
    _notes: dict[str, DeploymentNote] = field(default_factory=dict)

    def publish(self, deployment_name: str, endpoints: list[Endpoint]) -> None:
        """Replace the ready endpoints of one deployment (an empty list: none ready)."""
        self._known_deployments.add(deployment_name)
        self._endpoints[deployment_name] = tuple(endpoints)

    def forget(self, deployment_name: str) -> None:
        """The deployment was removed: its name is no longer known to the gateway."""
        self._known_deployments.discard(deployment_name)
        self._endpoints.pop(deployment_name, None)

    def endpoints_for(self, deployment_name: str) -> tuple[Endpoint, ...]:
        return self._endpoints.get(deployment_name, ())

    def is_known(self, deployment_name: str) -> bool:
        return deployment_name in self._known_deployments

    def known_deployments(self) -> list[str]:
        return sorted(self._known_deployments)

    def set_note(self, name: str, message: str, *, coming: bool = True) -> None:
        """``name`` is not a deployment yet: until it is, the gateway answers 503 with ``message``."""
        self._notes[name] = DeploymentNote(message, coming)

    def clear_note(self, name: str) -> None:
        self._notes.pop(name, None)

    def note_for(self, name: str) -> DeploymentNote | None:
        return self._notes.get(name)
