"""Which tests run together on one worker under ``pytest -n N --dist loadgroup`` (pytest-xdist).

Each xdist worker is its own process with its own session fixtures: a costly one (a Ray cluster,
a ``modelyard serve`` with a browser, an engine) used by tests spread over four workers would be
built four times. So every test that uses one is put in that fixture's group, and a group runs
whole on one worker (the biggest groups are handed out first). Everything else is spread test by
test. The rules, first match wins:

1. a test's own ``@pytest.mark.xdist_group("name")`` (also on a fixture's ``pytest.param``, as
   ``tests/runtimes/conftest.py`` does for the runtimes it asks for with ``getfixturevalue``);
2. the first fixture of ``SHARED_GROUPS`` the test uses, directly or through other fixtures
   (``ray_cluster``: the session's simulated Ray cluster, in ``tests/cluster`` too, where the
   placement and push tests are a group with a cluster of its own, as the runtime contract's
   ``ray-docker`` tests are), else the group of
   the test's file or folder in ``PLACE_GROUPS`` (the most specific place wins): each file of
   ``tests/cluster`` whose tests share real ``modelyard serve --cluster`` heads (on this host's
   loopback, or two network-namespace hosts) is a group. The Ray groups run beside each other,
   which is why every test process has a Ray temp folder of its own (``tests/ray_cluster.py``);
3. a session-, package- or module-scoped fixture defined under ``tests/`` (not one of
   ``CHEAP_FIXTURES``): the group is that fixture's place and name, so the tests sharing it stay
   on one worker. Of several, the one the others are built on (``api_key`` is built on
   ``gateway``: the group is ``gateway``'s), then a conftest's before a module's, then by name.

For a new test: nothing to do unless it asks for a costly fixture with ``request.getfixturevalue``
(name the group with the marker) or adds a costly fixture that several directories share (add it
to ``SHARED_GROUPS``). ``python -m pytest -n 4 --dist loadgroup -v`` prints each test's worker.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

TESTS_FOLDER = Path(__file__).resolve().parent

# Costly fixtures used by tests of several directories -> their group (the first one a test uses).
SHARED_GROUPS = {
    # One simulated Ray cluster per test process (one ray.init per process), in groups that build
    # one each and run beside each other: the placement and push tests of tests/cluster (the
    # worker nodes they add), the runtimes' tests on the head, and the runtime contract's
    # ray-docker tests (their group is named in tests/runtimes/conftest.py).
    "two_workers": "ray-cluster",
    "push_worker": "ray-cluster",
    "ray_cluster": "ray",
    "skeleton_image": "docker",
    # The console's shared server; a browser alone is cheap (a Chromium of the worker's own), so
    # the console tests with servers of their own go by those servers' groups (rule 3).
    "console_server": "browser",
    "tiny_engine": "tiny-engine",
}
# The groups that take longest (minutes, from --durations), handed out first under -n.
LONGEST_FIRST = (
    "browser",
    "ray",
    "ray-docker",
    "ray-cluster",
    "integration/test_serve_end_to_end.py::server",
    "tune/conftest.py::tune_platform",
    "ray-heads",
    "gateway/conftest.py::served_platform",
    "integration/test_serve_faults.py::server",
    "ray-heads-models",
    "ray-hosts",
    "ray-hosts-docker",
    "ray-hosts-registry",
    "docker",
    "tiny-engine",
)
# Files and folders (under tests/) whose every test is in a group, unless rule 1 or
# SHARED_GROUPS put it elsewhere.
# Each file of real heads builds its own (a module's server and joins, each host a pair of
# network namespaces with a random name and subnet), so the files run beside each other; the
# join's errors and the Ray port checks, each test on its own, are spread.
PLACE_GROUPS = {
    "cluster/test_join.py": "ray-heads",
    "cluster/test_models_on_workers.py": "ray-heads-models",
    "cluster/test_two_hosts.py": "ray-hosts",
    "cluster/test_two_hosts_docker.py": "ray-hosts-docker",
    "cluster/test_two_hosts_registry.py": "ray-hosts-registry",
}
# Session fixtures that cost a copy of a cached folder or a second: not worth keeping tests
# together for (api's admin_template is one scrypt hash and a migrated SQLite file; the console
# tests' Chromium starts in about a second, their hub double is a thread serving a cached model).
CHEAP_FIXTURES = {
    "playwright_instance",
    "browser",
    "hub",
    "test_models",
    "tiny_model_dir",
    "trained_tiny_model_dir",
    "field_core_dir",
    "tiny_model",
    "repository",
    "admin_template",
}
WIDE_SCOPES = {"session", "package", "module"}


def _defined_in_tests(definition: pytest.FixtureDef[object]) -> Path | None:
    try:
        source = Path(inspect.getfile(definition.func)).resolve()
    except (TypeError, OSError):
        return None
    return source if source.is_relative_to(TESTS_FOLDER) else None


def _wide_test_fixtures(item: pytest.Item) -> dict[str, pytest.FixtureDef[object]]:
    """The session-, package- and module-scoped fixtures from ``tests/`` that ``item`` uses, by
    name (the definition it gets: the closest override)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return {}
    found = {}
    for name in getattr(item, "fixturenames", ()):
        definitions = info.name2fixturedefs.get(name)
        if not definitions or name in CHEAP_FIXTURES:
            continue
        definition = definitions[-1]
        if definition.scope in WIDE_SCOPES and _defined_in_tests(definition) is not None:
            found[name] = definition
    return found


