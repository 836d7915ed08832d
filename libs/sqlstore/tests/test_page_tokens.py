"""The page tokens the list requests hand out and take back."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from knowsphere_sqlstore.pages import decode_page_token, encode_page_token


def test_a_token_gives_back_the_values_it_was_made_of() -> None:
    assert decode_page_token(encode_page_token(["bravo"]), 1) == ["bravo"]
    # A document page carries the last one's create time as the text of its float: read back, it
    # is the very same float, so the next page starts exactly after it.
    rank = datetime(2025, 1, 2, 3, 4, 5, 123457, tzinfo=UTC).timestamp()
    token = encode_page_token([repr(rank), "doc-7"])
    text, last_id = decode_page_token(token, 2)
    assert (float(text), last_id) == (rank, "doc-7")


@pytest.mark.parametrize(
    "token",
    [
        "not-a-token",
        encode_page_token(["a", "b"]),  # a token of another list (two values where one is expected)
        base64.urlsafe_b64encode(json.dumps({"a": "b"}).encode()).decode(),
        base64.urlsafe_b64encode(json.dumps([1]).encode()).decode(),
    ],
)
def test_anything_else_is_refused_naming_the_field(token: str) -> None:
    with pytest.raises(ValueError, match=r"^page_token: not a token from a previous response$"):
        decode_page_token(token, 1)
