"""The stages of ingestion behind one stage engine: parse, chunk, embed, index, graph, and what
happens when a document fails or a knowledge base changes its embedding model.

``engine`` runs a stage over a batch of documents (supersede checks, statuses, progress, timing,
permanent vs retryable outcomes); each other module is one stage's work. ``activities`` binds them to
the activity names the workflows call.
"""
