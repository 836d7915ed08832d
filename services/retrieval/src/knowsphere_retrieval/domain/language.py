"""The language vocabulary retrieval uses, defined once in ``knowsphere_contracts.language``."""

from knowsphere_contracts.language import cjk_share, detect_language, model_reads

__all__ = ["cjk_share", "detect_language", "model_reads"]
