"""Bootstrapping the first admin token (``python -m knowsphere_gateway.tokens``).

What an operator notices: ``create`` prints the token alone on stdout, once, and the gateway accepts it
(same database, same hash key, generated once into the data dir with owner-only permissions); ``list``
shows it without its text; ``revoke`` stops it; bad input is refused naming the option.
"""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from knowsphere_gateway.adapters.tokens_sql import SqlTokenStore
from knowsphere_gateway.domain.tokens import Role, TokenHasher, TokenRecord, TokenRefused, TokenService
from knowsphere_gateway.settings import TokenStoreSettings
from knowsphere_gateway.tokens import main


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KS_GATEWAY_DATA_DIR", str(tmp_path))
    return tmp_path


def gateway_side(data_dir: Path, check: Callable[[TokenService], Awaitable[None]]) -> None:
    """Runs ``check`` on the token service as the gateway builds it from the same settings."""

    async def run() -> None:
        settings = TokenStoreSettings(data_dir=data_dir)
        store = SqlTokenStore(settings.sqlalchemy_url())
        await store.open()
        try:
            await check(TokenService(store, TokenHasher(settings.hash_key())))
        finally:
            await store.close()

    asyncio.run(run())


def test_create_prints_a_token_the_gateway_accepts_then_list_and_revoke(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["create", "--tenant", "acme", "--user", "root", "--scope", "admin"]) == 0
    out = capsys.readouterr().out
    token = out.strip()
    assert out.count("\n") == 1 and token.startswith("ks_")
    key_file = data_dir / "secrets" / "token-hash.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    found: list[TokenRecord] = []

    async def accepted(tokens: TokenService) -> None:
        found.append(await tokens.authenticate(token))

    gateway_side(data_dir, accepted)
    [record] = found
    assert (record.tenant_id, record.user_id, record.role) == ("acme", "root", Role.ADMIN)

    assert main(["list", "--tenant", "acme"]) == 0
    listed = capsys.readouterr().out
    assert record.id in listed and token not in listed

    assert main(["revoke", "--tenant", "globex", record.id]) == 1  # not that tenant's
    assert main(["revoke", "--tenant", "acme", record.id]) == 0

    async def refused(tokens: TokenService) -> None:
        with pytest.raises(TokenRefused, match="revoked"):
            await tokens.authenticate(token)

    gateway_side(data_dir, refused)


def test_bad_input_is_refused_naming_the_option(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["create", "--tenant", "acme corp", "--user", "root", "--role", "admin"]) == 2
    assert "--tenant/--user: ks-tenant-id='acme corp'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["create", "--tenant", "acme", "--user", "root", "--role", "owner"])
    assert "invalid choice: 'owner'" in capsys.readouterr().err
