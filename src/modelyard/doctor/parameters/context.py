"""What the parameter checks look at: one deployment's engine, flags, env, model and GPUs.

Usage::

    context = ParameterContext.build(
        engine="vllm", version="0.25.0",
        backend_parameters=["--tensor-parallel-size 2", "--tool-call-parser qwen3_coder"],
        env=["VLLM_LOGGING_LEVEL=DEBUG"],
        deployment_name="qwen", model=read_model_facts(Path("/models/Qwen3.6-27B")), gpus=gpus,
    )
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from modelyard.backends.arguments import parse_env
from modelyard.backends.flag_tables import EngineHistory, FlagTable, load_engine_history, load_flag_table
from modelyard.backends.parameters import ParsedParameters, parse_backend_parameters
from modelyard.doctor.findings import Finding
from modelyard.doctor.host_facts import HostFacts
from modelyard.hardware.gpus import GpuInfo
from modelyard.modeldir import ModelFacts

ENGINE_NAMES = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "transformers": "transformers serve",
    "custom": "the engine",
}
# Engines whose flags doctor knows from a table; the others get the generic checks only.
TABLE_ENGINES = ("vllm", "sglang")


def engine_label(engine: str, version: str | None = None) -> str:
    name = ENGINE_NAMES.get(engine, engine)
    return f"{name} {version}" if version else name


def _table_version(table: FlagTable | None) -> tuple[str, str] | None:
    return None if table is None else (table.engine, table.version)


@dataclass
class ParameterContext:
    """Inputs of the parameter checks, parsed once.

    ``engine`` is the engine family (``vllm``, ``sglang``, ``transformers``, ``custom``);
    ``backend_parameters`` and ``env`` are the raw text as typed (lines, or one text);
    ``gpu_count`` is how many GPUs one replica gets (``len(gpus)`` when the GPUs are known).
    """

    engine: str
    version: str | None
    backend_parameters: list[str] | str
    env: dict[str, str] | list[str] | str
    deployment_name: str | None = None
    model: ModelFacts | None = None
    gpus: list[GpuInfo] | None = None
    gpu_count: int | None = None
    table: FlagTable | None = None
    # Every release of the engine: what was removed, renamed or added, and when.
    history: EngineHistory | None = None
    parsed: ParsedParameters | None = None
    # The machine the engine starts on (environment it inherits, shared memory, driver, ports).
    host: HostFacts | None = None
    # What the engine gets as the model: a local path (modelyard's case), or a hub id.
    model_argument: str | None = None
    # Each item of a list reaches the engine as one argument (another launcher's command list),
    # where modelyard splits each line by shell rules.
    items_are_arguments: bool = False

    @classmethod
    def build(
        cls,
        *,
        engine: str,
        version: str | None,
        backend_parameters: list[str] | str,
        env: dict[str, str] | list[str] | str,
        deployment_name: str | None = None,
        model: ModelFacts | None = None,
        gpus: list[GpuInfo] | None = None,
        gpu_count: int | None = None,
        host: HostFacts | None = None,
        model_argument: str | None = None,
        items_are_arguments: bool = False,
        parsed: ParsedParameters | None = None,
    ) -> ParameterContext:
        """``parsed``: ``backend_parameters`` already parsed on this engine version's flag table
        (the deployment service parses once and passes it); parsed here when absent."""
        table = load_flag_table(engine, version) if engine in TABLE_ENGINES and version else None
        history = load_engine_history(engine) if table is not None else None
        if parsed is None or _table_version(parsed.table) != _table_version(table):
            parsed = parse_backend_parameters(backend_parameters, table)
        return cls(
            engine=engine,
            version=version,
            backend_parameters=backend_parameters,
            env=env,
            deployment_name=deployment_name,
            model=model,
            gpus=gpus,
            gpu_count=gpu_count if gpu_count is not None else (len(gpus) if gpus else None),
            table=table,
            history=history,
            parsed=parsed,
            host=host,
            model_argument=model_argument,
            items_are_arguments=items_are_arguments,
        )

    @property
    def parameters(self) -> ParsedParameters:
        if self.parsed is None:
            self.parsed = parse_backend_parameters(self.backend_parameters, self.table)
        return self.parsed

    def answered_by_table(self, findings: list[Finding]) -> list[Finding]:
        """``findings`` marked with the release whose flag table they were checked against."""
        if self.table is None:
            return findings
        return [replace(finding, table_version=self.table.version) for finding in findings]

    @property
    def deployment_environment(self) -> dict[str, str]:
        """The deployment's own variables, read leniently (the env checks report bad lines)."""
        return parse_env(self.env, strict=False)

    @property
    def engine_environment(self) -> dict[str, str]:
        """The variables the engine sees: the host's it inherits, then the deployment's."""
        inherited = dict(self.host.environment) if self.host is not None else {}
        return {**inherited, **self.deployment_environment}

    @property
    def version_known(self) -> bool:
        return bool(self.version)

    @property
    def label(self) -> str:
        """``vLLM 0.25.0``: the engine and version the user asked for."""
        return engine_label(self.engine, self.version)
