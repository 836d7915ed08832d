"""The custom span attributes KnowSphere sets, registered in one place.

Standard attributes (``rpc.*``, ``messaging.*``, ``gen_ai.*``, ``http.*``) come from the
instrumentations and semantic conventions; only attributes of our own domain live here.
"""

from typing import Final

TENANT_ID: Final = "ks.tenant.id"
USER_ID: Final = "ks.user.id"
SESSION_ID: Final = "ks.session.id"
TURN_ID: Final = "ks.turn.id"
KNOWLEDGE_BASE_IDS: Final = "ks.knowledge_base.ids"
DOCUMENT_ID: Final = "ks.document.id"
RESULT_COUNT: Final = "ks.result.count"
ERROR_CODE: Final = "ks.error.code"
