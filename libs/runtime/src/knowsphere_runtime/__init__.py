"""KnowSphere service runtime: what every service needs to start, talk and stop.

- :mod:`.settings` — the settings base (``KS_<SERVICE>_`` prefix, fail fast on missing values).
- :mod:`.identity` — tenant and user identity of the current call, and how it travels.
- :mod:`.rpc` — gRPC server and channel factories (deadlines, retries, health, reflection,
  tracing, identity).
- :mod:`.bus` — NATS through FastStream, with trace context and identity in headers.
- :mod:`.workflows` — Temporal client with tracing and identity propagation.
- :mod:`.lifecycle` — running a service until SIGTERM and stopping it gracefully.
"""
