"""WeCom's server API, as much of it as a self-built application's answers need: an access token
(``GET {api_base}/cgi-bin/gettoken?corpid&corpsecret``) and ``POST
{api_base}/cgi-bin/message/send?access_token=…`` with a text or markdown message to one user.

Every call goes through the egress guard (``knowsphere_egress``; the gateway's ``KS_GATEWAY_EGRESS__…``
policy), with the policy's time budget and a small size budget per answer. An access token is kept per
application (by CorpID and a hash of its secret, so a new secret gets a new token) until
``refresh_margin_seconds`` before WeCom's ``expires_in``; concurrent sends wait for one fetch. A send
that WeCom refuses because the token is no longer valid fetches a new one and is sent once more.

URLs carry the secret or the token, so neither a URL nor a request is ever logged or put in an error.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlencode

from knowsphere_egress import EgressClient, EgressError

DEFAULT_API_BASE: Final = "https://qyapi.weixin.qq.com"
TOKEN_REFUSED_CODES: Final = frozenset({40001, 40014, 42001})
"""WeCom's errcodes for an access token that is not (or no longer) valid: fetch a new one."""
DEFAULT_REFRESH_MARGIN_SECONDS: Final = 300.0
DEFAULT_MAX_CACHED_TOKENS: Final = 1024
MAX_RESPONSE_BYTES: Final = 64 * 1024
"""WeCom's answers are a few hundred bytes of JSON; anything much larger is not WeCom."""


class WeComApiError(Exception):
    """A call to WeCom's API failed; ``operation`` names it, ``errcode`` is WeCom's when it answered."""

    def __init__(self, operation: str, message: str, errcode: int | None = None) -> None:
        super().__init__(f"{operation}: {message}")
        self.operation = operation
        self.errcode = errcode


@dataclass(frozen=True)
class AppCredentials:
    """What sends as a WeCom self-built application: its CorpID, AgentId and Secret."""

    corp_id: str
    agent_id: int
    secret: str = field(repr=False)

    @property
    def cache_key(self) -> str:
        return hashlib.sha256(f"{self.corp_id}\0{self.secret}".encode()).hexdigest()


@dataclass
class _Token:
    value: str = field(repr=False)
    refresh_at: float


class WeComApi:
    """WeCom's API for sending answers; one per gateway, shared (``aclose`` at shutdown)."""

    def __init__(
        self,
        egress: EgressClient,
        api_base: str = DEFAULT_API_BASE,
        *,
        clock: Callable[[], float] = time.monotonic,
        refresh_margin_seconds: float = DEFAULT_REFRESH_MARGIN_SECONDS,
        max_cached_tokens: int = DEFAULT_MAX_CACHED_TOKENS,
    ) -> None:
        self._egress = egress
        self._base = api_base.rstrip("/")
        self._clock = clock
        self._margin = refresh_margin_seconds
        self._max_tokens = max_cached_tokens
        self._tokens: OrderedDict[str, _Token] = OrderedDict()
        self._fetching: dict[str, asyncio.Lock] = {}

    async def _call(self, operation: str, url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            if body is None:
                response = await self._egress.get(url, max_bytes=MAX_RESPONSE_BYTES)
            else:
                response = await self._egress.fetch(
                    url,
                    method="POST",
                    headers={"content-type": "application/json; charset=utf-8"},
                    content=json.dumps(body, ensure_ascii=False).encode("utf-8"),
                    max_bytes=MAX_RESPONSE_BYTES,
                )
        except EgressError as error:
            raise WeComApiError(operation, f"WeCom's API cannot be reached ({error.code.value})") from None
        if response.status_code != 200:
            raise WeComApiError(operation, f"WeCom's API answered HTTP {response.status_code}")
        try:
            answer = response.json()
        except ValueError:
            raise WeComApiError(operation, "WeCom's API answered something that is not JSON") from None
        if not isinstance(answer, dict):
            raise WeComApiError(operation, "WeCom's API answered JSON that is not an object")
        code = answer.get("errcode", 0)
        if code != 0:
            message = str(answer.get("errmsg", ""))[:200]
            raise WeComApiError(
                operation,
                f"WeCom refused it: errcode {code} ({message})",
                code if isinstance(code, int) else None,
            )
        return answer

    async def access_token(self, app: AppCredentials, *, renew: bool = False) -> str:
        """The application's access token, fetched once and kept until shortly before it expires."""
        key = app.cache_key
        lock = self._fetching.setdefault(key, asyncio.Lock())
        async with lock:
            cached = self._tokens.get(key)
            if cached is not None and not renew and cached.refresh_at > self._clock():
                self._tokens.move_to_end(key)
                return cached.value
            query = urlencode({"corpid": app.corp_id, "corpsecret": app.secret})
            answer = await self._call("gettoken", f"{self._base}/cgi-bin/gettoken?{query}")
            token, expires_in = answer.get("access_token"), answer.get("expires_in", 0)
            if not isinstance(token, str) or not token or not isinstance(expires_in, int):
                raise WeComApiError("gettoken", "WeCom's answer has no access_token and expires_in")
            self._tokens[key] = _Token(token, self._clock() + max(expires_in - self._margin, 0))
            self._tokens.move_to_end(key)
            while len(self._tokens) > self._max_tokens:
                oldest, _ = self._tokens.popitem(last=False)
                self._fetching.pop(oldest, None)
            return token

    async def send(
        self, app: AppCredentials, user_id: str, content: str, message_format: str = "text"
    ) -> None:
        """Sends ``content`` to the WeCom user ``user_id`` as the application (``text`` or ``markdown``)."""
        body: dict[str, Any] = {
            "touser": user_id,
            "msgtype": message_format,
            "agentid": app.agent_id,
            message_format: {"content": content},
            "safe": 0,
        }
        renewed = False
        while True:
            token = await self.access_token(app, renew=renewed)
            url = f"{self._base}/cgi-bin/message/send?{urlencode({'access_token': token})}"
            try:
                await self._call("message/send", url, body)
                return
            except WeComApiError as error:
                if renewed or error.errcode not in TOKEN_REFUSED_CODES:
                    raise
                renewed = True

    async def aclose(self) -> None:
        await self._egress.aclose()


__all__ = ["DEFAULT_API_BASE", "AppCredentials", "WeComApi", "WeComApiError"]
