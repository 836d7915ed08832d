"""Limits of agents and orchestrators as data: the conversation service enforces them and the gateway
states them in its request schemas, both from here."""

from __future__ import annotations

from typing import Final

NAME_PATTERN: Final = r"^[a-z][a-z0-9_-]{1,63}$"
"""Agent and orchestrator names (unique per tenant, used in routing configuration)."""
NAME_RULE: Final = "2-64 characters: lower-case letters, digits, '-' and '_', starting with a letter"
MAX_DISPLAY_NAME_CHARS: Final = 200
MAX_DESCRIPTION_CHARS: Final = 2_000
MAX_SYSTEM_PROMPT_CHARS: Final = 20_000
MAX_ID_CHARS: Final = 128
"""Ids an agent or orchestrator names (models, tools, knowledge bases, skills, agents)."""
MAX_TOOLS: Final = 64
MAX_SKILLS: Final = 32
MAX_MEMBER_AGENTS: Final = 32
MAX_CONFIG_BYTES: Final = 64 * 1024
"""An orchestrator's ``config``, encoded as stored (a ``google.protobuf.Struct``)."""
LLM: Final = "LLM"
VISION: Final = "VISION"
AGENT_MODEL_TYPES: Final = (LLM, VISION)
"""What an agent's model is used for (the orchestration spec's names): LLM always; VISION when the agent
reads a message's images itself (its model must be a VLM model)."""

__all__ = [
    "AGENT_MODEL_TYPES",
    "LLM",
    "MAX_CONFIG_BYTES",
    "MAX_DESCRIPTION_CHARS",
    "MAX_DISPLAY_NAME_CHARS",
    "MAX_ID_CHARS",
    "MAX_MEMBER_AGENTS",
    "MAX_SKILLS",
    "MAX_SYSTEM_PROMPT_CHARS",
    "MAX_TOOLS",
    "NAME_PATTERN",
    "NAME_RULE",
    "VISION",
]
