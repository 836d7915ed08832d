"""write_plan: the model writes (or rewrites) its plan for the question as numbered steps with a status.

The plan lives in the tool message, in the conversation's checkpoint, where working memory reads the
latest plan from; the tool checks it and gives it back numbered, with what is done and what is next.
"""

from __future__ import annotations

from typing import Any

from knowsphere.toolrunner.v1.toolrunner_enums import ToolCategory
from knowsphere_toolrunner.domain.tools.base import BadArguments, ToolContext, ToolOutput, ToolSpec

STATUSES = ("pending", "in_progress", "done", "dropped")
MAX_STEPS = 20
MAX_STEP_CHARS = 500

SPEC = ToolSpec(
    name="write_plan",
    display_name="Plan",
    description=(
        "Write or update your plan for answering a question that needs several steps (e.g. compare "
        "documents, gather facts from many places). Send the whole plan each time: every step with its "
        "status. At most one step is in_progress. Returns the plan numbered, with the next step. Do not "
        "use it for simple questions."
    ),
    parameters={
        "type": "object",
        "properties": {
            "goal": {
                "type": "string",
                "description": "What the plan is for, in one sentence.",
                "maxLength": 500,
            },
            "steps": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_STEPS,
                "items": {
                    "type": "object",
                    "properties": {
                        "step": {"type": "string", "minLength": 1, "maxLength": MAX_STEP_CHARS},
                        "status": {"type": "string", "enum": list(STATUSES)},
                    },
                    "required": ["step", "status"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["steps"],
        "additionalProperties": False,
    },
    category=ToolCategory.PLANNING,
)


class WritePlan:
    spec = SPEC

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        steps = arguments["steps"]
        active = [i for i, s in enumerate(steps, 1) if s["status"] == "in_progress"]
        if len(active) > 1:
            raise BadArguments(f"steps {', '.join(map(str, active))} are all in_progress; at most one may be")
        numbered = [
            {"n": i, "step": s["step"].strip(), "status": s["status"]} for i, s in enumerate(steps, 1)
        ]
        done = sum(1 for s in numbered if s["status"] == "done")
        upcoming = [s for s in numbered if s["status"] in ("in_progress", "pending")]
        plan: dict[str, Any] = {
            "plan": numbered,
            "done": done,
            "total": len(numbered),
            "next": upcoming[0] if upcoming else None,
        }
        if arguments.get("goal"):
            plan = {"goal": arguments["goal"].strip(), **plan}
        return ToolOutput(plan)
