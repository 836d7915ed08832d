"""Skills of each tenant on disk: ``<data_dir>/skills/<tenant>/<name>/SKILL.md`` plus optional files.

Every file is reached by opening one path component at a time beneath the skills folder with
``O_NOFOLLOW``, so a symlink anywhere — the tenant folder, the skill folder, a sub-folder or the file
itself — is refused, even one swapped in after a check. Paths from callers are relative (``..``,
absolute paths, empty and ``.`` components are refused). Tenant folders are an injective encoding of
the tenant id (``acme:eu``, ``acme@eu`` and ``acme_eu`` never share one). A skill that is not bound,
like one that does not exist, answers NOT_FOUND.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from knowsphere_toolrunner.skills.front_matter import split_front_matter

SKILL_FILE = "SKILL.md"
SKILLS_FOLDER = "skills"
VIRTUAL_ROOT = "/skills"
"""How agents see skill files: ``/skills/<name>/<path>`` (read_file's argument)."""
SCRIPT_SUFFIXES = (".py", ".sh")

_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}")
_SKILL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
_KEPT_IN_FOLDER_NAMES = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class SkillLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_file_bytes: int = Field(default=1024 * 1024, gt=0, description="largest file read_file returns")
    max_skill_files: int = Field(default=200, gt=0, description="files of one skill")
    max_skill_bytes: int = Field(default=32 * 1024 * 1024, gt=0, description="one skill's files together")
    max_depth: int = Field(default=8, gt=0, description="folder levels inside a skill")
    max_description_chars: int = Field(default=1024, gt=0)
    max_path_chars: int = Field(default=500, gt=0)


class SkillErrorCode(StrEnum):
    INVALID_ARGUMENT = "invalid_argument"
    """A tenant id, skill name or path breaks the rules; ``field`` names it."""
    NOT_FOUND = "not_found"
    """No such skill or file, or the skill is not bound to the agent."""
    UNSAFE_FILE = "unsafe_file"
    """A symlink or special file where a regular file or folder was expected."""
    TOO_LARGE = "too_large"


