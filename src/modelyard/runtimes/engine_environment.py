"""What an engine process carries in its environment: who launched it, and how it is stopped.

Every engine run as a process (by the process runtime on this host, or by a Ray supervisor on a
node) carries its ``EngineIdentity`` as ``MODELYARD_*`` variables, inherited by all its children,
so that a restarted server finds it by reading ``/proc/<pid>/environ``, even one whose pid was
never written down. ``MODELYARD_ENGINE_RUNTIME`` says which runtime it belongs to (absent: the
process runtime), and ``MODELYARD_STOP_SIGNAL_TARGET`` which of its processes a stop's SIGTERM
goes to (``group``: the whole process group; ``launcher``: the launcher alone, which ends its
children itself, as SGLang's does), so that whoever stops it later knows without being told.
"""

from __future__ import annotations

from collections.abc import Mapping

from modelyard.runtimes.base import EngineIdentity, MarkerNames, SignalTarget

ENV_MARKERS = MarkerNames(
    owner="MODELYARD_ENGINE_OWNER",
    launch_token="MODELYARD_LAUNCH_TOKEN",
    deployment="MODELYARD_DEPLOYMENT",
    instance_uid="MODELYARD_INSTANCE_UID",
    replica_index="MODELYARD_REPLICA_INDEX",
    start_number="MODELYARD_START_NUMBER",
)
ENV_OWNER = ENV_MARKERS.owner
ENV_LAUNCH_TOKEN = ENV_MARKERS.launch_token
ENV_DEPLOYMENT = ENV_MARKERS.deployment
# Set by runtimes other than the process runtime that also run engines as processes of a host
# (the Ray runtime's supervisors: "ray"): their engines carry the same markers, and are not the
# process runtime's to find, re-adopt or stop (on a one-node cluster they run on the server's host).
ENV_RUNTIME = "MODELYARD_ENGINE_RUNTIME"
ENV_STOP_SIGNAL_TARGET = "MODELYARD_STOP_SIGNAL_TARGET"


def engine_environment(identity: EngineIdentity, stop_signal_target: SignalTarget) -> dict[str, str]:
    """The markers an engine process carries (laid over its own environment)."""
    return {**ENV_MARKERS.write(identity), ENV_STOP_SIGNAL_TARGET: stop_signal_target}


def stop_signal_target_of(environment: Mapping[str, str]) -> SignalTarget:
    """Where a stop's SIGTERM goes for the engine with ``environment`` (``group`` for an engine of
    an older release, which carries no such marker)."""
    return "launcher" if environment.get(ENV_STOP_SIGNAL_TARGET) == "launcher" else "group"
