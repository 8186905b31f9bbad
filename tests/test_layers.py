"""The layer contracts of ``make lint`` (import-linter, ``[tool.importlinter]`` in pyproject.toml) stay
complete as the code grows.

- **Every module of the actor core is protected but its public faces**: the contract that keeps the
  layers above on ``roost.actors`` and ``roost.actors.extension`` lists modules one by one, so a new
  module of ``roost/actors/`` must be added to it; this test fails until it is.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = {"roost.actors", "roost.actors.extension"}


def test_every_module_of_the_actor_core_but_its_public_faces_is_protected() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (protected,) = [c for c in contracts if c["type"] == "protected"]
    modules = {
        "roost.actors" + ("" if p.stem == "__init__" else f".{p.stem}")
        for p in (ROOT / "roost" / "actors").glob("*.py")
    }
    assert set(protected["protected_modules"]) == modules - PUBLIC
    assert protected["allowed_importers"] == ["roost.actors"]
