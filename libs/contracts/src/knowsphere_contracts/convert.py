"""Conversions between Python values and the protobuf well-known types every service uses."""

from __future__ import annotations

from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp


def timestamp(value: datetime | None) -> Timestamp | None:
    """A protobuf Timestamp of an aware datetime; None stays None (the field is left unset)."""
    if value is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp
