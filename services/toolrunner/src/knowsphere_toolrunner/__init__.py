"""KnowSphere ToolRunner service: owns the tool catalog, skills, stored tool results and sandboxed
execution.
"""

SERVICE_NAME = "toolrunner"
