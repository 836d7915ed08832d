"""What may go into a log line or an error message: credentials taken out of URLs and free text.

- :func:`redact_url` — a URL (a database, NATS, S3 … URL) with the password of its userinfo, a NATS
  token given as the user, and the value of every credential-like parameter (``password=``,
  ``secret=``, ``token=``, ``X-Amz-Signature=`` …) replaced by ``***``. Scheme, user name, host, port,
  path and the other parameters stay, so the message still says where.
- :func:`redact_text` — the same for every URL and ``name=value`` pair inside a longer text (an
  exception's message, a provider's error body), plus ``Bearer <token>`` and each of the given
  ``secrets`` wherever they appear.

Both are pure string functions: they never raise and never parse with a library that could fail on a
malformed URL and print it whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "***"

# A parameter is a credential when its name, lower-cased, contains one of these (client_secret,
# access_token, sslpassword, X-Amz-Security-Token, X-Amz-Credential …) or is one of the short names.
SECRET_PARAMETER_MARKERS = (
    "password",
    "passwd",
    "secret",
    "token",
    "signature",
    "credential",
    "apikey",
    "api_key",
    "api-key",
)
SECRET_PARAMETER_NAMES = frozenset({"pwd", "key", "sig", "auth"})

# Schemes whose lone userinfo is a secret: NATS takes an auth token as nats://<token>@host.
TOKEN_AS_USER_SCHEMES = ("nats", "tls")

# ``Bearer <token>``: the token is redacted when it looks like one (at least BEARER_MIN_CHARS of the
# token alphabet, with a digit or at least BEARER_LONG_CHARS long), so "Bearer token required" stays.
BEARER_MIN_CHARS = 8
BEARER_LONG_CHARS = 20

# scheme://user:password@host — the password runs to the last "@" before whitespace, so one holding
# an unencoded "@", "/" or "?" is hidden whole rather than in part (an "@" later in the path hides
# the host too: showing less is the safe way to be wrong).
_USERINFO = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*):(?P<password>\S*)@(?=[^\s@/?#]*(?:[/?#\s]|$))"
)
_TOKEN_USER = re.compile(
    r"(?P<head>\b(?:" + "|".join(TOKEN_AS_USER_SCHEMES) + r")://)(?P<token>[^\s:/@]+)@", re.IGNORECASE
)
# name=value after the start, whitespace, "?", "&", ";" or "," (URL parameters, libpq DSNs, logfmt).
_PARAMETER = re.compile(r"(?P<head>(?:^|(?<=[\s?&;,]))(?P<name>[A-Za-z0-9_.-]+)=)(?P<value>[^\s&#;,]*)")
_BEARER = re.compile(r"(?P<head>\bBearer\s+)(?P<token>[A-Za-z0-9._~+/=-]+)", re.IGNORECASE)


def _is_secret_parameter(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_PARAMETER_NAMES or any(marker in lowered for marker in SECRET_PARAMETER_MARKERS)


def _parameter(match: re.Match[str]) -> str:
    if not match.group("value") or not _is_secret_parameter(match.group("name")):
        return match.group(0)
    return match.group("head") + REDACTED


def _bearer(match: re.Match[str]) -> str:
    token = match.group("token")
    looks_like_a_token = len(token) >= BEARER_MIN_CHARS and (
        len(token) >= BEARER_LONG_CHARS or any(char.isdigit() for char in token)
    )
    return match.group("head") + REDACTED if looks_like_a_token else match.group(0)


def redact_text(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with each of ``secrets`` (verbatim), URL passwords, NATS tokens, credential-like
    ``name=value`` parameters and bearer tokens replaced by ``***``."""
    # Longest first, so a secret that contains another is replaced whole.
    for secret in sorted({s.strip() for s in secrets if s and s.strip()}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _USERINFO.sub(lambda m: f"{m.group('head')}:{REDACTED}@", text)
    text = _TOKEN_USER.sub(lambda m: f"{m.group('head')}{REDACTED}@", text)
    text = _PARAMETER.sub(_parameter, text)
    return _BEARER.sub(_bearer, text)


def redact_url(url: str) -> str:
    """``url`` as it may be shown: ``postgresql+asyncpg://app:***@db:5432/ks?sslpassword=***``."""
    return redact_text(url)
