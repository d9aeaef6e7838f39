"""Which xdist group a test file's tests get by its place (``tests/parallel_groups.py``): the
real Ray heads of ``tests/cluster`` in two groups beside the simulated cluster's, and a place
named there that no longer exists is caught (its tests would silently join another group)."""

from __future__ import annotations

from parallel_groups import PLACE_GROUPS, TESTS_FOLDER, _place_group


def test_the_real_heads_split_into_loopback_and_two_host_groups() -> None:
    assert _place_group(TESTS_FOLDER / "cluster" / "test_join.py") == "ray-heads"
    assert _place_group(TESTS_FOLDER / "cluster" / "test_models_on_workers.py") == "ray-heads"
    assert _place_group(TESTS_FOLDER / "cluster" / "test_two_hosts_docker.py") == "ray-hosts"
    assert _place_group(TESTS_FOLDER / "cluster" / "test_two_hosts_registry.py") == "ray-hosts"


def test_a_file_of_no_named_place_is_in_no_place_group() -> None:
    assert _place_group(TESTS_FOLDER / "unit" / "test_parallel_groups.py") is None
    assert _place_group(TESTS_FOLDER.parent / "benchmarks" / "cluster" / "test_join.py") is None


def test_every_place_named_exists() -> None:
    missing = [place for place in PLACE_GROUPS if not (TESTS_FOLDER / place).exists()]
    assert missing == []
