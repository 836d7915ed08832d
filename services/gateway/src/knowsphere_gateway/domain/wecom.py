"""WeCom's callback encryption (WXBizMsgCrypt) and the XML it is wrapped in, written from WeCom's
published scheme (企业微信 "加解密方案说明").

- **Signature** (``msg_signature``): SHA-1, in hex, of the sorted concatenation of the channel's token,
  the request's ``timestamp`` and ``nonce``, and the encrypted text.
- **Cipher**: AES-256-CBC; key = base64decode(EncodingAESKey + "="), IV = the key's first 16 bytes;
  PKCS#7 padding to a 32-byte block (not AES's 16: WeCom's own choice).
- **Plaintext**: 16 random bytes + the message's length (4 bytes, big-endian) + the message + the
  receive id (the CorpID for a self-built application, an empty string for an AI bot).

:class:`WeComCrypto` checks in that order: the signature (constant-time), the timestamp window (a
callback older or newer than ``timestamp_tolerance_seconds`` is refused: a recorded request cannot be
played back later), then the ciphertext, its padding, the declared length and the receive id. Each
refusal is its own :class:`CallbackRefused` subclass with a :class:`CallbackFailure` code; none echoes
the secret or the plaintext.

The callback's XML is parsed by :func:`xml_fields` with expat driven directly: a document type
declaration (where entities are declared: "billion laughs", external entities) is refused before
anything in it is read, entities are never expanded, and only one level of elements is kept — WeCom's
messages are flat. The XML of an application callback is untrusted until its signature is checked, and
the signature covers only the ``Encrypt`` element, so the parser sees hostile input first.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, NoReturn
from xml.parsers import expat

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

ENCODING_AES_KEY_CHARS: Final = 43
"""An EncodingAESKey is 43 characters of base64 (32 bytes once ``=`` is added)."""
AES_KEY_BYTES: Final = 32
IV_BYTES: Final = 16
RANDOM_PREFIX_BYTES: Final = 16
LENGTH_BYTES: Final = 4
PAD_BLOCK_BYTES: Final = 32
"""WeCom pads to 32-byte blocks (PKCS#7 with a block of 32), so a pad byte is 1 … 32."""
AES_BLOCK_BYTES: Final = 16
DEFAULT_TIMESTAMP_TOLERANCE_SECONDS: Final = 300
"""How far a callback's timestamp may be from the gateway's clock (both ways) before it is stale."""
MAX_TIMESTAMP_DIGITS: Final = 12
MAX_XML_DEPTH: Final = 8
MAX_XML_ELEMENTS: Final = 256
"""Bounds of a callback's XML (WeCom's messages are a root with a dozen flat children)."""

_BASE64_ALPHABET: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


class CallbackFailure(StrEnum):
    """Why a WeCom callback was refused."""

    SIGNATURE_MISMATCH = "signature_mismatch"
    STALE_TIMESTAMP = "stale_timestamp"
    MALFORMED_TIMESTAMP = "malformed_timestamp"
    MALFORMED_CIPHERTEXT = "malformed_ciphertext"
    BAD_PADDING = "bad_padding"
    BAD_LENGTH = "bad_length"
    WRONG_RECEIVE_ID = "wrong_receive_id"
    MALFORMED_PLAINTEXT = "malformed_plaintext"
    MALFORMED_XML = "malformed_xml"
    HOSTILE_XML = "hostile_xml"


class CallbackRefused(Exception):
    """A WeCom callback that is not authentic or not well formed; ``failure`` says which check refused
    it, the message says why (never the secret, the plaintext or the ciphertext)."""

    failure: CallbackFailure = CallbackFailure.MALFORMED_CIPHERTEXT

    def __init__(self, message: str) -> None:
        super().__init__(message)


class SignatureMismatch(CallbackRefused):
    failure = CallbackFailure.SIGNATURE_MISMATCH


class StaleTimestamp(CallbackRefused):
    failure = CallbackFailure.STALE_TIMESTAMP


class MalformedTimestamp(CallbackRefused):
    failure = CallbackFailure.MALFORMED_TIMESTAMP


class MalformedCiphertext(CallbackRefused):
    failure = CallbackFailure.MALFORMED_CIPHERTEXT


class BadPadding(CallbackRefused):
    failure = CallbackFailure.BAD_PADDING


class BadLength(CallbackRefused):
    failure = CallbackFailure.BAD_LENGTH


class WrongReceiveId(CallbackRefused):
    failure = CallbackFailure.WRONG_RECEIVE_ID


class MalformedPlaintext(CallbackRefused):
    failure = CallbackFailure.MALFORMED_PLAINTEXT


class MalformedXml(CallbackRefused):
    failure = CallbackFailure.MALFORMED_XML


class HostileXml(CallbackRefused):
    failure = CallbackFailure.HOSTILE_XML


def aes_key_of(encoding_aes_key: str) -> bytes:
    """The 32-byte AES key of an EncodingAESKey; ``ValueError`` saying what is wrong with its form
    (never echoing it)."""
    if len(encoding_aes_key) != ENCODING_AES_KEY_CHARS:
        raise ValueError(
            f"must be {ENCODING_AES_KEY_CHARS} characters of base64, as WeCom's console shows it; "
            f"got {len(encoding_aes_key)} characters"
        )
    if not set(encoding_aes_key) <= _BASE64_ALPHABET:
        raise ValueError("must be base64 characters only (A-Z, a-z, 0-9, + and /)")
    try:
        key = base64.b64decode(encoding_aes_key + "=", validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not valid base64") from None
    if len(key) != AES_KEY_BYTES:  # pragma: no cover - 43 base64 characters + "=" are always 32 bytes
        raise ValueError(f"must decode to {AES_KEY_BYTES} bytes")
    return key


def signature(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    """WeCom's ``msg_signature``: SHA-1 hex of the sorted concatenation of the four values."""
    joined = "".join(sorted((token, timestamp, nonce, encrypted)))
    return hashlib.sha1(joined.encode("utf-8")).hexdigest()


def _pad(data: bytes) -> bytes:
    amount = PAD_BLOCK_BYTES - len(data) % PAD_BLOCK_BYTES
    return data + bytes([amount]) * amount


@dataclass(frozen=True)
class WeComCrypto:
    """One channel's crypto: its token, EncodingAESKey and receive id (CorpID; "" for an AI bot).

    ``clock`` gives the current Unix time; a callback whose timestamp is more than
    ``timestamp_tolerance_seconds`` away from it is stale.
    """

    token: str = field(repr=False)
    encoding_aes_key: str = field(repr=False)
    receive_id: str
    timestamp_tolerance_seconds: float = DEFAULT_TIMESTAMP_TOLERANCE_SECONDS
    clock: Callable[[], float] = field(default=time.time, repr=False, compare=False)
    _key: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Checked once, when the channel is built: a malformed key is a ValueError here, not later.
        object.__setattr__(self, "_key", aes_key_of(self.encoding_aes_key))

    def _cipher(self) -> Cipher[modes.CBC]:
        return Cipher(algorithms.AES(self._key), modes.CBC(self._key[:IV_BYTES]))

    # --- receiving ---------------------------------------------------------------------------------

    def verify(self, msg_signature: str, timestamp: str, nonce: str, encrypted: str) -> None:
        """Refuses a callback whose signature does not match (:class:`SignatureMismatch`) or whose
        timestamp is malformed or outside the window (:class:`MalformedTimestamp`,
        :class:`StaleTimestamp`)."""
        expected = signature(self.token, timestamp, nonce, encrypted)
        if not hmac.compare_digest(expected.encode(), msg_signature.strip().lower().encode()):
            raise SignatureMismatch("msg_signature does not match the channel's token and this message")
        if not timestamp.isdigit() or len(timestamp) > MAX_TIMESTAMP_DIGITS:
            raise MalformedTimestamp("timestamp must be Unix seconds (digits only)")
        skew = abs(self.clock() - int(timestamp))
        if skew > self.timestamp_tolerance_seconds:
            raise StaleTimestamp(
                f"timestamp is {skew:.0f} s away from the gateway's clock; at most "
                f"{self.timestamp_tolerance_seconds:.0f} s (KS_GATEWAY_WECOM_TIMESTAMP_TOLERANCE_SECONDS)"
            )

    def decrypt(self, encrypted: str) -> str:
        """The message inside ``encrypted``; refuses bad base64, padding, length or receive id."""
        try:
            sealed = base64.b64decode(encrypted.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise MalformedCiphertext("the encrypted text is not base64") from None
        if not sealed or len(sealed) % AES_BLOCK_BYTES:
            raise MalformedCiphertext(
                f"the encrypted text is {len(sealed)} bytes, not whole {AES_BLOCK_BYTES}-byte blocks"
            )
        decryptor = self._cipher().decryptor()
        padded = decryptor.update(sealed) + decryptor.finalize()
        amount = padded[-1]
        if not 1 <= amount <= PAD_BLOCK_BYTES or padded[-amount:] != bytes([amount]) * amount:
            raise BadPadding(f"the plaintext's PKCS#7 padding (block {PAD_BLOCK_BYTES}) is not valid")
        plain = padded[:-amount]
        head = RANDOM_PREFIX_BYTES + LENGTH_BYTES
        if len(plain) < head:
            raise BadLength(f"the plaintext is {len(plain)} bytes, shorter than its {head}-byte header")
        length = int.from_bytes(plain[RANDOM_PREFIX_BYTES:head], "big")
        if head + length > len(plain):
            raise BadLength(
                f"the plaintext declares a {length}-byte message but holds {len(plain) - head} bytes"
            )
        message, receive_id = plain[head : head + length], plain[head + length :]
        if not hmac.compare_digest(receive_id, self.receive_id.encode("utf-8")):
            raise WrongReceiveId(
                "the message is for another receiver than this channel (its CorpID, or '' for an AI bot)"
            )
        try:
            return message.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedPlaintext("the message is not UTF-8") from None

    def open(self, msg_signature: str, timestamp: str, nonce: str, encrypted: str) -> str:
        """:meth:`verify` then :meth:`decrypt`: the message of an authentic, fresh callback."""
        self.verify(msg_signature, timestamp, nonce, encrypted)
        return self.decrypt(encrypted)

    # --- replying ----------------------------------------------------------------------------------

    def encrypt(self, message: str, *, random_prefix: bytes | None = None) -> str:
        """``message`` encrypted for WeCom (base64); ``random_prefix`` only for fixed test vectors."""
        prefix = os.urandom(RANDOM_PREFIX_BYTES) if random_prefix is None else random_prefix
        if len(prefix) != RANDOM_PREFIX_BYTES:
            raise ValueError(f"random_prefix must be {RANDOM_PREFIX_BYTES} bytes")
        body = message.encode("utf-8")
        plain = prefix + len(body).to_bytes(LENGTH_BYTES, "big") + body + self.receive_id.encode("utf-8")
        encryptor = self._cipher().encryptor()
        sealed = encryptor.update(_pad(plain)) + encryptor.finalize()
        return base64.b64encode(sealed).decode("ascii")

    def seal(self, message: str, timestamp: str, nonce: str) -> tuple[str, str]:
        """``(encrypted, msg_signature)`` of a reply."""
        encrypted = self.encrypt(message)
        return encrypted, signature(self.token, timestamp, nonce, encrypted)


def dummy_verify(msg_signature: str, timestamp: str, nonce: str, encrypted: str) -> None:
    """The work of a signature check against no channel: a callback for an unknown application costs
    what one for a known application with a wrong signature does, so the time taken tells nothing."""
    expected = signature(os.urandom(16).hex(), timestamp, nonce, encrypted)
    hmac.compare_digest(expected.encode(), msg_signature.strip().lower().encode())


# --- XML ------------------------------------------------------------------------------------------


def _refuse_declarations(*_: Any) -> NoReturn:
    raise HostileXml("XML with a document type, entity or notation declaration is refused")


def xml_fields(document: bytes | str) -> dict[str, str]:
    """The text of each element directly under the root of a WeCom XML document, by tag name.

    Refuses (:class:`HostileXml`) any DOCTYPE — so no entity is ever declared, let alone expanded or
    fetched — and (:class:`MalformedXml`) anything that is not well formed, deeper than
    :data:`MAX_XML_DEPTH`, larger than :data:`MAX_XML_ELEMENTS` elements, or that repeats a field.
    """
    data = document.encode("utf-8") if isinstance(document, str) else document
    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = _refuse_declarations
    parser.EntityDeclHandler = _refuse_declarations
    parser.UnparsedEntityDeclHandler = _refuse_declarations
    parser.NotationDeclHandler = _refuse_declarations
    parser.ExternalEntityRefHandler = _refuse_declarations
    fields: dict[str, str] = {}
    stack: list[str] = []
    text: list[str] = []
    count = 0

    def start(name: str, _attributes: dict[str, str]) -> None:
        nonlocal count
        count += 1
        if count > MAX_XML_ELEMENTS:
            raise MalformedXml(f"more than {MAX_XML_ELEMENTS} elements")
        if len(stack) >= MAX_XML_DEPTH:
            raise MalformedXml(f"elements nested deeper than {MAX_XML_DEPTH}")
        stack.append(name)
        if len(stack) == 2:
            text.clear()

    def end(name: str) -> None:
        if len(stack) == 2:
            if name in fields:
                raise MalformedXml(f"element {name} appears more than once")
            fields[name] = "".join(text)
        stack.pop()

    def characters(data: str) -> None:
        if len(stack) == 2:
            text.append(data)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = characters
    try:
        parser.Parse(data, True)
    except expat.ExpatError as error:
        raise MalformedXml(f"not well-formed XML ({expat.ErrorString(error.code)})") from None
    return fields


__all__ = [
    "DEFAULT_TIMESTAMP_TOLERANCE_SECONDS",
    "ENCODING_AES_KEY_CHARS",
    "BadLength",
    "BadPadding",
    "CallbackFailure",
    "CallbackRefused",
    "HostileXml",
    "MalformedCiphertext",
    "MalformedPlaintext",
    "MalformedTimestamp",
    "MalformedXml",
    "SignatureMismatch",
    "StaleTimestamp",
    "WeComCrypto",
    "WrongReceiveId",
    "aes_key_of",
    "dummy_verify",
    "signature",
    "xml_fields",
]
