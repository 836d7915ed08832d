"""Skills per tenant on disk, read safely: ``SkillStore`` (list, get, read a file of a bound skill,
load a skill's files for the sandbox)."""

from knowsphere_toolrunner.skills.store import (
    Skill,
    SkillError,
    SkillErrorCode,
    SkillFileHead,
    SkillLimits,
    SkillStore,
    SkillSummary,
    tenant_folder_name,
)

__all__ = [
    "Skill",
    "SkillError",
    "SkillErrorCode",
    "SkillFileHead",
    "SkillLimits",
    "SkillStore",
    "SkillSummary",
    "tenant_folder_name",
]
