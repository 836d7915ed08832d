"""``ks ingest KB PATH…``: upload files (folders are walked) into a knowledge base and follow their
ingestion until each is ready or failed.

Files go up in batches (``…/documents/batch``) of at most the upload policy's ``max_files_per_upload``
files and about :data:`BATCH_MAX_BYTES`; the gateway streams them on to ingestion. Then the knowledge
base's progress stream (``…/progress``, which starts with every document's current state) feeds one
bar per document in progress and an overall bar. A file refused at upload (type, size, content) or
failed during ingestion is listed at the end with the gateway's reason, and the exit code is 1.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from knowsphere_cli.context import EXIT_FAILED, EXIT_INTERRUPTED, Cli, cli_of
from knowsphere_cli.gateway import Gateway, knowledge_base

BATCH_MAX_BYTES = 64 * 1024 * 1024
"""The most bytes of files sent in one batch request (a single larger file goes alone)."""
READY = "ready"
FAILED = "failed"
TERMINAL = frozenset({READY, FAILED})


@dataclass
class Outcome:
    """What became of one file."""

    path: Path
    label: str
    document_id: str | None = None
    status: str = "queued"
    reason: str = ""
    chunks: int = 0
    duplicate: bool = False


@dataclass
class Ingestion:
    outcomes: list[Outcome] = field(default_factory=list)

    def by_document(self) -> dict[str, Outcome]:
        return {o.document_id: o for o in self.outcomes if o.document_id and o.status not in TERMINAL}


def files_under(paths: list[Path]) -> list[tuple[Path, str]]:
    """Each file named or found under a named folder (hidden ones skipped), with the name shown for it."""
    found: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_dir():
            for file in sorted(path.rglob("*")):
                relative = file.relative_to(path)
                if file.is_file() and not any(part.startswith(".") for part in relative.parts):
                    found.append((file, str(Path(path.name) / relative)))
        elif path.is_file():
            found.append((path, str(path)))
        else:
            raise typer.BadParameter(f"{path} is neither a file nor a folder", param_hint="PATH")
    return found


def batches(outcomes: list[Outcome], max_files: int, max_bytes: int) -> Iterator[list[Outcome]]:
    batch: list[Outcome] = []
    size = 0
    for outcome in outcomes:
        file_size = outcome.path.stat().st_size
        if batch and (len(batch) >= max_files or size + file_size > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(outcome)
        size += file_size
    if batch:
        yield batch


def upload(gateway: Gateway, kb_id: str, batch: list[Outcome]) -> None:
    """Sends one batch and records each file's document or refusal."""
    with contextlib.ExitStack() as files:
        parts = [("file", (o.path.name, files.enter_context(o.path.open("rb")))) for o in batch]
        answer = gateway.post(f"/knowledge-bases/{kb_id}/documents/batch", files=parts)
    for outcome, result in zip(batch, answer["results"], strict=True):
        if result.get("error"):
            outcome.status = FAILED
            outcome.reason = result["error"].get("message") or result["error"].get("code", "refused")
        else:
            document = result["document"]
            outcome.document_id = document["id"]
            outcome.duplicate = bool(result.get("duplicate"))
            outcome.status = document.get("status") or "queued"


def stage_text(progress: dict[str, Any]) -> str:
    status = progress.get("status") or ""
    pages, total = progress.get("pages_parsed") or 0, progress.get("pages_total") or 0
    chunks, embedded = progress.get("chunks_total") or 0, progress.get("chunks_embedded") or 0
    if status == "parsing" and total:
        return f"parsing {pages}/{total} pages"
    if status == "embedding" and chunks:
        return f"embedding {embedded}/{chunks} chunks"
    return status


def follow(
    cli: Cli, gateway: Gateway, kb_id: str, ingestion: Ingestion, bars: Progress, overall: TaskID
) -> None:
    """Reads the knowledge base's progress stream until every uploaded document is ready or failed."""
    waiting = ingestion.by_document()
    tasks: dict[str, TaskID] = {}
    if not waiting:
        return
    with gateway.events("GET", f"/knowledge-bases/{kb_id}/progress") as events:
        for event in events:
            if event.name == "error":
                error = event.data.get("error", {})
                raise_failed(cli, f"the progress stream failed: {error.get('message', error)}")
            progress = event.data
            document_id = progress.get("document_id", "")
            outcome = waiting.get(document_id)
            if outcome is None:
                continue
            outcome.status = progress.get("status") or outcome.status
            if outcome.status in TERMINAL:
                finish(outcome, progress, bars)
                if document_id in tasks:
                    bars.remove_task(tasks.pop(document_id))
                del waiting[document_id]
                bars.advance(overall)
                if not waiting:
                    return
                continue
            task = tasks.get(document_id)
            if task is None:
                task = tasks[document_id] = bars.add_task(escape(outcome.label), total=100, stage="")
            bars.update(task, completed=progress.get("percent") or 0, stage=stage_text(progress))
    raise_failed(cli, f"the progress stream ended with {len(waiting)} files still ingesting (`ks kb list`)")


