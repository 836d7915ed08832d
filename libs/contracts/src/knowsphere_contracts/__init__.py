"""KnowSphere contracts.

- ``knowsphere.<service>.v1`` (beside this package): Python generated from ``proto/`` by
  ``make proto``; never edited by hand.
- :mod:`knowsphere_contracts.events`: NATS event models and their subjects.
- :mod:`knowsphere_contracts.services`: the catalogue of internal gRPC services.
"""