class SkillError(Exception):
    def __init__(self, code: SkillErrorCode, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.field = field


@dataclass(frozen=True)
class SkillSummary:
    name: str
    description: str
    path: str
    """The SKILL.md as agents address it: ``/skills/<name>/SKILL.md``."""
    has_scripts: bool
    file_count: int
    update_time: float = 0.0
    """Newest modification time among the skill's files (seconds since the epoch)."""


@dataclass(frozen=True)
class Skill:
    summary: SkillSummary
    instructions: str
    """SKILL.md without its front matter."""
    files: tuple[str, ...]
    """Relative paths of the skill's regular files, sorted."""
    file_sizes: Mapping[str, int] = field(default_factory=dict)
    """Size in bytes of each of ``files``."""


@dataclass(frozen=True)
class SkillFileHead:
    """The start of a skill file, at most the size asked for."""

    content: bytes
    size_bytes: int
    truncated: bool


def tenant_folder_name(tenant: str) -> str:
    """An injective, filesystem-safe folder name for a tenant id (percent-encoding every byte outside
    ``[A-Za-z0-9_-]``, ``%`` included, so no two ids share a folder and none is ``.`` or ``..``)."""
    if not _TENANT.fullmatch(tenant):
        raise SkillError(SkillErrorCode.INVALID_ARGUMENT, "tenant: not a valid tenant id", field="tenant")
    return "".join(
        ch if ch in _KEPT_IN_FOLDER_NAMES else "".join(f"%{b:02X}" for b in ch.encode()) for ch in tenant
    )


def check_skill_name(name: str, field: str = "skill") -> str:
    if not _SKILL_NAME.fullmatch(name):
        raise SkillError(
            SkillErrorCode.INVALID_ARGUMENT,
            f"{field}: {name[:100]!r} is not a skill name (letters, digits, '-', '_'; at most 100)",
            field=field,
        )
    return name


class SkillStore:
    def __init__(self, data_dir: Path, limits: SkillLimits | None = None) -> None:
        self.root = data_dir / SKILLS_FOLDER
        self.limits = limits or SkillLimits()

    def tenant_dir(self, tenant: str) -> Path:
        """Where a tenant's skills live (for installing skills; reads go through the checks below)."""
        return self.root / tenant_folder_name(tenant)

    # -- reading -------------------------------------------------------------------------------------

    def list_skills(self, tenant: str, bound: Collection[str] | None = None) -> list[SkillSummary]:
        """The tenant's skills (only ``bound`` ones when given), sorted by name."""
        folder = tenant_folder_name(tenant)
        try:
            tenant_fd = self._open_beneath([folder], directory=True)
        except SkillError as error:
            if error.code == SkillErrorCode.NOT_FOUND:
                return []
            raise
        try:
            names = sorted(
                entry.name
                for entry in os.scandir(tenant_fd)
                if _SKILL_NAME.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)
            )
        finally:
            os.close(tenant_fd)
        wanted = set(bound) if bound is not None else None
        summaries = []
        for name in names:
            if wanted is not None and name not in wanted:
                continue
            try:
                summaries.append(self.get_skill(tenant, name).summary)
            except SkillError:
                continue  # not a skill (no SKILL.md), or unsafe: not offered
        return summaries

    def any_has_scripts(self, tenant: str, names: Collection[str]) -> bool:
        """Whether one of the tenant's skills ``names`` has a script (without reading any file): what
        ListTools asks on every turn. Missing, invalid and unsafe skills count as having none."""
        for name in names:
            try:
                files = [
                    path
                    for path, _ in self._walk_entries(tenant, check_skill_name(name), refuse_unsafe=False)
                ]
            except SkillError:
                continue
            if SKILL_FILE in files and any(path.endswith(SCRIPT_SUFFIXES) for path in files):
                return True
        return False

    def get_skill(self, tenant: str, name: str) -> Skill:
        check_skill_name(name)
        entries = dict(self._walk_entries(tenant, name, refuse_unsafe=False))
        files = list(entries)
        if SKILL_FILE not in files:
            raise SkillError(SkillErrorCode.NOT_FOUND, f"skill: no skill {name!r}", field="skill")
        text = self._read(tenant, name, SKILL_FILE).decode("utf-8", errors="replace")
        keys, body = split_front_matter(text)
        summary = SkillSummary(
            name=name,
            description=keys.get("description", "")[: self.limits.max_description_chars],
            path=f"{VIRTUAL_ROOT}/{name}/{SKILL_FILE}",
            has_scripts=any(path.endswith(SCRIPT_SUFFIXES) for path in files),
            file_count=len(files),
            update_time=max(entry.st_mtime for entry in entries.values()),
        )
        return Skill(
            summary=summary,
            instructions=body,
            files=tuple(sorted(files)),
            file_sizes={path: entry.st_size for path, entry in entries.items()},
        )

    def read_file(self, tenant: str, path: str, bound: Collection[str]) -> bytes:
        """A file of a bound skill, addressed as ``/skills/<name>/<path>`` (``read_file``'s argument)."""
        name, relative = self.split_virtual_path(path)
        if name not in bound:
            raise SkillError(SkillErrorCode.NOT_FOUND, f"path: no skill {name!r}", field="path")
        return self._read(tenant, name, relative)

    def read_head(self, tenant: str, path: str, bound: Collection[str], max_bytes: int) -> SkillFileHead:
        """As :meth:`read_file`, but a file larger than ``max_bytes`` gives its first ``max_bytes``
        (marked truncated) instead of an error."""
        name, relative = self.split_virtual_path(path)
        if name not in bound:
            raise SkillError(SkillErrorCode.NOT_FOUND, f"path: no skill {name!r}", field="path")
        parts = [tenant_folder_name(tenant), name, *_check_relative(relative, "path")]
        fd = self._open_beneath(parts, directory=False)
        try:
            size = os.fstat(fd).st_size
            with os.fdopen(os.dup(fd), "rb") as handle:
                content = handle.read(max_bytes)
        finally:
            os.close(fd)
        return SkillFileHead(content=content, size_bytes=size, truncated=size > len(content))

    def load_files(self, tenant: str, name: str) -> dict[str, bytes]:
        """Every file of a skill, for the sandbox; any symlink or special file refuses the whole skill."""
        check_skill_name(name)
        files: dict[str, bytes] = {}
        total = 0
        for relative in self._walk(tenant, name, refuse_unsafe=True):
            content = self._read(tenant, name, relative, limit=self.limits.max_skill_bytes - total)
            total += len(content)
            files[relative] = content
        if SKILL_FILE not in files:
            raise SkillError(SkillErrorCode.NOT_FOUND, f"skill: no skill {name!r}", field="skill")
        return files

    def split_virtual_path(self, path: str, field: str = "path") -> tuple[str, str]:
        """``/skills/<name>/<relative>`` → (name, relative), refusing anything else."""
        prefix = VIRTUAL_ROOT + "/"
        if len(path) > self.limits.max_path_chars or not path.startswith(prefix):
            raise SkillError(
                SkillErrorCode.INVALID_ARGUMENT,
                f"{field}: must look like {VIRTUAL_ROOT}/<skill>/<file>, "
                f"at most {self.limits.max_path_chars} characters",
                field=field,
            )
        name, _, relative = path[len(prefix) :].partition("/")
        check_skill_name(name, field)
        _check_relative(relative, field)
        return name, relative

    # -- the careful part ------------------------------------------------------------------------------

    def _open_beneath(self, parts: list[str], *, directory: bool) -> int:
        """Open ``root/parts…`` one component at a time, never following a symlink."""
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise SkillError(SkillErrorCode.NOT_FOUND, "no skills", field="skill") from None
        try:
            for index, part in enumerate(parts):
                last = index == len(parts) - 1
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                flags |= os.O_DIRECTORY if (directory or not last) else os.O_NONBLOCK
                try:
                    child = os.open(part, flags, dir_fd=fd)
                except FileNotFoundError:
                    raise SkillError(
                        SkillErrorCode.NOT_FOUND, "no such skill or file", field="path"
                    ) from None
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
                        raise SkillError(
                            SkillErrorCode.UNSAFE_FILE,
                            f"path: {'/'.join(parts[1:])!r} is not a plain file",
                            field="path",
                        ) from None
                    raise
                os.close(fd)
                fd = child
            if not directory and not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SkillError(
                    SkillErrorCode.UNSAFE_FILE,
                    f"path: {'/'.join(parts[1:])!r} is not a plain file",
                    field="path",
                )
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _read(self, tenant: str, name: str, relative: str, limit: int | None = None) -> bytes:
        parts = [tenant_folder_name(tenant), check_skill_name(name), *_check_relative(relative, "path")]
        limit = self.limits.max_file_bytes if limit is None else min(limit, self.limits.max_skill_bytes)
        fd = self._open_beneath(parts, directory=False)
        try:
            if os.fstat(fd).st_size > limit:
                raise SkillError(
                    SkillErrorCode.TOO_LARGE,
                    f"path: {relative!r} is over the limit of {limit} bytes",
                    field="path",
                )
            with os.fdopen(os.dup(fd), "rb") as handle:
                content = handle.read(limit + 1)
        finally:
            os.close(fd)
        if len(content) > limit:
            raise SkillError(
                SkillErrorCode.TOO_LARGE, f"path: {relative!r} is over the limit of {limit} bytes"
            )
        return content

    def _walk(self, tenant: str, name: str, *, refuse_unsafe: bool) -> Iterator[str]:
        for relative, _ in self._walk_entries(tenant, name, refuse_unsafe=refuse_unsafe):
            yield relative

    def _walk_entries(
        self, tenant: str, name: str, *, refuse_unsafe: bool
    ) -> Iterator[tuple[str, os.stat_result]]:
        """Relative paths (with their stat) of the skill's regular files; symlinks and special files
        are skipped, or refused with ``refuse_unsafe``."""
        skill_fd = self._open_beneath([tenant_folder_name(tenant), name], directory=True)
        count = 0
        try:
            for folder, subfolders, files, folder_fd in os.fwalk(".", dir_fd=skill_fd, follow_symlinks=False):
                depth = 0 if folder == "." else folder.count("/")
                if depth >= self.limits.max_depth:
                    raise SkillError(
                        SkillErrorCode.TOO_LARGE, f"skill: nested deeper than {self.limits.max_depth}"
                    )
                for entry in sorted(files + [d for d in subfolders if _is_link(d, folder_fd)]):
                    relative = os.path.normpath(os.path.join(folder, entry))
                    status = os.stat(entry, dir_fd=folder_fd, follow_symlinks=False)
                    if not stat.S_ISREG(status.st_mode):
                        if refuse_unsafe:
                            raise SkillError(
                                SkillErrorCode.UNSAFE_FILE,
                                f"skill: {relative!r} is not a plain file",
                                field="skill",
                            )
                        continue
                    count += 1
                    if count > self.limits.max_skill_files:
                        raise SkillError(
                            SkillErrorCode.TOO_LARGE, f"skill: more than {self.limits.max_skill_files} files"
                        )
                    yield relative, status
        finally:
            os.close(skill_fd)


def _is_link(name: str, folder_fd: int) -> bool:
    return stat.S_ISLNK(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode)


def _check_relative(relative: str, field: str) -> list[str]:
    parts = relative.split("/")
    if (
        not relative
        or relative.startswith("/")
        or "\\" in relative
        or any(ord(ch) < 32 for ch in relative)
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise SkillError(
            SkillErrorCode.INVALID_ARGUMENT,
            f"{field}: {relative[:100]!r} must be a relative path inside the skill, without '..'",
            field=field,
        )
    return parts
