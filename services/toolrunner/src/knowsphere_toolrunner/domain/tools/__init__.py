"""The tools, one module per concern, each behind :class:`knowsphere_toolrunner.domain.tools.base.Tool`."""