def finish(outcome: Outcome, progress: dict[str, Any], bars: Progress) -> None:
    if outcome.status == READY:
        outcome.chunks = progress.get("chunks_total") or 0
        chunks = f"{outcome.chunks} chunk{'' if outcome.chunks == 1 else 's'}"
        bars.console.print(f"[green]ready[/]  {escape(outcome.label)} ({chunks})")
    else:
        failure = progress.get("failure") or {}
        stage = f" while {failure['stage']}" if failure.get("stage") else ""
        outcome.reason = f"{failure.get('reason') or failure.get('code') or 'failed'}{stage}"
        bars.console.print(f"[red]failed[/] {escape(outcome.label)}: {escape(outcome.reason)}")


def raise_failed(cli: Cli, message: str) -> NoReturn:
    cli.err.print(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(EXIT_FAILED)


def summary(cli: Cli, ingestion: Ingestion, waited: bool) -> int:
    """Prints what became of the files; the exit code."""
    outcomes = ingestion.outcomes
    failed = [o for o in outcomes if o.status == FAILED]
    ready = [o for o in outcomes if o.status == READY]
    files = f"{len(outcomes)} file{'' if len(outcomes) == 1 else 's'}"
    if waited:
        cli.out.print(f"{files}: {len(ready)} ready, {len(failed)} failed")
    else:
        cli.out.print(f"{files}: {len(outcomes) - len(failed)} uploaded, {len(failed)} refused")
    if failed:
        table = Table(
            "file", "reason", title="failures", show_edge=False, pad_edge=False, title_justify="left"
        )
        for outcome in failed:
            table.add_row(escape(outcome.label), escape(outcome.reason))
        cli.out.print(table)
        return EXIT_FAILED
    return 0


def ingest(
    ctx: typer.Context,
    kb: Annotated[str, typer.Argument(help="knowledge base id or name")],
    paths: Annotated[list[Path], typer.Argument(help="files, or folders to walk", show_default=False)],
    wait: Annotated[bool, typer.Option(help="follow ingestion until every file is ready or failed")] = True,
) -> None:
    """Upload files and folders into a knowledge base and follow their ingestion."""
    cli = cli_of(ctx)
    files = files_under(paths)
    if not files:
        raise typer.BadParameter("no files found", param_hint="PATH")
    ingestion = Ingestion([Outcome(path, label) for path, label in files])
    try:
        with cli.gateway() as gateway:
            kb_id = knowledge_base(gateway, kb)["id"]
            policy = gateway.get("/upload-policy")
            limit = int(policy["max_file_size_bytes"])
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[stage]}"),
                TimeElapsedColumn(),
                console=cli.out,
            ) as bars:
                to_send = []
                for outcome in ingestion.outcomes:
                    if outcome.path.stat().st_size > limit:
                        outcome.status = FAILED
                        outcome.reason = f"over the size limit of {limit} bytes"
                    else:
                        to_send.append(outcome)
                sending = bars.add_task("uploading", total=len(to_send), stage="")
                for batch in batches(to_send, int(policy["max_files_per_upload"]), BATCH_MAX_BYTES):
                    upload(gateway, kb_id, batch)
                    for outcome in batch:
                        if outcome.status == FAILED:
                            bars.console.print(
                                f"[red]refused[/] {escape(outcome.label)}: {escape(outcome.reason)}"
                            )
                    bars.advance(sending, len(batch))
                bars.remove_task(sending)
                waiting = len(ingestion.by_document())
                if wait and waiting:
                    overall = bars.add_task("documents", total=waiting, stage="ready or failed")
                    follow(cli, gateway, kb_id, ingestion, bars, overall)
    except KeyboardInterrupt:
        cli.err.print("stopped following; what was uploaded goes on ingesting (`ks kb list`)")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    code = summary(cli, ingestion, wait)
    if code:
        raise typer.Exit(code)
