"""KnowSphere Gateway service: the public REST/SSE and OpenAI-compatible API."""

SERVICE_NAME = "gateway"
