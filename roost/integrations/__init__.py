"""Bridges from other projects' APIs onto Roost actors, each in a module of its own that imports the
other project (an optional extra); ``import roost`` imports none of them.

- :mod:`roost.integrations.openai_agents`: ``RoostSession``, the OpenAI Agents SDK's ``Session`` on a
  Roost actor (``pip install 'roost[openai-agents]'``; README, *OpenAI Agents SDK sessions*).
"""

__all__: list[str] = []
