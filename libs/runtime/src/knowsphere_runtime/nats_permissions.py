"""Who may publish and subscribe to what on NATS: the permissions of every KnowSphere identity, once.

An identity is a service that uses NATS (``gateway``, ``conversation``, ``ingestion``, ``memory``,
``modelhub``, ``retrieval``), the ingestion worker (``ingestion-worker``), or ``local-client`` (tests,
benches and operators' tools, with every right). Its permissions are derived from the event contracts
(:mod:`knowsphere_contracts.events`) and the stream declarations (:mod:`knowsphere_runtime.streams`),
so a renamed subject or stream renames its permission too:

- an event is granted as ``<subject>`` and ``<subject>.>``: the bare subject and its per-tenant and
  per-turn forms (``ks.chat.events.v1.<tenant>.<turn_id>``);
- a stream the service declares when its broker starts: ``$JS.API.STREAM.INFO|CREATE|UPDATE.<stream>``;
- a stream it consumes with durable pull consumers: every consumer request on that stream
  (``$JS.API.CONSUMER.*.<stream>`` and ``….<stream>.>``, the older ``DURABLE.CREATE`` form), fetching
  (``$JS.API.CONSUMER.MSG.NEXT.<stream>.>``) and acknowledging (``$JS.ACK.<stream>.>``);
- a stream it reads back (:func:`~knowsphere_runtime.streams.read_subject`): a message by subject
  (``$JS.API.STREAM.MSG.GET.<stream>``, ``$JS.API.DIRECT.GET.<stream>.>``), an ephemeral ordered
  consumer and its flow control (``$JS.FC.<stream>.>``);
- a KV bucket: its stream as above and its keys (``$KV.<bucket>.>``);
- every identity subscribes to its own inboxes, ``_INBOX.<its public nkey>.>`` (the prefix its
  connection uses, :func:`inbox_prefix`), where JetStream acknowledges publishes, answers API requests
  and delivers pulled messages; no identity reads another's. No identity may publish there (it
  answers no request).

An identity with nothing to publish is denied every publish (an empty allow list would allow all).

:func:`authorization_block` renders the ``authorization { users = [...] }`` block of a nats-server
configuration for the identities' public nkeys. ``ks-stack`` writes it for the local stack; for a
production cluster an operator prints it::

    python -m knowsphere_runtime.nats_permissions generate DIR            # DIR/<identity>.nk, 0600
    python -m knowsphere_runtime.nats_permissions authorization --seeds DIR
    python -m knowsphere_runtime.nats_permissions authorization gateway=UA… memory=UB…
    python -m knowsphere_runtime.nats_permissions show                    # the table itself
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from faststream.nats import JStream

from knowsphere_contracts.events import (
    ChatRequested,
    ChatTurnEvent,
    DocumentsDeleted,
    DocumentsFinished,
    DocumentsProgress,
    Event,
    ModelChanged,
    TurnCancelRequested,
    TurnCompleted,
)
from knowsphere_runtime.streams import (
    CHAT_EVENTS,
    CHAT_REQUESTS,
    DOCUMENTS_DELETED,
    SESSION_LEASES_BUCKET,
    TURN_COMPLETED,
)

INGESTION_WORKER = "ingestion-worker"
"""The identity of the ingestion Temporal worker (it publishes what the API only watches)."""
LOCAL_CLIENT = "local-client"
"""Tests, benches and operators' tools: every right."""
SEED_SUFFIX = ".nk"
"""``<identity>.nk`` holds an identity's nkey seed (``SU…``) in a folder of seeds."""

JS_API = "$JS.API"
INBOX = "_INBOX.>"
"""Every identity's inboxes; :func:`authorization_block` narrows it to the identity's own."""
EVERYTHING = ">"


