"""What the gateway decides itself, without I/O: API tokens and which role may call which route."""
