"""The signed identity token: the only form in which a caller's identity crosses a process boundary.

The edge (the gateway, once it has authenticated the caller) binds an :class:`Identity`; every
outgoing gRPC call, NATS message and workflow input then carries a short-lived token signed with the
sending service's Ed25519 key (a JWT: ``iss`` the service, ``ten`` the tenant, ``sub`` the user,
``aud`` ``knowsphere``, ``iat``/``exp``). A receiving service trusts an identity only when the token's
signature verifies against one of its trusted public keys (the key id is the issuing service's name)
and it has not expired; plain ``ks-tenant-id`` headers, a forged or foreign-signed token, an expired
one: all are refused.

Keys come from :class:`IdentitySettings` (``KS_IDENTITY_*``): this service's private key file and a
folder of trusted public keys, one ``<issuer>.pub`` per service. ``python -m
knowsphere_runtime.identity_token generate DIR NAME…`` writes such a set; ``ks-stack`` does it for
``make up``. A process with no key configured (a test, a single-process tool) makes an ephemeral key
and trusts only itself, so nothing it signs is accepted anywhere else.

Tokens are cached both ways: an issued token is reused for half its lifetime, and a verified token's
identity is remembered until it expires (bounded), so a call costs a dictionary lookup, not a
signature, in the common case.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from knowsphere_runtime.identity import _ID_PATTERN, TENANT_KEY, USER_KEY, Identity, IdentityError

log = structlog.get_logger(__name__)

TOKEN_KEY = "ks-identity"
"""The gRPC metadata key and NATS header that carry the token."""
AUDIENCE = "knowsphere"
ALGORITHM = "EdDSA"
LEGACY_KEYS = (TENANT_KEY, USER_KEY)
PRIVATE_SUFFIX = ".key"
PUBLIC_SUFFIX = ".pub"
MAX_TOKEN_CHARS = 4096
# A sender's clock may run a little ahead of the receiver's.
CLOCK_LEEWAY_SECONDS = 30
_VERIFIED_CACHE_SIZE = 10_000


class IdentityTokenError(IdentityError):
    """A token is missing, malformed, forged, from an untrusted issuer or expired; the message says which."""


class IdentitySettings(BaseSettings):
    """``KS_IDENTITY_*``: this service's signing key, the keys it trusts and token lifetimes."""

    model_config = SettingsConfigDict(env_prefix="KS_IDENTITY_", extra="ignore", frozen=True)

    signing_key_file: Path | None = Field(
        default=None, description="PEM Ed25519 private key of this service; the file stem is the issuer"
    )
    trusted_keys_dir: Path | None = Field(
        default=None, description="folder of <issuer>.pub PEM public keys whose tokens this service accepts"
    )
    token_ttl_seconds: float = Field(default=300.0, gt=0, le=3600, description="lifetime of a call's token")
    message_token_ttl_seconds: float = Field(
        default=6 * 3600.0,
        gt=0,
        le=7 * 24 * 3600,
        description="lifetime of a token on a NATS message (a queued turn may wait for a replica)",
    )
    workflow_token_ttl_seconds: float = Field(
        default=24 * 3600.0,
        gt=0,
        le=30 * 24 * 3600,
        description="lifetime of a workflow input's token; renewed while the workflow runs",
    )


@dataclass(frozen=True)
class VerifiedToken:
    identity: Identity
    issuer: str
    expires_at: float


