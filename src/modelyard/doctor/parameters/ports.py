"""Every port the engine binds at start, against the ports already held; and ``VLLM_PORT``'s form.

The engine binds its HTTP port (``--port``: vLLM 8000, SGLang 30000) and, for some layouts, more:
vLLM's data-parallel coordinator (``--data-parallel-rpc-port``, 29550, when DP > 1), SGLang's
NCCL rendezvous (``--nccl-port`` when given) and its multi-node address on the first node
(``--dist-init-addr HOST:PORT``). A port another process holds stops the start with
"[Errno 98] Address already in use": ``host.port-in-use``, an error (``HostFacts.ports_in_use``).

``VLLM_PORT`` is vLLM's base port for its own sockets, read with ``int()`` (``vllm/envs.py``
``get_vllm_port``); a value that is no number stops every release: "VLLM_PORT 'tcp://10.0.0.5:8000'
appears to be a URI. This may be caused by a Kubernetes service discovery issue" (Kubernetes
sets ``<SERVICE>_PORT=tcp://...`` for a Service named ``vllm``). ``param.vllm-port-not-a-number``.
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.doctor.parameters.layout import context_layout
from modelyard.errors import InvalidInput

DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000}
VLLM_DATA_PARALLEL_RPC_PORT = 29550
PORT_ENGINES = ("vllm", "sglang")


def check_ports(context: ParameterContext) -> list[Finding]:
    if context.engine not in PORT_ENGINES:
        return []
    findings = _vllm_port_variable(context)
    findings.extend(_held(context))
    return findings


def _integer(context: ParameterContext, flag: str) -> int | None:
    try:
        return context.parameters.integer(flag)
    except InvalidInput:
        return None  # param.invalid-number names it


def engine_ports(context: ParameterContext) -> dict[int, str]:
    """The ports this start binds, each with the flag that sets it."""
    parsed = context.parameters
    port = _integer(context, "--port")
    ports = {port if port is not None else DEFAULT_PORTS[context.engine]: "--port"}
    layout = context_layout(context)
    if context.engine == "vllm" and layout.data_parallel > 1:
        rpc = _integer(context, "--data-parallel-rpc-port")
        ports.setdefault(rpc if rpc is not None else VLLM_DATA_PARALLEL_RPC_PORT, "--data-parallel-rpc-port")
    if context.engine == "sglang":
        nccl = _integer(context, "--nccl-port") if parsed.given("--nccl-port") else None
        if nccl is not None:
            ports.setdefault(nccl, "--nccl-port")
        address = parsed.value_of("--dist-init-addr")
        rank = _integer(context, "--node-rank") if parsed.given("--node-rank") else 0
        if address and rank == 0 and address.rpartition(":")[2].isdigit():
            ports.setdefault(int(address.rpartition(":")[2]), "--dist-init-addr")
    return ports


def _held(context: ParameterContext) -> list[Finding]:
    host = context.host
    if host is None or not host.ports_in_use:
        return []
    findings: list[Finding] = []
    for port, flag in engine_ports(context).items():
        if port not in host.ports_in_use:
            continue
        findings.append(
            Finding(
                "host.port-in-use",
                Severity.ERROR,
                f"port {port} ({flag}) is already in use: {context.label} cannot listen there "
                '("[Errno 98] address already in use"); a previous engine that was not stopped is the '
                "usual holder",
                fix=f"stop the process holding it (`ss -ltnp 'sport = :{port}'`), or give {flag} a free "
                "port" + (" (or let modelyard choose the port)" if flag == "--port" else ""),
                details={"port": port, "flag": flag},
            )
        )
    return findings


def _vllm_port_variable(context: ParameterContext) -> list[Finding]:
    if context.engine != "vllm":
        return []
    value = context.engine_environment.get("VLLM_PORT")
    if value is None or value.strip().isdigit():
        return []
    uri = "://" in value
    return [
        Finding(
            "param.vllm-port-not-a-number",
            Severity.ERROR,
            f"VLLM_PORT={value!r} is not a port number; {context.label} reads it with int() and stops "
            + (
                '("appears to be a URI. This may be caused by a Kubernetes service discovery issue": '
                "a Kubernetes Service named vllm sets VLLM_PORT=tcp://...)"
                if uri
                else f"(\"VLLM_PORT '{value}' must be a valid integer\")"
            ),
            fix="unset VLLM_PORT (it is vLLM's internal base port, not the API port); on Kubernetes "
            "rename the Service or set enableServiceLinks: false on the pod",
            details={"value": value},
        )
    ]