def _built_on(name: str, fixtures: dict[str, pytest.FixtureDef[object]]) -> set[str]:
    """The fixtures of ``fixtures`` that ``name`` is built on, through its arguments."""
    found: set[str] = set()
    pending = [name]
    while pending:
        for argument in fixtures[pending.pop()].argnames:
            if argument in fixtures and argument not in found:
                found.add(argument)
                pending.append(argument)
    return found


def _place_group(path: Path) -> str | None:
    """The group ``PLACE_GROUPS`` gives the file at ``path``: its own entry, else its closest
    folder's."""
    if not path.is_relative_to(TESTS_FOLDER):
        return None
    place = path.relative_to(TESTS_FOLDER)
    for candidate in (place, *place.parents):
        group = PLACE_GROUPS.get(candidate.as_posix())
        if group is not None:
            return group
    return None


def group_of(item: pytest.Item) -> str | None:
    """The xdist group of ``item`` by the rules above (None: spread test by test)."""
    if item.get_closest_marker("xdist_group") is not None:
        return None  # rule 1: xdist reads the marker itself
    names = getattr(item, "fixturenames", ())
    for fixture, group in SHARED_GROUPS.items():
        if fixture in names:
            return group
    place_group = _place_group(item.path.resolve())
    if place_group is not None:
        return place_group
    fixtures = _wide_test_fixtures(item)
    if not fixtures:
        return None

    def order(name: str) -> tuple[int, int, str]:
        source = _defined_in_tests(fixtures[name])
        in_conftest = source is not None and source.name == "conftest.py"
        return (len(_built_on(name, fixtures)), 0 if in_conftest else 1, name)

    chosen = min(fixtures, key=order)
    source = _defined_in_tests(fixtures[chosen])
    assert source is not None
    return f"{source.relative_to(TESTS_FOLDER).as_posix()}::{chosen}"


# -- carrying the groups to the scheduler --------------------------------------------------------
# pytest-xdist's own loadgroup reads the group from a suffix it writes into each test's node id,
# which pytest 9.2 no longer lets it change (pytest-xdist issue 1386: the groups are silently
# ignored). So the workers write each test's group to a file of their own in a folder the
# controller made, and the controller's scheduler (the same load-scope scheduling) reads them.
GROUPS_FOLDER_VARIABLE = "MODELYARD_TEST_GROUPS_FOLDER"
WORKER_VARIABLE = "PYTEST_XDIST_WORKER"


def _runs_in_groups(config: pytest.Config) -> bool:
    return (
        bool(getattr(config.option, "numprocesses", None)) and config.getoption("dist", "no") == "loadgroup"
    )


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(WORKER_VARIABLE) is None and _runs_in_groups(config):
        # Work is handed out in the order of the tests (LONGEST_FIRST leads), not by group size.
        config.option.loadscopereorder = False
        folder = tempfile.mkdtemp(prefix="modelyard-test-groups-")
        os.environ[GROUPS_FOLDER_VARIABLE] = folder  # the workers, started after this, inherit it
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def marked_group(item: pytest.Item) -> str | None:
    names = sorted(
        {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
    )
    return "_".join(names) or None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[str, str] = {}
    for item in items:
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        group = marked_group(item)
        if group is not None:
            groups[item.nodeid] = group
    folder = os.environ.get(GROUPS_FOLDER_VARIABLE)
    worker = os.environ.get(WORKER_VARIABLE)
    if folder and worker:
        # The longest groups first, so that none of them starts last; the rest as collected.
        rank = {group: position for position, group in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(groups.get(item.nodeid, ""), len(rank)))
        partial = Path(folder) / f"{worker}.json.partial"
        partial.write_text(json.dumps(groups))
        partial.replace(Path(folder) / f"{worker}.json")  # whole, before the worker reports its tests


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if not _runs_in_groups(config):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """Load-scope scheduling whose scopes are the groups the workers wrote (a test without
        one is a scope of its own)."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:  # every worker has collected by the time the scopes are made
                self._groups = {}
                for path in Path(os.environ[GROUPS_FOLDER_VARIABLE]).glob("*.json"):
                    self._groups.update(json.loads(path.read_text()))
            group = self._groups.get(nodeid)
            return f"group:{group}" if group is not None else nodeid

    return GroupScheduling(config, log)
