"""The skill tool: loads `.totem/skills/NAME/SKILL.md`, instructions the project keeps for the agent."""

from __future__ import annotations

import asyncio
import os
import re
import stat

from totem.security.permissions import PATH, ToolKind
from totem.tools.base import Tool, ToolContext, ToolError, ToolResult, display_path, resolve_path

SKILLS_FOLDER = ".totem/skills"
SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 64 * 1024
SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class SkillTool(Tool):
    name = "skill"
    kind = ToolKind(PATH, changes=False)
    description = "Load the instructions of a project skill (.totem/skills/NAME/SKILL.md)."
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 64}},
        "required": ["name"],
        "additionalProperties": False,
    }

    def _path(self, args: dict, ctx: ToolContext) -> str:
        name = args["name"]
        if not SKILL_NAME.match(name) or ".." in name:
            raise ToolError("a skill name is letters, digits, '-', '_' and '.'")
        return resolve_path(ctx, f"{SKILLS_FOLDER}/{name}/{SKILL_FILE}")

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        return [display_path(ctx, self._path(args, ctx))]

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        path = self._path(args, ctx)
        try:
            data = await asyncio.to_thread(_read, path)
        except _LinkedError as exc:
            raise ToolError(f"the skill {args['name']} is not read: its file has {exc.args[0]} hard "
                            "links, and another name may be outside the project or a secret file") from None
        except FileNotFoundError:
            available = await asyncio.to_thread(_skill_names, ctx)
            hint = f"; skills here: {', '.join(available)}" if available else "; this project has no skills"
            raise ToolError(f"no skill {args['name']}{hint}") from None
        except OSError as exc:
            raise ToolError(f"the skill {args['name']} cannot be read: {exc.strerror}") from None
        text = data[:MAX_SKILL_BYTES].decode("utf-8", "replace")
        if len(data) > MAX_SKILL_BYTES:
            text += f"\n[cut at {MAX_SKILL_BYTES // 1024} KB]"
        return ToolResult(text, f"skill {args['name']}", {"name": args["name"], "bytes": len(data)})


class _LinkedError(OSError):
    """The skill file has more than one hard link: its other name may be a secret file."""


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        info = os.fstat(handle.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            raise _LinkedError(info.st_nlink)
        return handle.read(MAX_SKILL_BYTES + 1)


def _skill_names(ctx: ToolContext) -> list[str]:
    try:
        folder = resolve_path(ctx, SKILLS_FOLDER)
        return sorted(name for name in os.listdir(folder) if SKILL_NAME.match(name))
    except (ToolError, OSError):
        return []
