"""The distribution installs one import package, ``roost``, and lives beside a user's own modules.

Guarantees:

- **One namespace.** The wheel's top-level names are the ``roost`` package and its ``.dist-info``; it
  builds without a warning (a package-data folder missing from the packages list was one).
- **No collision with a user's modules.** An application with its own ``storage.py``,
  ``scheduler.py``, ``actors.py`` and ``transport.py`` beside it is served by ``roost serve`` and its
  modules stay its own: before the move, ``import storage`` inside Roost found the user's file.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.support import ServerProcess

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def test_the_wheel_installs_exactly_one_top_level_package_and_builds_without_warnings(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "Warning" not in out.stderr, out.stderr
    (wheel,) = tmp_path.glob("roost-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"roost"}
    # the parts that are data, not modules, are in it
    assert "roost/client/web/roost.js" in names
    assert any(n.startswith("roost/examples/sample_docs/") and n.endswith(".md") for n in names)
    assert "roost/py.typed" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as zf:
        assert re.search(r"^roost = roost\.", zf.read(entry_points).decode(), re.M)


USER_APP = """
    import actors
    import scheduler
    import storage
    import transport

    from roost import Actor, callable, create_app


    class Note(Actor):
        kind = "note"
        initial_state = {"text": ""}

        @callable
        async def write(self, text: str) -> str:
            # the user's own modules, not Roost's
            mine = storage.SUFFIX + scheduler.SUFFIX + actors.SUFFIX + transport.SUFFIX
            self.set_state({"text": text + mine})
            return self.state["text"]


    app = create_app([Note])
"""


def test_an_app_with_its_own_storage_scheduler_actors_and_transport_modules_is_served(tmp_path: Path) -> None:
    for i, module in enumerate(("storage", "scheduler", "actors", "transport")):
        (tmp_path / f"{module}.py").write_text(f"SUFFIX = '{i}'\n")
    (tmp_path / "myapp.py").write_text(textwrap.dedent(USER_APP))
    roost = str(Path(sys.executable).with_name("roost"))
    data = tmp_path / "data"
    argv = [roost, "serve", "myapp:app", "--data", str(data), "--port", "0"]  # the console script
    server = ServerProcess(data, cwd=tmp_path, argv=argv).start(timeout=30)
    try:
        reply = httpx.post(f"{server.http}/agents/note/n1/rpc/write", json=["hi"], timeout=10)
        assert reply.status_code == 200, reply.text
        assert reply.json()["result"] == "hi0123"
    finally:
        server.kill()