@dataclass(frozen=True)
class Permissions:
    """Subjects an identity may publish to and subscribe to (NATS wildcards allowed); an empty
    ``publish`` means none."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


def events(*kinds: type[Event]) -> list[str]:
    """The subjects of ``kinds``: each bare and with any tokens after it (tenant, turn)."""
    return [subject for kind in kinds for subject in (kind.subject, f"{kind.subject}.>")]


def declares(*streams: JStream) -> list[str]:
    """Creating each stream, or bringing it to its configuration (FastStream, when a broker starts)."""
    return [f"{JS_API}.STREAM.{verb}.{s.name}" for s in streams for verb in ("INFO", "CREATE", "UPDATE")]


def consumes(*streams: JStream) -> list[str]:
    """Pulling from durable consumers of each stream: create or look them up, fetch, acknowledge."""
    return [
        subject
        for s in streams
        for subject in (
            f"{JS_API}.CONSUMER.*.{s.name}",
            f"{JS_API}.CONSUMER.*.{s.name}.>",
            f"{JS_API}.CONSUMER.DURABLE.CREATE.{s.name}.>",
            f"{JS_API}.CONSUMER.MSG.NEXT.{s.name}.>",
            f"$JS.ACK.{s.name}.>",
        )
    ]


def _reads(stream: str) -> list[str]:
    return [
        f"{JS_API}.STREAM.MSG.GET.{stream}",
        f"{JS_API}.DIRECT.GET.{stream}",
        f"{JS_API}.DIRECT.GET.{stream}.>",
        # The ephemeral ordered consumer of read_subject: created, looked up, deleted or reset.
        f"{JS_API}.CONSUMER.*.{stream}",
        f"{JS_API}.CONSUMER.*.{stream}.>",
        f"$JS.FC.{stream}.>",
    ]


def reads(*streams: JStream) -> list[str]:
    """Reading back what a stream holds on a subject (:func:`~knowsphere_runtime.streams.read_subject`)."""
    return [subject for s in streams for subject in _reads(s.name)]


def key_value(bucket: str) -> list[str]:
    """Using KV bucket ``bucket``: declaring its stream, reading and writing its keys."""
    stream = f"KV_{bucket}"
    return [
        *(f"{JS_API}.STREAM.{verb}.{stream}" for verb in ("INFO", "CREATE", "UPDATE")),
        f"{JS_API}.STREAM.MSG.GET.{stream}",
        f"{JS_API}.DIRECT.GET.{stream}",
        f"{JS_API}.DIRECT.GET.{stream}.>",
        f"$KV.{bucket}.>",
    ]


def _unique(subjects: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(subjects))


def _service(publish: Iterable[str], subscribe: Iterable[str], *, jetstream: bool = False) -> Permissions:
    api = [f"{JS_API}.INFO"] if jetstream else []
    return Permissions(publish=_unique([*publish, *api]), subscribe=_unique([*subscribe, INBOX]))


NATS_PERMISSIONS: Mapping[str, Permissions] = {
    "gateway": _service(
        # Queues chat requests; reads a turn's stored events back for a client that reconnects.
        publish=[*events(ChatRequested), *declares(CHAT_REQUESTS), *reads(CHAT_EVENTS)],
        subscribe=events(ChatTurnEvent),
        jetstream=True,
    ),
    "conversation": _service(
        # Takes chat requests from the work queue; publishes turn events, completions and cancels;
        # reads a redelivered turn's events back; holds session leases in a KV bucket.
        publish=[
            *events(ChatTurnEvent, TurnCompleted, TurnCancelRequested),
            *declares(CHAT_REQUESTS, CHAT_EVENTS, TURN_COMPLETED),
            *consumes(CHAT_REQUESTS),
            *reads(CHAT_EVENTS),
            *key_value(SESSION_LEASES_BUCKET),
        ],
        # Cancels reach every replica; the replica cancelling a turn waits for its final event.
        subscribe=events(TurnCancelRequested, ChatTurnEvent),
        jetstream=True,
    ),
    "ingestion": _service(
        # Announces deleted documents; watches the workers' progress for WatchDocumentProgress.
        publish=[*events(DocumentsDeleted), *declares(DOCUMENTS_DELETED)],
        subscribe=events(DocumentsProgress, DocumentsFinished, ModelChanged),
        jetstream=True,
    ),
    INGESTION_WORKER: _service(
        publish=events(DocumentsProgress, DocumentsFinished),
        subscribe=events(ModelChanged),
    ),
    "memory": _service(
        # Durable consumers of completed turns and deleted documents.
        publish=[
            *declares(TURN_COMPLETED, DOCUMENTS_DELETED),
            *consumes(TURN_COMPLETED, DOCUMENTS_DELETED),
        ],
        subscribe=[],
        jetstream=True,
    ),
    "modelhub": _service(publish=events(ModelChanged), subscribe=[]),
    "retrieval": _service(publish=[], subscribe=events(ModelChanged)),
    LOCAL_CLIENT: Permissions(publish=(EVERYTHING,), subscribe=(EVERYTHING,)),
}
"""The permissions of each identity, by name (a service's short name, or the two above)."""


class UnknownIdentityError(KeyError):
    """An identity that :data:`NATS_PERMISSIONS` does not define."""

    def __str__(self) -> str:
        return f"no NATS permissions are defined for {self.args[0]!r}; known: {', '.join(NATS_PERMISSIONS)}"


def permissions_of(identity: str) -> Permissions:
    try:
        return NATS_PERMISSIONS[identity]
    except KeyError:
        raise UnknownIdentityError(identity) from None


def _strings(values: Sequence[str], indent: str) -> str:
    # JSON strings are valid nats-server configuration strings; quoted, "$JS…" is not a variable.
    return "".join(f"{indent}{json.dumps(value)},\n" for value in values)


def _direction(name: str, subjects: Sequence[str], indent: str) -> str:
    rule, values = ("allow", subjects) if subjects else ("deny", [EVERYTHING])
    listed = _strings(values, indent + "    ")
    return f"{indent}{name}: {{\n{indent}  {rule}: [\n{listed}{indent}  ]\n{indent}}}\n"


def inbox_prefix(key: str) -> str:
    """The prefix of the reply inboxes of the connection authenticated by public nkey ``key``."""
    return f"_INBOX.{key}"


def authorization_block(public_keys: Mapping[str, str]) -> str:
    """The nats-server ``authorization`` block admitting each identity's public nkey (``U…``) with its
    permissions (its inboxes only its own); a connection with any other key, or none, is refused."""
    users = []
    for identity, key in public_keys.items():
        if not (key.startswith("U") and len(key) == 56):
            raise ValueError(f"{identity}: {key!r} is not a public user nkey (56 characters starting with U)")
        granted = permissions_of(identity)
        own = f"{inbox_prefix(key)}.>"
        permissions = Permissions(
            publish=granted.publish,
            subscribe=tuple(own if subject == INBOX else subject for subject in granted.subscribe),
        )
        users.append(
            f"    # {identity}\n"
            "    {\n"
            f"      nkey: {json.dumps(key)}\n"
            "      permissions: {\n"
            f"{_direction('publish', permissions.publish, '        ')}"
            f"{_direction('subscribe', permissions.subscribe, '        ')}"
            "      }\n"
            "    },\n"
        )
    return "authorization {\n  users = [\n" + "".join(users) + "  ]\n}\n"


# Seeds -------------------------------------------------------------------------------------------


def new_user_seed() -> bytes:
    """A fresh nkey seed of a NATS user (``SU…``)."""
    import nkeys

    seed: bytes = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)
    return seed


