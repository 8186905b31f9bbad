"""The durable agent runtime: turns, plans, events, approvals, sessions, projects, background jobs.

See ``docs/design.md`` (*Agent runtime*) for the data flow and state machines, :mod:`actors.agent.agent`
for the class users subclass, :mod:`actors.agent.catalog` for tools.
"""

from actors.agent.agent import Agent
from actors.agent.catalog import Catalog, NeedInput, Tool, ToolCancelled, ToolContext, tool
from actors.agent.config import AgentConfig, load_config
from actors.agent.models import (
    DeterministicPlanner,
    Model,
    ModelError,
    ModelRequest,
    ModelStep,
    OpenAICompatibleModel,
    ToolCall,
)
from actors.agent.orchestrator import Verdict
from actors.agent.payloads import BlobStore, sanitize

__all__ = [
    "Agent",
    "AgentConfig",
    "BlobStore",
    "Catalog",
    "DeterministicPlanner",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelStep",
    "NeedInput",
    "OpenAICompatibleModel",
    "Tool",
    "ToolCall",
    "ToolCancelled",
    "ToolContext",
    "Verdict",
    "load_config",
    "sanitize",
    "tool",
]