def _load_private(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError) as error:
        raise IdentityTokenError(f"cannot read the identity signing key {path}: {error}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise IdentityTokenError(f"{path} is not an Ed25519 private key")
    return key


def _load_public(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as error:
        raise IdentityTokenError(f"cannot read the trusted identity key {path}: {error}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise IdentityTokenError(f"{path} is not an Ed25519 public key")
    return key


class TokenAuthority:
    """Issues this service's identity tokens and verifies the tokens of the services it trusts."""

    def __init__(
        self,
        issuer: str,
        signing_key: Ed25519PrivateKey,
        trusted: Mapping[str, Ed25519PublicKey],
        *,
        token_ttl: float = 300.0,
        message_token_ttl: float = 6 * 3600.0,
        workflow_token_ttl: float = 24 * 3600.0,
    ) -> None:
        if not _ID_PATTERN.fullmatch(issuer):
            raise IdentityTokenError(
                f"issuer {issuer!r} has characters outside letters, digits and _ . : @ -"
            )
        self.issuer = issuer
        self._signing_key = signing_key
        self._trusted = dict(trusted)
        self.token_ttl = token_ttl
        self.message_token_ttl = message_token_ttl
        self.workflow_token_ttl = workflow_token_ttl
        self._issued: dict[tuple[Identity, float], tuple[str, float]] = {}
        self._verified: OrderedDict[str, VerifiedToken] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def ephemeral(cls, issuer: str = "process", **ttl: float) -> TokenAuthority:
        """A fresh key that only this authority trusts."""
        key = Ed25519PrivateKey.generate()
        return cls(issuer, key, {issuer: key.public_key()}, **ttl)

    @classmethod
    def from_settings(cls, settings: IdentitySettings, *, default_issuer: str) -> TokenAuthority:
        ttl = {
            "token_ttl": settings.token_ttl_seconds,
            "message_token_ttl": settings.message_token_ttl_seconds,
            "workflow_token_ttl": settings.workflow_token_ttl_seconds,
        }
        if settings.signing_key_file is None:
            log.warning(
                "no identity signing key configured (KS_IDENTITY_SIGNING_KEY_FILE): using an ephemeral key; "
                "no other process will accept this one's calls"
            )
            return cls.ephemeral(default_issuer, **ttl)
        issuer = settings.signing_key_file.name.removesuffix(PRIVATE_SUFFIX)
        signing_key = _load_private(settings.signing_key_file)
        trusted: dict[str, Ed25519PublicKey] = {}
        if settings.trusted_keys_dir is not None:
            if not settings.trusted_keys_dir.is_dir():
                raise IdentityTokenError(
                    f"KS_IDENTITY_TRUSTED_KEYS_DIR={settings.trusted_keys_dir} is not a folder"
                )
            for path in sorted(settings.trusted_keys_dir.glob(f"*{PUBLIC_SUFFIX}")):
                trusted[path.name.removesuffix(PUBLIC_SUFFIX)] = _load_public(path)
        # A service always accepts its own tokens (a workflow's renewal, its own messages).
        trusted.setdefault(issuer, signing_key.public_key())
        return cls(issuer, signing_key, trusted, **ttl)

    @property
    def trusted_issuers(self) -> list[str]:
        return sorted(self._trusted)

    def issue(self, identity: Identity, *, ttl: float | None = None) -> str:
        """A token for ``identity`` (reused while more than half its lifetime is left)."""
        lifetime = self.token_ttl if ttl is None else ttl
        now = time.time()
        key = (identity, lifetime)
        cached = self._issued.get(key)
        if cached is not None and cached[1] - now > lifetime / 2:
            return cached[0]
        expires = now + lifetime
        token = jwt.encode(
            {
                "iss": self.issuer,
                "aud": AUDIENCE,
                "ten": identity.tenant_id,
                "sub": identity.user_id,
                "iat": int(now),
                "exp": int(expires),
            },
            self._signing_key,
            algorithm=ALGORITHM,
            headers={"kid": self.issuer},
        )
        with self._lock:
            if len(self._issued) >= _VERIFIED_CACHE_SIZE:
                self._issued.clear()
            self._issued[key] = (token, expires)
        return token

    def verify(self, token: str | bytes, *, allow_expired: bool = False) -> VerifiedToken:
        """The identity ``token`` vouches for; :class:`IdentityTokenError` when it does not verify.

        ``allow_expired`` checks only who signed it (ownership of something stored with the token).
        """
        if isinstance(token, bytes):
            token = token.decode("ascii", errors="replace")
        if not token or len(token) > MAX_TOKEN_CHARS:
            raise IdentityTokenError(f"{TOKEN_KEY} is empty or longer than {MAX_TOKEN_CHARS} characters")
        now = time.time()
        cached = self._verified.get(token)
        if cached is not None and (allow_expired or cached.expires_at + CLOCK_LEEWAY_SECONDS > now):
            return cached
        verified = self._verify_signature(token, allow_expired=allow_expired)
        if verified.expires_at + CLOCK_LEEWAY_SECONDS > now:
            with self._lock:
                self._verified[token] = verified
                while len(self._verified) > _VERIFIED_CACHE_SIZE:
                    self._verified.popitem(last=False)
        return verified

    def _verify_signature(self, token: str, *, allow_expired: bool) -> VerifiedToken:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as error:
            raise IdentityTokenError(f"{TOKEN_KEY} is not a signed token: {error}") from None
        issuer = header.get("kid")
        key = self._trusted.get(issuer) if isinstance(issuer, str) else None
        if key is None or not isinstance(issuer, str):
            raise IdentityTokenError(
                f"{TOKEN_KEY} is signed by {issuer!r}, which this service does not trust"
            )
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                issuer=issuer,
                leeway=CLOCK_LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "iss", "sub", "aud"], "verify_exp": not allow_expired},
            )
        except jwt.ExpiredSignatureError:
            raise IdentityTokenError(f"{TOKEN_KEY} has expired") from None
        except jwt.PyJWTError as error:
            raise IdentityTokenError(f"{TOKEN_KEY} does not verify: {error}") from None
        tenant, user = claims.get("ten"), claims.get("sub")
        if not isinstance(tenant, str) or not isinstance(user, str):
            raise IdentityTokenError(f"{TOKEN_KEY} names no tenant or user")
        return VerifiedToken(Identity(tenant, user), issuer, float(claims["exp"]))


