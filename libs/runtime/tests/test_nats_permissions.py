"""The NATS permission table: complete for the contracts, and rendered as a nats-server configuration."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from knowsphere_contracts import events
from knowsphere_runtime import streams
from knowsphere_runtime.nats_permissions import (
    LOCAL_CLIENT,
    NATS_PERMISSIONS,
    authorization_block,
    ensure_seeds,
    inbox_prefix,
    main,
    new_user_seed,
    public_key,
)
from knowsphere_stack.binaries import nats_binary

SERVICES = [identity for identity in NATS_PERMISSIONS if identity != LOCAL_CLIENT]


def _event_kinds() -> list[type[events.Event]]:
    return [
        kind
        for kind in vars(events).values()
        if isinstance(kind, type) and issubclass(kind, events.Event) and kind is not events.Event
    ]


@pytest.mark.parametrize("kind", _event_kinds(), ids=lambda kind: kind.__name__)
def test_every_event_has_a_publisher_and_a_subscriber_in_every_subject_form(kind: type[events.Event]) -> None:
    forms = {kind.subject, f"{kind.subject}.>"}
    publishers = [s for s in SERVICES if forms <= set(NATS_PERMISSIONS[s].publish)]
    # A JetStream-only event is read through its stream's consumer API, not a subscription.
    readers = [
        s
        for s in SERVICES
        if forms <= set(NATS_PERMISSIONS[s].subscribe)
        or any(
            f"$JS.API.CONSUMER.MSG.NEXT.{stream}.>" in NATS_PERMISSIONS[s].publish
            for stream in _streams_of(kind)
        )
    ]
    assert publishers, f"no service may publish {kind.subject}"
    assert readers, f"no service may read {kind.subject}"


def _streams_of(kind: type[events.Event]) -> list[str]:
    declared = [streams.CHAT_REQUESTS, streams.CHAT_EVENTS, streams.TURN_COMPLETED, streams.DOCUMENTS_DELETED]
    return [s.name for s in declared if any(subject.startswith(kind.subject) for subject in s.subjects)]


def test_every_stream_is_declared_by_the_services_that_use_it() -> None:
    for stream in (
        streams.CHAT_REQUESTS,
        streams.CHAT_EVENTS,
        streams.TURN_COMPLETED,
        streams.DOCUMENTS_DELETED,
    ):
        creators = [
            s for s in SERVICES if f"$JS.API.STREAM.CREATE.{stream.name}" in NATS_PERMISSIONS[s].publish
        ]
        assert creators, stream.name


def test_a_service_is_granted_only_its_own_streams() -> None:
    memory = NATS_PERMISSIONS["memory"].publish
    assert "$JS.API.CONSUMER.MSG.NEXT.KS_CONVERSATION_TURNS.>" in memory
    assert not any("KS_CHAT" in subject for subject in memory)
    assert not any(
        subject.startswith("$JS.API.STREAM.DELETE")
        for s in SERVICES
        for subject in NATS_PERMISSIONS[s].publish
    )
    assert all(subject != ">" for s in SERVICES for subject in NATS_PERMISSIONS[s].publish)


def test_the_rendered_configuration_is_one_nats_server_accepts(tmp_path: Path) -> None:
    keys = {identity: public_key(new_user_seed()) for identity in NATS_PERMISSIONS}
    block = authorization_block(keys)
    config = tmp_path / "nats.conf"
    config.write_text(f"port: 4999\n{block}")
    checked = subprocess.run([str(nats_binary()), "-c", str(config), "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr + checked.stdout
    for identity, key in keys.items():
        assert f'# {identity}\n    {{\n      nkey: "{key}"' in block
    # Retrieval publishes nothing: an empty allow list would allow everything, so it is a deny.
    retrieval = block.split("# retrieval")[1].split("# ")[0]
    assert 'publish: {\n          deny: [\n            ">",' in retrieval
    # Each service subscribes to its own reply inboxes only, never to every identity's.
    for identity in SERVICES:
        section = block.split(f"# {identity}\n")[1].split("    # ")[0]
        assert f'"{inbox_prefix(keys[identity])}.>"' in section, identity
        assert '"_INBOX.>"' not in section, identity


def test_a_key_that_is_not_a_public_user_key_is_refused() -> None:
    seed = new_user_seed().decode()
    with pytest.raises(ValueError, match="gateway"):
        authorization_block({"gateway": seed})
    with pytest.raises(KeyError, match="no NATS permissions"):
        authorization_block({"toolrunner": public_key(new_user_seed())})


def test_seeds_are_private_generated_once_and_printed_as_a_block(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "seeds"
    first = ensure_seeds(folder, ["gateway", "memory"])
    again = ensure_seeds(folder, ["gateway", "memory"])
    assert first == again and first["gateway"].read_bytes() == again["gateway"].read_bytes()
    assert stat.S_IMODE(first["gateway"].stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert public_key(first["gateway"].read_bytes()).startswith("U")

    assert main(["authorization", "--seeds", str(folder)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("authorization {") and "# gateway" in printed and "# memory" in printed
    assert public_key(first["memory"].read_bytes()) in printed
    assert main(["authorization", "gateway=not-a-key"]) == 2
