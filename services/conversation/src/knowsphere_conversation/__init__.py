"""KnowSphere Conversation service: runs the conversation graph; owns agents, orchestrators, sessions
and checkpoints.
"""

SERVICE_NAME = "conversation"
