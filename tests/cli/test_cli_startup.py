"""The CLI starts light: what its entry point imports, its table of commands, its errors as JSON.

How fast it starts is measured by ``benchmarks/cli_latency.py``; what it must not import to be
fast is checked here, in fresh interpreters, as a shell would start ``modelyard``.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import modelyard.cli
from modelyard.cli.lazy import load_module_commands
from modelyard.cli.main import COMMANDS

# Run ``modelyard ARGS`` and print the modules it imported (what a shell's ``modelyard`` loads).
_PROBE = """
import sys
sys.argv = ["modelyard", *sys.argv[1:]]
from modelyard.cli.main import main
try:
    main()
except SystemExit:
    pass
print("\\n".join(sorted(sys.modules)), file=sys.stderr)
"""

# Heavy, and never needed to parse a command line or to talk to the server.
FORBIDDEN = ("torch", "transformers", "plotly", "sqlalchemy", "modelyard.bench", "fastapi", "uvicorn")


def _imported_by(*arguments: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *arguments], capture_output=True, text=True, timeout=120
    )
    return set(result.stderr.split())


@pytest.mark.parametrize(
    "arguments",
    [
        ["--version"],
        ["--help"],
        ["ps", "--help"],
        ["keys", "--help"],
        ["serve", "--help"],
        ["estimate", "--help"],
        ["doctor", "--help"],
        ["--url", "http://127.0.0.1:9", "keys", "list"],
    ],
    ids=lambda arguments: " ".join(arguments),
)
def test_the_entry_point_imports_no_heavy_library(arguments: list[str]) -> None:
    imported = _imported_by(*arguments)
    assert "modelyard.cli.main" in imported
    heavy = sorted(name for name in imported if name.split(".")[0] in FORBIDDEN or name.startswith(FORBIDDEN))
    assert heavy == [], f"modelyard {' '.join(arguments)} imported {heavy[:10]}"


def test_help_imports_no_command_module() -> None:
    imported = _imported_by("--help")
    modules = {module for entry in COMMANDS.values() for module in entry.modules}
    assert imported & modules == set()


def test_bench_help_does_not_load_the_bench_library() -> None:
    imported = _imported_by("bench", "--help")
    assert "modelyard.cli.bench" in imported
    assert not any(name.startswith("modelyard.bench") for name in imported)


def test_each_table_entry_is_a_registered_command_with_its_own_help_line() -> None:
    for name, entry in COMMANDS.items():
        command = load_module_commands(entry.modules).get(name)
        assert command is not None, f"{entry.modules} register no command {name!r}"
        assert command.get_short_help_str(limit=500) == entry.help, name


def test_every_command_module_is_in_the_table() -> None:
    listed = {module for entry in COMMANDS.values() for module in entry.modules}
    for module_info in pkgutil.iter_modules(modelyard.cli.__path__):
        module = importlib.import_module(f"modelyard.cli.{module_info.name}")
        if hasattr(module, "register") and module.__name__ != "modelyard.cli.bench_reports":
            assert module.__name__ in listed, f"{module.__name__} has register() but no COMMANDS entry"
    for entry in COMMANDS.values():
        registered = load_module_commands(entry.modules)
        missing = sorted(set(registered) - set(COMMANDS))
        assert missing == [], f"{entry.modules} register {missing}, which COMMANDS does not list"


def _cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "modelyard.cli.main", *arguments], capture_output=True, text=True, timeout=120
    )


def test_with_json_a_failure_is_a_json_object_on_stdout_with_the_same_status() -> None:
    plain = _cli("--url", "http://127.0.0.1:9", "keys", "list")
    as_json = _cli("--url", "http://127.0.0.1:9", "keys", "list", "--json")
    assert plain.returncode == as_json.returncode == 1
    assert plain.stdout == "" and "no modelyard server at http://127.0.0.1:9" in plain.stderr
    error = json.loads(as_json.stdout)["error"]
    assert error["code"] == "no_server"
    assert "no modelyard server at http://127.0.0.1:9" in error["message"]
    assert as_json.stderr == ""


def test_with_json_a_usage_error_is_a_json_object_with_status_2() -> None:
    result = _cli("ps", "--json", "--no-such-option")
    assert result.returncode == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "usage_error" and "--no-such-option" in error["message"]


def test_a_mistyped_command_suggests_the_right_one() -> None:
    result = _cli("estimat")
    assert result.returncode == 2
    assert "Did you mean 'estimate'" in result.stderr


def test_typer_click_base_is_what_the_lazy_group_catches() -> None:
    # The lazy group catches click's UsageError through typer.BadParameter's base class.
    assert issubclass(typer.BadParameter, typer.BadParameter.__bases__[0])
    assert typer.BadParameter.__bases__[0].__name__ == "UsageError"


def test_serve_binds_its_port_before_importing_the_server(tmp_path: Path) -> None:
    # A port already taken: serve stops at the bind, and by then it has imported nothing heavy.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        imported = _imported_by("serve", "--no-demo", "--port", port, "--data-dir", str(tmp_path / "data"))
    assert "modelyard.cli.serve" in imported
    heavy = sorted(
        name
        for name in imported
        if name.startswith(("fastapi", "sqlalchemy", "uvicorn", "modelyard.server."))
        and name != "modelyard.server.startup"
    )
    assert heavy == [], heavy[:10]
