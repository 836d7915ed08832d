"""Identity is strict: a malformed identity is an error, and across processes only a signed token counts."""

import os
import stat
import time

import pytest

from knowsphere_runtime.identity import (
    Identity,
    IdentityError,
    bound_identity,
    current_identity,
    require_identity,
)
from knowsphere_runtime.identity_token import (
    IdentitySettings,
    IdentityTokenError,
    TokenAuthority,
    authority,
    generate_keys,
    identity_from_token_pairs,
    main,
    stored_message_identity,
    token_headers,
)

ALICE = Identity("acme", "alice")


@pytest.mark.parametrize(
    ("tenant", "message"),
    [
        ("", "ks-tenant-id is empty"),
        ("a" * 129, "limit is 128"),
        ("acme corp", "characters outside"),
        ("acme\n", "characters outside"),  # a trailing newline is not a tenant id
    ],
)
def test_malformed_identity_names_key_and_limit(tenant, message):
    with pytest.raises(IdentityError, match=message):
        Identity(tenant, "u-1")


def test_bound_identity_is_scoped():
    assert current_identity() is None
    with pytest.raises(IdentityError, match="no caller identity"):
        require_identity()
    with bound_identity(Identity("acme", "u-1")):
        assert require_identity().tenant_id == "acme"
    assert current_identity() is None


def test_a_token_proves_the_identity_it_was_issued_for():
    token = authority().issue(ALICE)
    assert identity_from_token_pairs([("ks-identity", token.encode()), ("other", "x")]) == ALICE
    assert identity_from_token_pairs(token_headers(ALICE)) == ALICE


def test_no_identity_is_none_but_an_unsigned_one_is_refused():
    assert identity_from_token_pairs({"x-other": "1"}) is None
    with pytest.raises(IdentityTokenError, match="unsigned identity is refused"):
        identity_from_token_pairs({"ks-tenant-id": "acme", "ks-user-id": "alice"})


def test_a_token_with_its_claims_changed_does_not_verify():
    header, _, signature = authority().issue(ALICE).split(".")
    other = authority().issue(Identity("victim", "alice")).split(".")[1]
    with pytest.raises(IdentityTokenError, match="does not verify"):
        authority().verify(f"{header}.{other}.{signature}")


def test_an_expired_token_is_refused_but_still_says_who_stored_a_message():
    token = authority().issue(ALICE, ttl=-120)
    with pytest.raises(IdentityTokenError, match="has expired"):
        authority().verify(token)
    assert stored_message_identity({"ks-identity": token}) == ALICE
    assert stored_message_identity({"ks-identity": "forged"}) is None
    assert stored_message_identity({"ks-tenant-id": "acme", "ks-user-id": "alice"}) is None


def test_an_issued_token_is_reused_for_half_its_life():
    issuer = TokenAuthority.ephemeral("svc", token_ttl=300)
    first = issuer.issue(ALICE)
    assert issuer.issue(ALICE) == first
    assert issuer.issue(Identity("acme", "bob")) != first
    claims = issuer.verify(first)
    assert claims.issuer == "svc" and claims.expires_at == pytest.approx(time.time() + 300, abs=5)


def test_keys_from_files_trust_every_listed_service_and_nothing_else(tmp_path, capsys):
    assert main(["generate", str(tmp_path / "keys"), "gateway", "retrieval"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    keys = tmp_path / "keys"
    assert stat.S_IMODE(os.stat(keys / "gateway.key").st_mode) == 0o600
    gateway = TokenAuthority.from_settings(
        IdentitySettings(signing_key_file=keys / "gateway.key", trusted_keys_dir=keys / "trusted"),
        default_issuer="ignored",
    )
    retrieval = TokenAuthority.from_settings(
        IdentitySettings(signing_key_file=keys / "retrieval.key", trusted_keys_dir=keys / "trusted"),
        default_issuer="ignored",
    )
    assert gateway.issuer == "gateway" and retrieval.trusted_issuers == ["gateway", "retrieval"]
    assert retrieval.verify(gateway.issue(ALICE)).identity == ALICE
    with pytest.raises(
        IdentityTokenError, match=f"'{authority().issuer}', which this service does not trust"
    ):
        retrieval.verify(authority().issue(ALICE))
    # Generating again keeps the existing pairs: running services go on trusting each other.
    before = (keys / "gateway.key").read_bytes()
    assert generate_keys(keys, ["gateway", "memory"]) == [
        keys / "memory.key",
        keys / "trusted" / "memory.pub",
    ]
    assert (keys / "gateway.key").read_bytes() == before


def test_a_bad_key_file_is_named():
    with pytest.raises(IdentityTokenError, match="cannot read the identity signing key"):
        TokenAuthority.from_settings(
            IdentitySettings(signing_key_file="/nonexistent/gateway.key"), default_issuer="gateway"
        )
