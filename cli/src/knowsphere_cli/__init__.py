"""``ks``, the KnowSphere command-line client: the gateway's HTTP API from a terminal."""
