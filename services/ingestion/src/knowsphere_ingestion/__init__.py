"""KnowSphere Ingestion service: owns knowledge bases, documents and blobs; runs the ingestion workflow
on Temporal.
"""

SERVICE_NAME = "ingestion"
