"""Which xdist group a test file's tests get by its place (``tests/parallel_groups.py``): each file
of real Ray heads in ``tests/cluster`` a group of its own beside the simulated cluster's, and a
place named there that no longer exists is caught (its tests would silently join another group)."""

from __future__ import annotations

from parallel_groups import CHEAP_FIXTURES, PLACE_GROUPS, SHARED_GROUPS, TESTS_FOLDER, _place_group


def test_each_file_of_real_heads_is_a_group_of_its_own() -> None:
    cluster = TESTS_FOLDER / "cluster"
    groups = [
        _place_group(cluster / name)
        for name in (
            "test_join.py",
            "test_models_on_workers.py",
            "test_two_hosts.py",
            "test_two_hosts_docker.py",
            "test_two_hosts_registry.py",
        )
    ]
    assert None not in groups and len(set(groups)) == len(groups)


def test_the_join_errors_and_port_checks_are_spread_test_by_test() -> None:
    assert _place_group(TESTS_FOLDER / "cluster" / "test_join_errors.py") is None
    assert _place_group(TESTS_FOLDER / "cluster" / "test_ray_ports.py") is None


def test_the_simulated_cluster_s_node_tests_have_a_cluster_group_of_their_own() -> None:
    names = list(SHARED_GROUPS)
    for fixture in ("two_workers", "push_worker"):
        assert SHARED_GROUPS[fixture] == "ray-cluster"
        assert names.index(fixture) < names.index("ray_cluster")  # the first one a test uses wins
    assert SHARED_GROUPS["ray_cluster"] == "ray"


def test_a_browser_alone_groups_nothing_the_console_s_server_does() -> None:
    assert "browser" not in SHARED_GROUPS and "browser" in CHEAP_FIXTURES
    assert SHARED_GROUPS["console_server"] == "browser"


def test_a_file_of_no_named_place_is_in_no_place_group() -> None:
    assert _place_group(TESTS_FOLDER / "unit" / "test_parallel_groups.py") is None
    assert _place_group(TESTS_FOLDER.parent / "benchmarks" / "cluster" / "test_join.py") is None


def test_every_place_named_exists() -> None:
    missing = [place for place in PLACE_GROUPS if not (TESTS_FOLDER / place).exists()]
    assert missing == []
