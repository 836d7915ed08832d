"""Errors a parser raises: the format is not one we read, or the file is not what it claims to be."""

from __future__ import annotations


class UnsupportedFormat(ValueError):
    """The file's extension / content type is not one of the formats we parse."""


class ParseError(ValueError):
    """The file claims a supported format but its content is empty, corrupt or not that format."""
