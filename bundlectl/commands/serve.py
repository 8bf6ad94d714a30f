"""`bundlectl serve`: the policy-enforcing MCP gateway for one agent (stdio, direct mode)."""

from __future__ import annotations

from pathlib import Path

from bundlectl.executor.pipeline import AuditLog, Pipeline, default_agent
from bundlectl.output import ServeMode
from bundlectl.project import load_project, resolve_project


def run(config: Path | None, *, agent: str | None, mode: ServeMode = ServeMode.direct) -> int:
    resolution = resolve_project(load_project(config))
    who = default_agent(agent)
    resolution.policy.agent(who)  # extends errors and the like fail now, before serving
    pipeline = Pipeline(resolution, AuditLog(resolution, via="serve"), confirm=None)

    from bundlectl.executor import runner
    from bundlectl.executor.gateway import serve_stdio

    async def go() -> None:
        await serve_stdio(pipeline, who, mode.value)

    runner.run(go)
    return 0