def public_key(seed: bytes) -> str:
    """The public nkey (``U…``) of a user seed; ValueError when ``seed`` is not one."""
    import nkeys

    try:
        key = nkeys.from_seed(bytearray(seed.strip())).public_key.decode()
    except Exception as error:  # nkeys raises its own error classes, and binascii/nacl ones
        raise ValueError(f"not an nkey seed ({type(error).__name__})") from None
    if not key.startswith("U"):
        raise ValueError(f"an nkey seed, but not a user's (its public key starts with {key[0]!r})")
    return key


def seed_path(folder: Path, identity: str) -> Path:
    return folder / f"{identity}{SEED_SUFFIX}"


def ensure_seeds(folder: Path, identities: Iterable[str]) -> dict[str, Path]:
    """``folder/<identity>.nk`` (mode 0600) for each identity, generated when missing and kept otherwise;
    the folder is made private (0700)."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    paths: dict[str, Path] = {}
    for identity in identities:
        permissions_of(identity)
        path = seed_path(folder, identity)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # generated before (or concurrently by another launcher): keep it
        else:
            with os.fdopen(fd, "wb") as out:
                out.write(new_user_seed() + b"\n")
        paths[identity] = path
    return paths


def public_keys_of_seeds(seeds: Mapping[str, Path]) -> dict[str, str]:
    """The public key of each identity's seed file; ValueError naming a file that holds no user seed."""
    keys: dict[str, str] = {}
    for identity, path in seeds.items():
        try:
            keys[identity] = public_key(path.read_bytes())
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
    return keys


def seeds_in(folder: Path) -> dict[str, Path]:
    """The seed files of known identities in ``folder``."""
    return {
        identity: seed_path(folder, identity)
        for identity in NATS_PERMISSIONS
        if seed_path(folder, identity).is_file()
    }


# Command line ------------------------------------------------------------------------------------


def _parse_pairs(pairs: Sequence[str]) -> dict[str, str]:
    keys: dict[str, str] = {}
    for pair in pairs:
        identity, sep, key = pair.partition("=")
        if not sep:
            raise ValueError(f"{pair!r}: write IDENTITY=PUBLIC_KEY")
        permissions_of(identity)
        keys[identity] = key.strip()
    return keys


def _show() -> str:
    lines = []
    for identity, permissions in NATS_PERMISSIONS.items():
        lines.append(f"{identity}")
        lines.append("  publish:   " + (", ".join(permissions.publish) or "(nothing)"))
        lines.append("  subscribe: " + ", ".join(permissions.subscribe))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m knowsphere_runtime.nats_permissions",
        description="The NATS permissions of the KnowSphere identities, as a nats-server configuration.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    generate = sub.add_parser("generate", help="write DIR/<identity>.nk seeds (0600); existing ones are kept")
    generate.add_argument("folder", type=Path)
    generate.add_argument("identities", nargs="*", help=f"default: all ({', '.join(NATS_PERMISSIONS)})")
    authorization = sub.add_parser(
        "authorization", help="print the nats-server authorization block for the identities' public keys"
    )
    authorization.add_argument("keys", nargs="*", metavar="IDENTITY=PUBLIC_KEY")
    authorization.add_argument("--seeds", type=Path, help="take the keys from the <identity>.nk files of DIR")
    sub.add_parser("show", help="print every identity's permissions")
    args = parser.parse_args(argv)
    try:
        if args.command == "generate":
            for identity, path in ensure_seeds(
                args.folder, args.identities or list(NATS_PERMISSIONS)
            ).items():
                print(f"{identity}\t{public_key(path.read_bytes())}\t{path}")
        elif args.command == "authorization":
            keys = public_keys_of_seeds(seeds_in(args.seeds)) if args.seeds else {}
            keys.update(_parse_pairs(args.keys))
            if not keys:
                parser.error("give IDENTITY=PUBLIC_KEY pairs or --seeds DIR")
            print(authorization_block(keys), end="")
        else:
            print(_show())
    except (ValueError, OSError, UnknownIdentityError) as error:
        print(error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
