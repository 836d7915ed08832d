"""KnowSphere ModelHub service: owns the model registry (encrypted keys), provider adapters and
defaults; every model call goes through it.
"""

SERVICE_NAME = "modelhub"
