"""The durable agent runtime: turns, plans, events, approvals, sessions, projects, background jobs.

See ``docs/design.md`` (*Agent runtime*) for the data flow and state machines, :mod:`roost.agent.agent`
for the class users subclass, :mod:`roost.agent.catalog` for tools.
"""

from roost.agent.agent import Agent
from roost.agent.catalog import Catalog, NeedInput, Tool, ToolCancelled, ToolContext, tool
from roost.agent.chat import ChatAgent, ChatMessage, DeterministicChat
from roost.agent.config import AgentConfig, load_config
from roost.agent.delegation import delegate_tool
from roost.agent.interfaces import Verdict
from roost.agent.mcp_config import McpServer
from roost.agent.models import (
    DeterministicPlanner,
    Model,
    ModelError,
    ModelRequest,
    ModelStep,
    StreamEnd,
    StreamingModel,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from roost.agent.openai import OpenAICompatibleModel
from roost.agent.payloads import BlobStore, sanitize
from roost.agent.sandbox import Limits, Manifest, PermissionsProfile, SandboxError, SandboxSpec, Workspace
from roost.agent.sandbox_tools import WORKSPACE_TOOLS
from roost.agent.status import (
    ApprovalStatus,
    ItemStatus,
    JobStatus,
    RunStatus,
    TurnStatus,
    VerificationResult,
    Waiting,
)

__all__ = [
    "WORKSPACE_TOOLS",
    "Agent",
    "AgentConfig",
    "ApprovalStatus",
    "BlobStore",
    "Catalog",
    "ChatAgent",
    "ChatMessage",
    "DeterministicChat",
    "DeterministicPlanner",
    "ItemStatus",
    "JobStatus",
    "Limits",
    "Manifest",
    "McpServer",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelStep",
    "NeedInput",
    "OpenAICompatibleModel",
    "PermissionsProfile",
    "RunStatus",
    "SandboxError",
    "SandboxSpec",
    "StreamEnd",
    "StreamingModel",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolCancelled",
    "ToolContext",
    "TurnStatus",
    "Usage",
    "Verdict",
    "VerificationResult",
    "Waiting",
    "Workspace",
    "delegate_tool",
    "load_config",
    "sanitize",
    "tool",
]
