"""KnowSphere Memory service: owns session summaries, working memory, long-term memory items and
document affinity.
"""

SERVICE_NAME = "memory"
