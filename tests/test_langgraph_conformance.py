"""``roost.integrations.langgraph`` against LangGraph's own checkpointer conformance suite
(``langgraph-checkpoint-conformance``, PyPI): every capability, base and extended, run on
``AsyncRoostSaver`` and on ``RoostSaver`` over a Roost server on 127.0.0.1 (guarantee 1)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport

from roost.integrations.langgraph import AsyncRoostSaver, CheckpointThread, RoostSaver, RunIndex
from roost.transport import create_app
from tests.conftest import NO_RATE_LIMITS
from tests.support import serve_in_process


@pytest.fixture
async def roost_url(data_dir: Path) -> AsyncIterator[str]:
    app = create_app([CheckpointThread, RunIndex], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        yield f"ws://{addr}"


def failures(report: CapabilityReport) -> dict[str, list[str]]:
    return {name: result.failures for name, result in report.results.items() if result.failures}


def counts(report: CapabilityReport) -> dict[str, int]:
    return {name: result.tests_passed for name, result in report.results.items()}


#: Tests per capability in langgraph-checkpoint-conformance 0.0.2 (so a capability that ran none fails).
SUITE = {
    "put": 17,
    "put_writes": 10,
    "get_tuple": 10,
    "list": 16,
    "delete_thread": 5,
    "delete_for_runs": 7,
    "copy_thread": 8,
    "prune": 8,
}


@pytest.mark.parametrize("saver_class", [AsyncRoostSaver, RoostSaver])
async def test_the_checkpointer_contract_every_capability(
    roost_url: str, saver_class: type[AsyncRoostSaver]
) -> None:
    @checkpointer_test(name=saver_class.__name__)
    async def roost_saver() -> AsyncGenerator[BaseCheckpointSaver[str], None]:
        saver = saver_class(url=roost_url, run_index="conformance")
        try:
            yield saver
        finally:
            await saver.aclose()
            if isinstance(saver, RoostSaver):
                saver.close()

    report = await validate(roost_saver)
    assert failures(report) == {}
    assert {name for name, result in report.results.items() if result.detected} == {
        cap.value for cap in ALL_CAPABILITIES
    }
    assert report.conformance_level() == "FULL"
    assert counts(report) == SUITE
