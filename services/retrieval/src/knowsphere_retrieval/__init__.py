"""KnowSphere Retrieval service: owns the vector, lexical and graph indexes and the chunk store; serves
search, grep, list, document info, graph queries and indexing.
"""

SERVICE_NAME = "retrieval"
