"""Operator commands for API tokens, straight on the gateway's token store: how the first admin token
of a tenant is made (the API needs an admin token to make tokens).

    python -m knowsphere_gateway.tokens create --tenant acme --user admin --role admin --name bootstrap
    python -m knowsphere_gateway.tokens list --tenant acme
    python -m knowsphere_gateway.tokens revoke --tenant acme tok_…

It reads the gateway's own settings (``KS_GATEWAY_DATA_DIR``, ``KS_GATEWAY_DATABASE_URL``,
``KS_GATEWAY_TOKEN_HASH_KEY``), so run it where the gateway runs (``kubectl exec deploy/gateway -- …``).
``create`` prints the token alone on stdout, once; it is not stored and cannot be shown again.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from datetime import timedelta

from knowsphere_gateway.adapters.tokens_sql import SqlTokenStore
from knowsphere_gateway.domain.tokens import DEFAULT_TOKEN_TTL_DAYS, Role, TokenHasher, TokenService
from knowsphere_gateway.settings import TokenStoreSettings
from knowsphere_runtime.identity import Identity, IdentityError
from knowsphere_runtime.settings import load_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m knowsphere_gateway.tokens", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", help="make a token and print it once")
    create.add_argument("--tenant", required=True)
    create.add_argument("--user", required=True, help="the user the token acts as")
    create.add_argument("--role", "--scope", dest="role", required=True, choices=[r.value for r in Role])
    create.add_argument("--name", default="created by an operator", help="what the token is for")
    create.add_argument("--application", default="", help="the application the token is for")
    create.add_argument("--expires-in-days", type=int, default=DEFAULT_TOKEN_TTL_DAYS)
    listing = commands.add_parser("list", help="a tenant's tokens (never their text)")
    listing.add_argument("--tenant", required=True)
    revoke = commands.add_parser("revoke", help="revoke a token at once")
    revoke.add_argument("--tenant", required=True)
    revoke.add_argument("token_id")
    return parser


async def _run(args: argparse.Namespace, settings: TokenStoreSettings) -> int:
    store = SqlTokenStore(settings.sqlalchemy_url())
    tokens = TokenService(store, TokenHasher(settings.hash_key()))
    await store.open()
    try:
        if args.command == "create":
            if args.expires_in_days < 1:
                print("--expires-in-days must be at least 1", file=sys.stderr)
                return 2
            try:
                identity = Identity(args.tenant, args.user)
            except IdentityError as error:
                print(f"--tenant/--user: {error}", file=sys.stderr)
                return 2
            issued = await tokens.issue(
                identity,
                Role(args.role),
                name=args.name,
                ttl=timedelta(days=args.expires_in_days),
                application_id=args.application,
                created_by="operator",
            )
            record = issued.record
            print(
                f"token {record.id} for {record.tenant_id}/{record.user_id} ({record.role}), expires "
                f"{record.expire_time:%Y-%m-%d}; it is shown once, below:",
                file=sys.stderr,
            )
            print(issued.token)
        elif args.command == "list":
            for r in await store.list(args.tenant):
                state = "revoked" if r.revoke_time else f"expires {r.expire_time:%Y-%m-%d}"
                used = f"{r.last_used_time:%Y-%m-%d %H:%M}" if r.last_used_time else "never"
                print(f"{r.id}\t{r.role}\t{r.user_id}\t{r.name}\t{state}\tlast used {used}")
        elif args.command == "revoke":
            if await tokens.revoke(args.tenant, args.token_id) is None:
                print(f"tenant {args.tenant} has no token {args.token_id}", file=sys.stderr)
                return 1
            print(f"revoked {args.token_id}", file=sys.stderr)
    finally:
        await store.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return asyncio.run(_run(args, load_settings(TokenStoreSettings)))


if __name__ == "__main__":
    sys.exit(main())