_installed: TokenAuthority | None = None
_install_lock = threading.Lock()


def install_authority(authority: TokenAuthority | None) -> None:
    """Make ``authority`` the process's (a service does it once at start; ``None`` forgets it)."""
    global _installed
    _installed = authority


def authority() -> TokenAuthority:
    """The process's authority; an ephemeral one the first time if none was installed."""
    global _installed
    if _installed is None:
        with _install_lock:
            if _installed is None:
                _installed = TokenAuthority.ephemeral()
    return _installed


def install_from_environment(service: str, settings: IdentitySettings | None = None) -> TokenAuthority:
    """Install the authority of ``service`` from ``KS_IDENTITY_*`` (called by the service runner)."""
    installed = TokenAuthority.from_settings(settings or IdentitySettings(), default_issuer=service)
    install_authority(installed)
    return installed


def install_from_keys(folder: Path, issuer: str) -> TokenAuthority:
    """Install the authority that signs as ``issuer`` with ``folder/<issuer>.key`` and trusts
    ``folder/trusted`` (a folder written by :func:`generate_keys`)."""
    installed = TokenAuthority.from_settings(
        IdentitySettings(
            signing_key_file=folder / f"{issuer}{PRIVATE_SUFFIX}", trusted_keys_dir=folder / "trusted"
        ),
        default_issuer=issuer,
    )
    install_authority(installed)
    return installed


def identity_from_token_pairs(
    pairs: Iterable[tuple[str, str | bytes]] | Mapping[str, str], *, allow_expired: bool = False
) -> Identity | None:
    """The verified identity in metadata pairs or headers; ``None`` when they carry none at all.

    Identity keys without a token (an unsigned ``ks-tenant-id``) or a token that does not verify
    raise :class:`IdentityTokenError`: an identity that cannot be proven is never taken as anonymous.
    """
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    token: str | bytes | None = None
    unsigned: list[str] = []
    for key, value in items:
        if key == TOKEN_KEY:
            if token is not None:
                raise IdentityTokenError(f"{TOKEN_KEY} is given more than once")
            token = value
        elif key in LEGACY_KEYS:
            unsigned.append(key)
    if token is None:
        if unsigned:
            raise IdentityTokenError(
                f"{', '.join(sorted(set(unsigned)))} without a signed {TOKEN_KEY}: "
                "unsigned identity is refused"
            )
        return None
    return authority().verify(token, allow_expired=allow_expired).identity


def stored_message_identity(headers: Mapping[str, str]) -> Identity | None:
    """Who a stored message was published for: its token's signature is checked, not its age (it may
    be read long after); ``None`` when it carries no identity that verifies."""
    try:
        return identity_from_token_pairs(headers, allow_expired=True)
    except IdentityError:
        return None


def token_headers(identity: Identity, *, ttl: float | None = None) -> dict[str, str]:
    """The header (or metadata) that carries ``identity``, signed by this process."""
    return {TOKEN_KEY: authority().issue(identity, ttl=ttl)}


def generate_keys(folder: Path, issuers: Iterable[str]) -> list[Path]:
    """Write ``<issuer>.key`` (mode 0600) and ``trusted/<issuer>.pub`` for each issuer not yet there."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    trusted = folder / "trusted"
    trusted.mkdir(exist_ok=True)
    written = []
    for issuer in issuers:
        if not _ID_PATTERN.fullmatch(issuer):
            raise IdentityTokenError(
                f"issuer {issuer!r} has characters outside letters, digits and _ . : @ -"
            )
        private_path = folder / f"{issuer}{PRIVATE_SUFFIX}"
        public_path = trusted / f"{issuer}{PUBLIC_SUFFIX}"
        if private_path.exists() and public_path.exists():
            continue
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        public_path.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        written.extend([private_path, public_path])
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m knowsphere_runtime.identity_token",
        description="Generate Ed25519 identity keys: <issuer>.key per service and trusted/<issuer>.pub.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    generate = sub.add_parser("generate", help="write a key pair per issuer (existing pairs are kept)")
    generate.add_argument("folder", type=Path)
    generate.add_argument("issuers", nargs="+")
    args = parser.parse_args(argv)
    try:
        for path in generate_keys(args.folder, args.issuers):
            print(path)
    except IdentityTokenError as error:
        print(error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
