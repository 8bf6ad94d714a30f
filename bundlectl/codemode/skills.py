"""Skills: short Markdown files with front matter that code mode keeps beside the generated tools
(`codegen` lists them in the README; `serve` offers them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Skill:
    """A skill the agent kept in `skills/<folder>/`: its SKILL.md's name and description."""

    folder: str
    name: str
    description: str


def read_skills(skills: Path) -> tuple[list[Skill], list[str]]:
    """The skills in a `skills/` folder, by folder name, and what is wrong with any SKILL.md
    (a skill without one, or without `name:`/`description:` front matter, is still listed)."""
    found: list[Skill] = []
    problems: list[str] = []
    folders = sorted(p for p in skills.iterdir() if p.is_dir()) if skills.is_dir() else []
    for folder in folders:
        if folder.name.startswith((".", "_")):
            continue
        card = folder / "SKILL.md"
        text = card.read_text(encoding="utf-8", errors="replace") if card.is_file() else ""
        fields = _front_matter(text)
        missing = [k for k in ("name", "description") if not fields.get(k)]
        if missing:
            what = f"SKILL.md lacks {', '.join(missing)}" if text else "has no SKILL.md"
            problems.append(f"skill {folder.name!r} {what} (skills/README.md says how)")
        found.append(
            Skill(folder.name, fields.get("name") or folder.name, fields.get("description", ""))
        )
    return found, problems


def _front_matter(text: str) -> dict[str, str]:
    """`key: value` lines between the leading `---` lines of a SKILL.md (the Agent Skills
    format); quotes around a value are dropped."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return fields
        key, colon, value = line.partition(":")
        if colon and key.strip() and not key.startswith((" ", "\t")):
            fields[key.strip()] = value.strip().strip("\"'")
    return {}


SKILLS_README = """# Skills

Code that worked, kept to use again. `bundlectl codegen` created this folder and never writes,
replaces or checks anything in it: it is yours (and your agent's).

A skill is a folder here with a `SKILL.md` and its code:

```
skills/<skill>/SKILL.md          what it is for (below)
skills/<skill>/{module}
```

`SKILL.md` starts with front matter, then says when to use it:

```markdown
---
name: summarize-folder
description: One paragraph per file of a folder, from read_file and list_directory.
---
Use when asked what a folder holds. Call `summarize(path)`; it returns the text.
```

A skill calls tools through the generated `servers/` functions, so the same policy applies
to it as to any other call of this agent. Run `bundlectl codegen` again after adding one: the
README beside `servers/` lists every skill with its description.
"""


def skill_seed(lang: str) -> dict[str, str]:
    """What codegen puts in a `skills/` folder that does not exist yet (never again after)."""
    if lang == "typescript":
        return {"skills/README.md": SKILLS_README.format(module="index.ts")}
    return {
        "skills/README.md": SKILLS_README.format(module="__init__.py"),
        "skills/__init__.py": '"""Skills: code kept to use again (see README.md)."""\n',
    }
