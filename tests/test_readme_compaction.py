"""The README's compaction block (*Long sessions: compaction and reset*) is a valid ``roost.toml``,
and a chat agent with its budgets (a smaller message budget, so the test is short) compacts."""

from __future__ import annotations

import re
from pathlib import Path

from roost.agent import ChatAgent
from roost.agent.config import Budget, load_config
from roost.testing import ActorKit
from tests.agent_support import drive, event_types

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
(BLOCK,) = [
    m.group(1)
    for m in re.finditer(r"^```toml\n(.*?)^```", README, re.M | re.S)
    if m.group(1).startswith("# roost.toml: compaction")
]


def test_the_readme_block_is_a_valid_roost_toml(tmp_path: Path) -> None:
    path = tmp_path / "roost.toml"
    path.write_text(BLOCK)
    context = load_config(path).context
    assert context.compact == Budget(messages=40, tokens=8000)
    assert context.reset == Budget(hops=50)
    assert context.keep_recent == 2


async def test_a_chat_agent_with_the_readme_settings_compacts(tmp_path: Path, data_dir: Path) -> None:
    path = tmp_path / "roost.toml"
    path.write_text(BLOCK.replace("messages = 40", "messages = 4") + "\n[agent]\nstream_pace = 0.01\n")
    config = load_config(path)

    class Readme(ChatAgent):
        kind = "readme"

    Readme.config = config
    async with ActorKit([Readme], data_dir) as kit:
        c = kit.connect("readme", "a")
        for text in ("one", "two", "three", "four"):
            await c.call("send", text, session_id="s")
        await drive(kit, lambda: "context_compacted" in event_types(c), step=0.01)
        card = await c.call("context", "s")
        assert card["context"]["summary"].startswith("user: one\nassistant: You wrote 1 word")
        assert len((await c.call("messages", session_id="s"))["messages"]) == 8
