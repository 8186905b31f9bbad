"""Examples: the kinds a bare ``roost serve`` hosts (:mod:`roost.examples.kinds`: ``counter``,
``room`` and the ``docs`` agent of :mod:`roost.examples.docs_agent`), and the demos behind
``make demo`` (:mod:`roost.examples.agent_demo`) and ``make demo-crash`` (:mod:`roost.examples.demo`),
and the fixtures of the MCP conformance suite (:mod:`roost.examples.mcp_conformance`).

They are users of the public API, not part of the runtime: nothing in :mod:`roost.actors`,
:mod:`roost.agent` or :mod:`roost.storage` imports them.
"""
