"""GPUStack YAML: every problem is listed with its own line, not only the first."""

from __future__ import annotations

from modelyard.backends.gpustack import gpustack_problems, problem_to_json

TWO_BAD_VERSIONS = """backend_name: my-engine
version_configs:
  "1.0":
    run_command: my-server --model {{model_path}} --port {{port}}
    custom_framework: rocm
  "2.0":
    run_command: my-server 'unbalanced --port {{port}}
"""

TWO_SHAPE_PROBLEMS = """backend_name: my-engine
health_check_pth: /health
version_configs:
  "1.0":
    run_command: my-server --port {{port}}
    envs:
      A: b
"""


def test_each_bad_version_is_its_own_problem_at_its_line() -> None:
    problems = gpustack_problems(TWO_BAD_VERSIONS)
    assert [problem.line for problem in problems] == [5, 7]
    assert "custom_framework 'rocm' is not supported" in problems[0].message
    assert "cannot be split with shell quoting rules" in problems[1].message


def test_every_unknown_key_is_listed() -> None:
    problems = gpustack_problems(TWO_SHAPE_PROBLEMS)
    assert [problem.line for problem in problems] == [2, 6]
    assert "unknown key 'health_check_pth'" in problems[0].message
    assert "unknown key 'envs'" in problems[1].message


def test_a_good_backend_has_no_problem_and_a_syntax_error_is_one() -> None:
    assert gpustack_problems(TWO_BAD_VERSIONS.replace("rocm", "cpu").replace("'unbalanced", "balanced")) == []
    problems = gpustack_problems("backend_name: [unclosed\n")
    assert len(problems) == 1 and problems[0].line is not None


def test_a_problem_for_the_editor_states_its_position_once() -> None:
    """The editor shows "line L, column C" from the fields; the message must not say it again."""
    problems = [problem_to_json(problem) for problem in gpustack_problems(TWO_BAD_VERSIONS)]
    assert [(problem["line"], problem["column"]) for problem in problems] == [(5, 5), (7, 5)]
    assert (
        problems[0]["message"]
        == "version_configs > 1.0 > custom_framework: custom_framework 'rocm' is not supported"
    )
    assert all("line" not in str(problem["message"]) for problem in problems)
    syntax = problem_to_json(gpustack_problems("backend_name: [unclosed\n")[0])
    assert syntax["line"] == 2 and str(syntax["message"]).startswith("not valid YAML: ")
    # The error raised on import keeps the position in its one-line message (the CLI prints it).
    assert gpustack_problems(TWO_BAD_VERSIONS)[0].message.startswith("backend YAML line 5, column 5: ")
