"""Rendering a backend version into the argv and environment of one engine process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from modelyard.backends.catalog import BackendCatalog, load_builtin_backends
from modelyard.backends.render import LaunchCommand, check_launch, render_launch
from modelyard.backends.spec import BackendVersion
from modelyard.errors import EngineStartFailed, InvalidInput

MODEL_PATH = "/models/My Qwen3 8B"


@pytest.fixture(scope="module")
def catalog() -> BackendCatalog:
    return BackendCatalog(builtin=load_builtin_backends())


@pytest.fixture
def programs_folder(tmp_path: Path) -> Path:
    """Stand-ins for programs this machine lacks (vllm, docker): named doubles, never run."""
    for name in ("vllm", "docker"):
        program = tmp_path / name
        program.write_text("#!/bin/sh\necho 'double: not the real program' >&2\nexit 1\n")
        program.chmod(0o755)
    return tmp_path


def render(
    version: BackendVersion,
    *,
    gpu_ids: list[int] | None = None,
    parameters: list[str] | None = None,
    env: dict[str, str] | None = None,
    search_path: str | None = None,
) -> LaunchCommand:
    return render_launch(
        version,
        model_path=MODEL_PATH,
        port=8001,
        worker_ip="127.0.0.1",
        model_name="qwen3-8b",
        gpu_ids=gpu_ids or [],
        backend_parameters=parameters or [],
        env=env or {},
        search_path=search_path,
    )


def test_vllm_renders_an_argv_with_its_gpus_in_the_env(
    catalog: BackendCatalog, programs_folder: Path
) -> None:
    launch = render(
        catalog.resolve_version("vllm", "0.25.0"),
        gpu_ids=[2, 3],
        parameters=["--max-model-len", "8192"],
        search_path=str(programs_folder),
    )
    assert launch.argv == [
        str(programs_folder / "vllm"),
        "serve",
        MODEL_PATH,
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--served-model-name",
        "qwen3-8b",
        "--max-model-len",
        "8192",
    ]
    assert launch.env == {"VLLM_NO_USAGE_STATS": "1", "CUDA_VISIBLE_DEVICES": "2,3"}
    assert not launch.in_container


def test_sglang_runs_the_launcher_module_with_the_running_python(catalog: BackendCatalog) -> None:
    launch = render(catalog.resolve_version("sglang", "0.5.17"), gpu_ids=[0])
    assert Path(launch.argv[0]).parent == Path(sys.executable).parent or launch.argv[0] == sys.executable
    assert launch.argv[1:4] == ["-m", "sglang.launch_server", "--model-path"]
    assert launch.argv[4] == MODEL_PATH
    assert "--enable-metrics" in launch.argv
    assert launch.env["CUDA_VISIBLE_DEVICES"] == "0"


def test_transformers_without_gpus_adds_device_cpu(catalog: BackendCatalog) -> None:
    launch = render(catalog.resolve_version("transformers", None))
    assert Path(launch.argv[0]).name == "transformers"
    assert launch.argv[1:] == [
        "serve",
        MODEL_PATH,
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--device",
        "cpu",
    ]
    assert launch.env == {"CUDA_VISIBLE_DEVICES": ""}


def test_transformers_with_a_gpu_leaves_the_device_to_the_engine(catalog: BackendCatalog) -> None:
    launch = render(catalog.resolve_version("transformers", None), gpu_ids=[0])
    assert "--device" not in launch.argv


def test_user_device_choice_replaces_the_cpu_default(catalog: BackendCatalog) -> None:
    launch = render(catalog.resolve_version("transformers", None), parameters=["--device=mps"])
    assert launch.argv[-1] == "--device=mps"
    assert "cpu" not in launch.argv


def test_model_path_with_spaces_stays_one_argument(catalog: BackendCatalog) -> None:
    launch = render(catalog.resolve_version("transformers", None))
    assert MODEL_PATH in launch.argv
    assert "Qwen3" not in launch.argv


def test_parameter_repeating_a_template_flag_is_refused(
    catalog: BackendCatalog, programs_folder: Path
) -> None:
    with pytest.raises(InvalidInput, match=r"repeat --port, which the platform sets"):
        render(
            catalog.resolve_version("vllm", None),
            parameters=["--port", "9000"],
            search_path=str(programs_folder),
        )


def test_repeated_flag_is_caught_in_its_underscore_spelling(catalog: BackendCatalog) -> None:
    with pytest.raises(InvalidInput, match=r"--served-model-name"):
        render(catalog.resolve_version("sglang", None), parameters=["--served_model_name=other"])


def test_unknown_placeholder_is_named() -> None:
    version = BackendVersion(version="1", executable="python3", run_command="-m server --dir {{model_dir}}")
    with pytest.raises(InvalidInput, match=r"unknown placeholder \{\{model_dir\}\}"):
        render(version)


def test_placeholder_can_name_an_env_variable_and_gpu_values() -> None:
    version = BackendVersion(
        version="1",
        executable="python3",
        run_command="-m server --cache {{CACHE_DIR}} --tp {{gpu_count}} --devices {{gpu_ids}} {{model_path}}",
        env={"CACHE_DIR": "/cache"},
    )
    launch = render(version, gpu_ids=[0, 1], env={"CACHE_DIR": "/fast cache"})
    assert launch.argv[1:] == [
        "-m",
        "server",
        "--cache",
        "/fast cache",
        "--tp",
        "2",
        "--devices",
        "0,1",
        MODEL_PATH,
    ]


def test_deployment_env_overrides_version_env(catalog: BackendCatalog, programs_folder: Path) -> None:
    launch = render(
        catalog.resolve_version("vllm", None),
        env={"VLLM_NO_USAGE_STATS": "0"},
        search_path=str(programs_folder),
    )
    assert launch.env["VLLM_NO_USAGE_STATS"] == "0"


def test_deployment_env_cannot_set_the_gpu_variable(catalog: BackendCatalog) -> None:
    with pytest.raises(InvalidInput, match="CUDA_VISIBLE_DEVICES"):
        render(catalog.resolve_version("transformers", None), env={"CUDA_VISIBLE_DEVICES": "0"})


def test_missing_executable_says_how_to_install_it(catalog: BackendCatalog, tmp_path: Path) -> None:
    with pytest.raises(EngineStartFailed, match=r"executable 'vllm' not found.*pip install vllm==0.25.0"):
        render(catalog.resolve_version("vllm", "0.25.0"), search_path=str(tmp_path))


def test_cpu_only_version_refuses_gpus() -> None:
    version = BackendVersion(version="1", executable="python3", run_command="-m server", supports_gpu=False)
    with pytest.raises(InvalidInput, match="runs on CPU only"):
        render(version, gpu_ids=[0])


def test_container_version_renders_the_entrypoint_and_arguments_for_the_image() -> None:
    version = BackendVersion(
        version="1.2.0",
        image="nvcr.io/nvidia/tensorrt-llm/release:1.2.0",
        entrypoint=["trtllm-serve", "serve"],
        run_command="{{model_path}} --host {{worker_ip}} --port {{port}}",
        env={"HF_TOKEN": "secret-value"},
    )
    launch = render(version, gpu_ids=[0, 1])
    assert launch.in_container
    assert launch.image == "nvcr.io/nvidia/tensorrt-llm/release:1.2.0"
    assert launch.program == ["trtllm-serve", "serve"]
    assert launch.arguments == [MODEL_PATH, "--host", "127.0.0.1", "--port", "8001"]
    assert launch.env == {"HF_TOKEN": "secret-value", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_check_before_storing_refuses_a_repeated_flag_without_the_program(catalog: BackendCatalog) -> None:
    version = catalog.resolve_version("vllm", "0.19.1")  # vllm is not installed here
    check_launch(version, backend_parameters=["--max-model-len", "8192"], env={}, gpu_count=2)
    with pytest.raises(InvalidInput, match="--host"):
        check_launch(version, backend_parameters=["--host=0.0.0.0"], env={})


def test_check_before_storing_refuses_an_unknown_placeholder_in_an_entrypoint() -> None:
    version = BackendVersion(
        version="1", image="example/server:1", entrypoint=["{{launcher}}"], run_command=""
    )
    with pytest.raises(
        InvalidInput, match=r"entrypoint of version 1 uses the unknown placeholder \{\{launcher\}\}"
    ):
        check_launch(version, backend_parameters=[], env={})


@pytest.mark.parametrize(
    "parameters",
    [
        ["--api-key", "sk-engine", "--max-model-len", "8192"],
        ["--api-key=sk-engine", "--max-model-len", "8192"],
    ],
)
def test_vllm_gets_its_own_api_key_by_environment_never_on_its_command_line(
    catalog: BackendCatalog, programs_folder: Path, parameters: list[str]
) -> None:
    launch = render(
        catalog.resolve_version("vllm", "0.33.0"), parameters=parameters, search_path=str(programs_folder)
    )
    assert not any("sk-engine" in argument for argument in launch.argv)
    assert "--api-key" not in " ".join(launch.argv)
    assert launch.argv[-2:] == ["--max-model-len", "8192"]
    assert launch.env["VLLM_API_KEY"] == "sk-engine"


def test_several_vllm_api_keys_stay_on_the_command_line_the_variable_holds_one(
    catalog: BackendCatalog, programs_folder: Path
) -> None:
    launch = render(
        catalog.resolve_version("vllm", "0.33.0"),
        parameters=["--api-key", "sk-one", "sk-two"],
        search_path=str(programs_folder),
    )
    assert launch.argv[-3:] == ["--api-key", "sk-one", "sk-two"]
    assert "VLLM_API_KEY" not in launch.env


def test_sglang_has_no_api_key_variable_so_its_key_stays_a_flag(catalog: BackendCatalog) -> None:
    launch = render(catalog.resolve_version("sglang", None), parameters=["--api-key", "sk-engine"])
    assert launch.argv[-2:] == ["--api-key", "sk-engine"]
