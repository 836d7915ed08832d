"""Opaque paging tokens: the sort values of the last item of a page, for the next page to start after."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence


def encode_page_token(values: Sequence[str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(values)).encode()).decode()


def decode_page_token(token: str, size: int) -> list[str]:
    """The ``size`` values of a token; ValueError naming ``page_token`` for anything else."""
    try:
        values = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError) as error:
        raise ValueError("page_token: not a token from a previous response") from error
    if not isinstance(values, list) or len(values) != size or not all(isinstance(v, str) for v in values):
        raise ValueError("page_token: not a token from a previous response")
    return values
