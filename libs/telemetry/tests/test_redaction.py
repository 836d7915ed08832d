"""Credentials never reach a log line or an error message; where a URL points still does."""

from __future__ import annotations

import pytest

from knowsphere_telemetry.redaction import redact_text, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+asyncpg://app:s3cret-Pw@db.internal:5432/knowsphere",
            "postgresql+asyncpg://app:***@db.internal:5432/knowsphere",
        ),
        # An unencoded "@", "/" or ":" in the password is hidden whole, not in part.
        ("postgresql://app:p@ss/w:rd@db:5432/ks", "postgresql://app:***@db:5432/ks"),
        ("postgresql://app:p?w#d@db/ks", "postgresql://app:***@db/ks"),
        ("redis://:hunter2hunter2@cache:6379/0", "redis://:***@cache:6379/0"),
        ("nats://s3cr3tT0ken@nats:4222", "nats://***@nats:4222"),
        ("nats://user:pw-1234@nats:4222", "nats://user:***@nats:4222"),
        (
            "postgresql://app@db/ks?sslmode=require&password=pw-1234&application_name=x",
            "postgresql://app@db/ks?sslmode=require&password=***&application_name=x",
        ),
        (
            "https://bucket.s3.example/k?X-Amz-Credential=AKIA1%2F2&X-Amz-Signature=abc123&X-Amz-Expires=60",
            "https://bucket.s3.example/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Expires=60",
        ),
        ("https://api.example/v1?key=AIzaSyA-1234&alt=json", "https://api.example/v1?key=***&alt=json"),
        (
            "s3://minio:9000/blobs?secret=abcdef&token=t0k&region=eu",
            "s3://minio:9000/blobs?secret=***&token=***&region=eu",
        ),
        # Nothing secret: unchanged.
        ("sqlite+aiosqlite:////data/modelhub.db", "sqlite+aiosqlite:////data/modelhub.db"),
        (
            "postgresql+asyncpg://postgres@127.0.0.1:5432/test",
            "postgresql+asyncpg://postgres@127.0.0.1:5432/test",
        ),
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("not a url at all", "not a url at all"),
    ],
)
def test_a_url_keeps_where_it_points_and_loses_its_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_urls_and_parameters_inside_a_message_are_redacted() -> None:
    message = (
        "cannot connect to postgresql://ks:Sup3rS3cret@10.0.0.5:5432/ks (host=10.0.0.5 user=ks "
        "password=Sup3rS3cret dbname=ks), then tried nats://T0kenT0ken@nats:4222"
    )
    shown = redact_text(message)
    assert "Sup3rS3cret" not in shown and "T0kenT0ken" not in shown
    assert "postgresql://ks:***@10.0.0.5:5432/ks" in shown and "password=***" in shown
    assert "nats://***@nats:4222" in shown and "user=ks" in shown and "host=10.0.0.5" in shown


def test_bearer_tokens_and_given_secrets_are_redacted_wherever_they_appear() -> None:
    key = "sk-live-0123456789abcdefWXYZ"
    body = (
        f'{{"error": {{"message": "Incorrect API key provided: {key}. Header was Authorization: '
        'Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc", "code": "invalid_api_key"}}'
    )
    shown = redact_text(body, [key, "", None])
    assert key not in shown and "eyJhbGci" not in shown
    assert "Incorrect API key provided: ***." in shown and "Bearer ***" in shown
    assert '"code": "invalid_api_key"' in shown
    # Words after "Bearer" that are not tokens stay readable.
    assert redact_text("Bearer token required") == "Bearer token required"


def test_a_secret_containing_another_is_replaced_whole() -> None:
    assert redact_text("key sk-abc-123456 and sk-abc", ["sk-abc", "sk-abc-123456"]) == "key *** and ***"
