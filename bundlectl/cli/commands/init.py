"""`bundlectl init`: a commented config with secure defaults, and its lock."""

from __future__ import annotations

from pathlib import Path

from bundlectl.config import paths
from bundlectl.config.fsio import project_lock, write_project_file
from bundlectl.config.project import load_project
from bundlectl.errors import UsageError
from bundlectl.output import out
from bundlectl.resolve.resolved import resolve_project

TEMPLATE = """\
# bundlectl.yaml: which MCP servers this project's agents get, and what each agent may call.
# Reference: `bundlectl --help`; JSON Schema: `bundlectl schema --out schemas/`.
version: 1

# Bundles of MCP servers, with optional PEP 440 version constraints (e.g. github>=1,<2).
bundles:
  - basic

# The project's own servers (same shape as in a bundle manifest). Use ${VAR} references for
# secrets; they are expanded only when a server starts, never written to the lock.
servers: {}

# Per-agent rules over `server.tool` names; `*` and `?` are the only wildcards.
# deny beats ask beats allow; `ask` needs a human's confirmation per call.
agents:
  reader:
    allow: [files.read_file, files.list_directory]
  writer:
    extends: [reader]
    ask: [files.write_file]

policy:
  default: deny        # agents not listed above may call nothing
  deny: []             # denied for every agent; cannot be lifted
  pin_tools: false     # true: tools not recorded in bundlectl.lock are denied
  # sandbox: on        # the default: local servers run in a kernel sandbox (Linux: bubblewrap)
"""


def run(config: Path | None, *, force: bool) -> int:
    target = config or Path.cwd() / paths.CONFIG_NAME
    if target.exists() and not force:
        raise UsageError(f"{target} already exists", hint="pass --force to overwrite it")
    above = next(
        (
            f / paths.CONFIG_NAME
            for f in target.parent.resolve().parents
            if (f / paths.CONFIG_NAME).is_file()
        ),
        None,
    )
    if above is not None and not force:  # every command here would use it instead of that one
        raise UsageError(
            f"{target.parent} is inside the project of {above}; a bundlectl.yaml here would start "
            "a nested project that every command below it uses instead",
            hint=f"use that project (commands find it from here), or pass --force to start a "
            f"nested one in {target.parent}",
        )

    with project_lock(target):
        write_project_file(target, TEMPLATE)
        project = load_project(target)
        resolution = resolve_project(project, use_lock=False)
        resolution.write_lock()
    out(f"wrote {target} and {paths.lock_path_for(target).name}")
    out("next: `bundlectl resolve` to see the servers, `bundlectl list` for more bundles")
    return 0
