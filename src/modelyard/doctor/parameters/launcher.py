"""Launcher and container options that reach the engine as its own arguments.

A ``docker run`` line keeps its options before the image; whatever follows the image is the
entrypoint's (the engine's) argument list. ``--gpus all``, ``--shm-size 16g`` or ``--ipc=host``
written after the image, or pasted into an engine's parameters, reach ``vllm serve`` /
``sglang.launch_server``, whose argparse refuses any word it has no flag for ("unrecognized
arguments", exit status 2). The same holds for the interpreter's and launchers' own options
(``python -u``, ``torchrun --nproc-per-node``).

The rule: a word in ``DOCKER_RUN_OPTIONS`` / ``PYTHON_OPTIONS`` / ``LAUNCHER_OPTIONS`` that no
release of the engine has as a flag (its flag history, ``backends.flag_tables``) is an error,
``param.launcher-option``, on every version (so also when the version is not known). An image
reference among the arguments (``vllm/vllm-openai:v0.8.5``) names the same mistake.

``param.model-given-twice``: modelyard gives vLLM the model as ``vllm serve PATH`` and SGLang as
``--model-path PATH``. vLLM from 0.8 refuses a ``--model`` next to the positional model (0.8:
``ValueError: With `vllm serve`, you should provide the model as a positional argument``; later
releases move ``--model X`` to the front, which leaves modelyard's path as a second positional:
"unrecognized arguments"); older releases ignore it. SGLang keeps the last ``--model-path``, so
the engine serves another model than the deployment's: a warning.
"""

from __future__ import annotations

import re

from modelyard.backends.flag_tables import EngineHistory, load_engine_history
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.estimate.versions import version_before

# docker run / podman run options (docs.docker.com/reference/cli/docker/container/run).
DOCKER_RUN_OPTIONS = frozenset(
    {
        "--gpus", "--shm-size", "--ipc", "--publish", "-p", "--volume", "-v", "--runtime",
        "--network", "--net", "--name", "--env", "-e", "--env-file", "--rm", "--detach", "-d",
        "-it", "-ti", "--interactive", "--tty", "--privileged", "--ulimit", "--device",
        "--entrypoint", "--restart", "--cap-add", "--security-opt", "--mount", "--platform",
        "--pull", "--memory", "--cpus", "--group-add", "--hostname", "--userns", "--pid",
        "--add-host", "--label", "--log-driver", "--init", "--workdir",
    }
)  # fmt: skip
# The interpreter's options (python -m vllm.entrypoints.openai.api_server -u ...).
PYTHON_OPTIONS = frozenset({"-m", "-u", "-B", "-X", "-W", "-c"})
# torchrun / accelerate / deepspeed options.
LAUNCHER_OPTIONS = frozenset(
    {
        "--nproc-per-node", "--nproc_per_node", "--master-addr", "--master_addr", "--master_port",
        "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint", "--standalone",
        "--num_processes", "--num-processes", "--num_machines", "--mixed_precision", "--num_gpus",
    }
)  # fmt: skip
# name/name:tag or registry/name:tag, as docker reads an image reference.
IMAGE_REFERENCE = re.compile(
    r"^(?:[\w.-]+(?::\d+)?/)+[\w.-]+:[\w.-]+$|^(?:vllm/vllm-openai|lmsysorg/sglang)$"
)
LAUNCHER_ENGINES = ("vllm", "sglang")
# vLLM 0.8 refused --model beside the positional model; later releases move it to the front.
VLLM_MODEL_FLAG_REFUSED_SINCE = "0.8.0"


def _kind(word: str) -> str | None:
    if word in DOCKER_RUN_OPTIONS:
        return "a docker run option"
    if word in PYTHON_OPTIONS:
        return "an option of the python interpreter"
    if word in LAUNCHER_OPTIONS:
        return "an option of the launcher (torchrun / accelerate)"
    return None


