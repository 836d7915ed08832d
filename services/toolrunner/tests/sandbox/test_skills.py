"""The skills store: what an agent is offered and what read_file hands back."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowsphere_toolrunner.skills import (
    SkillError,
    SkillErrorCode,
    SkillLimits,
    SkillStore,
    tenant_folder_name,
)


@pytest.fixture
def store(tmp_path: Path) -> SkillStore:
    store = SkillStore(tmp_path / "data", SkillLimits(max_file_bytes=1000))
    report = store.tenant_dir("acme") / "report-writer"
    (report / "scripts").mkdir(parents=True)
    (report / "SKILL.md").write_text(
        "---\nname: report-writer\ndescription: >\n  Writes a report\n  from a CSV file.\nlicense: MIT\n---\n"
        "# Report writer\nRun scripts/build.py.\n"
    )
    (report / "scripts" / "build.py").write_text("print('report')\n")
    (report / "template.md").write_text("# {title}\n")
    notes = store.tenant_dir("acme") / "notes"
    notes.mkdir()
    (notes / "SKILL.md").write_text('---\ndescription: "Keeps notes: short ones"\n---\nBody\n')
    (store.tenant_dir("acme") / "not-a-skill").mkdir()  # no SKILL.md
    (store.tenant_dir("acme:eu") / "report-writer").mkdir(parents=True)
    (store.tenant_dir("acme:eu") / "report-writer" / "SKILL.md").write_text("---\ndescription: EU\n---\n")
    return store


def test_skills_are_listed_with_their_description_and_contents(store: SkillStore) -> None:
    listed = store.list_skills("acme")
    assert [(s.name, s.description, s.path, s.has_scripts, s.file_count) for s in listed] == [
        ("notes", "Keeps notes: short ones", "/skills/notes/SKILL.md", False, 1),
        ("report-writer", "Writes a report from a CSV file.", "/skills/report-writer/SKILL.md", True, 3),
    ]
    assert [s.name for s in store.list_skills("acme", bound={"notes", "missing"})] == ["notes"]
    assert [s.description for s in store.list_skills("acme:eu")] == ["EU"]
    assert store.list_skills("initech") == []


def test_a_skill_gives_its_instructions_and_files(store: SkillStore) -> None:
    skill = store.get_skill("acme", "report-writer")
    assert skill.instructions == "# Report writer\nRun scripts/build.py.\n"
    assert skill.files == ("SKILL.md", "scripts/build.py", "template.md")
    assert store.load_files("acme", "report-writer")["scripts/build.py"] == b"print('report')\n"


def test_read_file_reads_only_bound_skills(store: SkillStore) -> None:
    assert (
        store.read_file("acme", "/skills/report-writer/template.md", bound={"report-writer"})
        == b"# {title}\n"
    )
    with pytest.raises(SkillError) as caught:
        store.read_file("acme", "/skills/report-writer/template.md", bound={"notes"})
    assert caught.value.code == SkillErrorCode.NOT_FOUND  # unbound reads like missing
    with pytest.raises(SkillError) as caught:
        store.read_file("acme:eu", "/skills/notes/SKILL.md", bound={"notes"})
    assert caught.value.code == SkillErrorCode.NOT_FOUND  # another tenant's skill does not exist here


@pytest.mark.parametrize(
    "path",
    [
        "/skills/report-writer/../notes/SKILL.md",
        "/skills/report-writer/./SKILL.md",
        "/skills/report-writer//SKILL.md",
        "/skills/report-writer/",
        "/skills/../../etc/passwd",
        "/etc/passwd",
        "skills/report-writer/SKILL.md",
        "/skills/report-writer/scripts\\..\\SKILL.md",
        "/skills/report-writer/SKILL.md\x00.txt",
        "/skills/" + "a" * 600,
    ],
)
def test_traversal_and_absolute_paths_are_refused(store: SkillStore, path: str) -> None:
    with pytest.raises(SkillError) as caught:
        store.read_file("acme", path, bound={"report-writer", "notes", ".."})
    assert (caught.value.code, caught.value.field) == (SkillErrorCode.INVALID_ARGUMENT, "path")


def test_a_file_over_the_limit_is_refused_with_the_limit(store: SkillStore) -> None:
    (store.tenant_dir("acme") / "notes" / "big.txt").write_bytes(b"x" * 1001)
    with pytest.raises(SkillError) as caught:
        store.read_file("acme", "/skills/notes/big.txt", bound={"notes"})
    assert caught.value.code == SkillErrorCode.TOO_LARGE and "1000" in str(caught.value)


def test_tenant_folders_never_collide() -> None:
    tenants = ["acme:eu", "acme@eu", "acme_eu", "acme.eu", "acme-eu", "acme3Aeu", "acme2Eeu"]
    folders = [tenant_folder_name(tenant) for tenant in tenants]
    assert len(set(folders)) == len(tenants)
    assert all("/" not in folder and folder not in (".", "..") for folder in folders)
    for bad in ("acme\n", "../acme", "", ".acme", "a/b"):
        with pytest.raises(SkillError):
            tenant_folder_name(bad)
