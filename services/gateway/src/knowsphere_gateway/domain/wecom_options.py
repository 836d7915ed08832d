"""The numbers of the WeCom channels, each a gateway setting (``KS_GATEWAY_WECOM_…``) with WeCom's own
figure as its default where WeCom sets one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from knowsphere_gateway.domain.wecom import DEFAULT_TIMESTAMP_TOLERANCE_SECONDS


@dataclass(frozen=True)
class WeComOptions:
    timestamp_tolerance_seconds: float = DEFAULT_TIMESTAMP_TOLERANCE_SECONDS
    """How far a callback's timestamp may be from the gateway's clock before it is refused as stale."""
    max_callback_bytes: int = 64 * 1024
    """Largest callback body (WeCom's are a few kilobytes); checked before the XML or JSON is parsed."""
    message_max_bytes: int = 2048
    """WeCom's limit on an application's text or markdown message, in UTF-8 bytes."""
    max_message_parts: int = 5
    """Most messages one answer is sent in (WeCom drops more than 30 a minute to one user)."""
    stream_max_bytes: int = 20480
    """WeCom's limit on an AI bot's streamed message, in UTF-8 bytes."""
    stream_ttl_seconds: float = 600.0
    """How long an AI bot's stream is kept (WeCom polls one for six minutes at most)."""
    max_streams: int = 1000
    """Most AI bot streams kept at once in one gateway process."""
    message_claim_seconds: float = 86_400.0
    """How long a WeCom message id is remembered, so a message sent again makes no second turn."""
    max_pending_turns: int = 256
    """Most WeCom turns one gateway process runs at once; more are answered as busy."""
    sources_heading: str = "来源"
    """The heading over an answer's footnotes (WeCom shows plain text: no links beside the markers)."""


DEFAULT_WECOM_OPTIONS: Final = WeComOptions()

__all__ = ["DEFAULT_WECOM_OPTIONS", "WeComOptions"]