def launcher_option(engine: str, typed: str) -> str | None:
    """What launcher ``typed`` (a flag without its ``=value``) belongs to, when no release of
    ``engine`` has it as a flag; None otherwise."""
    kind = _kind(typed)
    if kind is None:
        return None
    history = load_engine_history(engine)
    if history is not None and _engine_has(history, typed):
        return None
    return kind


def _engine_has(history: EngineHistory, typed: str) -> bool:
    return history.flag(typed) is not None or history.flag(typed.replace("_", "-")) is not None


def check_launcher_options(context: ParameterContext) -> list[Finding]:
    if context.engine not in LAUNCHER_ENGINES:
        return []
    findings: list[Finding] = []
    for option in context.parameters.options:
        kind = launcher_option(context.engine, option.typed)
        if kind is None:
            continue
        given = f"{option.typed}={option.values[-1]}" if option.inline_value else option.typed
        findings.append(
            Finding(
                "param.launcher-option",
                Severity.ERROR,
                f"line {option.line_number}: {given} is {kind}, not a flag of {context.label}; "
                "among the engine's arguments it reaches the engine, which refuses it "
                '("unrecognized arguments")',
                fix=_fix(option.typed, kind),
                details={"flag": option.typed, "line": option.line_number, "belongs_to": kind},
            )
        )
    for argument in context.parameters.strays:
        if IMAGE_REFERENCE.match(argument.text):
            findings.append(
                Finding(
                    "param.launcher-option",
                    Severity.ERROR,
                    f"line {argument.line_number}: {argument.text!r} is a container image; the words "
                    "around it are a docker command line, not the engine's arguments",
                    fix="keep only the flags that follow the image in the command; modelyard picks the "
                    "image from the backend version and gives the container its GPUs and shared memory",
                    details={"image": argument.text, "line": argument.line_number},
                )
            )
    findings.extend(_model_twice(context))
    return findings


def _fix(typed: str, kind: str) -> str:
    if typed in {"--shm-size", "--ipc"}:
        return (
            f"remove {typed}: it belongs before the image in docker run (modelyard's Docker runtime "
            "starts engine containers with --ipc=host)"
        )
    if typed == "--gpus":
        return "remove --gpus: give the deployment its GPUs (gpus_per_replica / gpu_ids) instead"
    if kind.startswith("a docker"):
        return f"remove {typed} (and its value); in docker run it goes before the image"
    return f"remove {typed}; modelyard starts the engine itself"


def _model_twice(context: ParameterContext) -> list[Finding]:
    parsed = context.parameters
    if context.engine == "vllm":
        option = next((item for item in parsed.options if item.typed == "--model"), None)
        if option is None:
            return []
        refused = not context.version or not version_before(context.version, VLLM_MODEL_FLAG_REFUSED_SINCE)
        consequence = (
            f'{context.label} refuses the pair (0.8: "you should provide the model as a positional '
            "argument\"; later releases move --model to the front and stop on modelyard's path as "
            '"unrecognized arguments")'
            if refused
            else f"{context.label} serves the positional path and ignores --model"
        )
        return [
            Finding(
                "param.model-given-twice",
                Severity.ERROR if refused else Severity.WARNING,
                f"line {option.line_number}: --model is given, but modelyard already passes the model as "
                f"`vllm serve PATH`; {consequence}",
                fix="remove --model and its value; the deployment's model is what vLLM serves",
                details={"flag": "--model", "line": option.line_number},
            )
        ]
    if context.engine == "sglang":
        option = parsed.find("--model-path")
        if option is None:
            return []
        return [
            Finding(
                "param.model-given-twice",
                Severity.WARNING,
                f"line {option.line_number}: --model-path is given, but modelyard already passes the "
                "deployment's model with --model-path; SGLang keeps the last one, so it serves "
                f"{option.values[-1] if option.values else 'another path'!r} instead",
                fix="remove --model-path; choose the model with the deployment's model",
                details={"flag": "--model-path", "line": option.line_number},
            )
        ]
    return []
