"""Calls: actor-to-actor calls get committed results, a call chain back to an actor fails fast, and
only public ``@callable`` methods with matching arguments can be called.

Real SQLite files under ``tmp_path``, a ``FakeClock`` for idle time and timeouts, no sleeps: every wait
is on a condition (``wait_for``, ``settle``, an ``asyncio.Event``) or on the fake clock.
Each test talks to its own actor name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.actors import (
    ActorNotFound,
    RpcError,
)
from roost.examples.kinds import Counter
from roost.storage.paths import actor_path
from tests.runtime_support import (
    Caller,
    Partner,
    call_error,
    make_kit,
)


# -- 10. actor-to-actor calls and what is callable ----------------------------------------------------
async def test_actor_calls_another_actor_and_gets_its_committed_result(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Caller, Partner, Counter)
    async with kit:
        c = kit.connect("caller", "a2a-1")
        assert await c.call("bump", "a2a-target", 3) == 3
        assert await c.call("bump", "a2a-target", 4) == 7
        assert await kit.call("counter", "a2a-target", "get") == 7


async def test_a_read_only_call_to_an_actor_never_created_is_not_found_and_creates_nothing(
    tmp_path: Path,
) -> None:
    """As over HTTP (404): from another actor, the caller's client is told ``not_found``; from the
    kit (in process) ``ActorNotFound`` is raised; no file and no directory row are made."""
    kit, _ = make_kit(tmp_path, Caller, Partner, Counter)
    async with kit:
        c = kit.connect("caller", "a2a-ro")
        err = await call_error(c, "peek", "a2a-missing")
        assert (err.code, err.message) == ("not_found", "actor counter/'a2a-missing' does not exist")
        with pytest.raises(ActorNotFound):
            await kit.call("counter", "a2a-missing", "get")
        assert ("counter", "a2a-missing") not in kit.registry.hosts
        assert not actor_path(kit.registry.config.data_dir, "counter", "a2a-missing").exists()
        assert not kit.registry.exists("counter", "a2a-missing")
        assert kit.registry.directory is not None
        assert kit.registry.directory.get("counter", "a2a-missing") is None

        assert await c.call("bump", "a2a-missing", 2) == 2  # a call that writes creates it
        assert await c.call("peek", "a2a-missing") == 2  # and now it is read


async def test_call_chain_back_to_an_actor_fails_with_reentrant_call_instead_of_hanging(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Caller, Partner, Counter)
    async with kit:
        c = kit.connect("caller", "a2a-2")
        err = await call_error(c, "ping", "a2a-partner")
        assert err.code == "reentrant_call"
        # both actors are free again
        assert await c.call("add", 1, 2) == 3
        assert await kit.call("caller", "a2a-2", "me") == "caller"
        assert await kit.call("partner", "a2a-partner", "back", "a2a-2") == "caller"  # B → A is no cycle


async def test_only_public_callable_methods_can_be_called(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Caller, Partner, Counter)
    async with kit:
        c = kit.connect("caller", "a2a-3")
        for method in ("missing", "_secret", "__init__", "helper", "on_start", "set_state", "__class__"):
            err = await call_error(c, method)
            assert err.code == "method_not_found", method
            with pytest.raises(RpcError) as info:
                await kit.call("caller", "a2a-3", method)
            assert info.value.code == "method_not_found", method
        assert await c.call("me") == "caller"


async def test_wrong_arguments_give_invalid_arguments(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Caller, Partner, Counter)
    async with kit:
        c = kit.connect("caller", "a2a-4")
        for args, kwargs in (((1,), {}), ((1, 2, 3), {}), ((1,), {"c": 2}), ((), {"a": 1, "b": 2, "z": 3})):
            err = await call_error(c, "add", *args, **kwargs)
            assert err.code == "invalid_arguments", (args, kwargs)
        assert await c.call("add", 1, b=2) == 3
        # add(a: int, b: int): a string for b is refused before the method runs
        assert (await call_error(c, "add", 1, "x")).code == "invalid_arguments"
