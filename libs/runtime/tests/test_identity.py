"""Identity parsing is strict: a half or malformed identity is an error, never anonymous."""

import pytest

from knowsphere_runtime.identity import (
    Identity,
    IdentityError,
    bound_identity,
    current_identity,
    identity_from_pairs,
    require_identity,
)


def test_reads_identity_from_metadata_pairs_and_bytes():
    identity = identity_from_pairs([("ks-tenant-id", b"acme"), ("ks-user-id", "u-1"), ("other", "x")])
    assert identity == Identity("acme", "u-1")


def test_absent_identity_is_none_but_half_identity_is_an_error():
    assert identity_from_pairs({"x-other": "1"}) is None
    with pytest.raises(IdentityError, match="ks-tenant-id is missing"):
        identity_from_pairs({"ks-user-id": "u-1"})
    with pytest.raises(IdentityError, match="ks-user-id is missing"):
        identity_from_pairs({"ks-tenant-id": "acme"})


@pytest.mark.parametrize(
    ("tenant", "message"),
    [("", "ks-tenant-id is empty"), ("a" * 129, "limit is 128"), ("acme corp", "characters outside")],
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
