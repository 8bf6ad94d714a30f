"""An agent's view of its servers' resources and prompts (`ServerContent`, a part of
`AgentView`): listed from the servers in use — those with a tool the agent may call outright —,
read, filled in, completed and watched, every text through the agent's privacy tokenizer and
every read audited (`Pipeline.access`)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, TypeVar

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from bundlectl.calls.pipeline import Pipeline
from bundlectl.errors import BundlectlError
from bundlectl.gateway.relayed import relayed
from bundlectl.gateway.request_context import RequestContext, connection_of, not_found
from bundlectl.gateway.server_messages import Job
from bundlectl.mcpio.session import Rounds, ServerSession

if TYPE_CHECKING:
    from bundlectl.gateway.hub import Hub
    from bundlectl.gateway.subscriptions import Notify, WatcherKey

L = TypeVar("L")
_Prompt = types.GetPromptResult | types.InputRequiredResult
T = TypeVar("T")


class ServerContent:
    """Resources, templates, prompts and completion for one agent (see `AgentView`)."""

    hub: Hub
    agent: str
    ctx: RequestContext | None
    binding: dict[str, str] | None  # (`AgentView`)
    rounds: Rounds | None

    @property
    def pipeline(self) -> Pipeline:
        return self.hub.pipeline

    async def _catalog(self) -> list[tuple[str, types.Tool]]:
        """(server, tool) for every tool the agent may call (`AgentView._catalog`)."""
        raise NotImplementedError

    async def _servers_in_use(self) -> list[str]:
        """The servers whose resources and prompts are the agent's too (`CompiledAgent.opens`:
        a tool allowed outright, not only after confirmation or for some arguments)."""
        compiled = self.pipeline.resolution.policy.agent(self.agent)
        tools: dict[str, list[str]] = {}
        for server, tool in await self._catalog():
            tools.setdefault(server, []).append(tool.name)
        return sorted(server for server, names in tools.items() if compiled.opens(server, names))

    async def _gather(self, job: Job[list[L]]) -> list[tuple[str, L]]:
        """(server, item) for every item of a list (`job`: one of `_PROMPTS`, `_RESOURCES`,
        `_TEMPLATES`) of every server in use, asked concurrently; a server without the feature
        adds nothing."""

        found: dict[str, list[L]] = {}

        async def one(server: str) -> None:
            with contextlib.suppress(BundlectlError):
                downstream = self.hub.downstream(server, self.agent)
                found[server] = await downstream.run(self.hub.group, job)

        servers = await self._servers_in_use()
        async with anyio.create_task_group() as group:
            for server in servers:
                group.start_soon(one, server)
        return [(server, item) for server in servers for item in found.get(server, [])]

    async def list_prompts(self) -> list[types.Prompt]:
        """The prompts of the servers in use, named `server__prompt` (descriptions through the
        tokenizer, as what `prompts/get` returns)."""
        prompts = [
            prompt.model_copy(update={"name": self.hub.listings.name_of(server, prompt.name)})
            for server, prompt in await self._gather(_PROMPTS)
        ]
        return self._tokenized(prompts, "title", "description")

    def _tokenized(self, items: list[T], *fields: str) -> list[T]:
        """Listed items with the text of `fields` tokenized (privacy), as reads of them are."""
        tokens = self.hub.privacy.tokenizer(self.ctx, self.agent)
        if tokens is None:
            return items
        return [tokens.listed(item, *fields) for item in items]

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None
    ) -> types.GetPromptResult | types.InputRequiredResult:
        """The prompt (by the name the client sees); or, when the client answers a 2026-07-28
        server's questions itself (`rounds`), those questions (`relayed`)."""
        listed = await self._gather(_PROMPTS)
        found = [(s, p.name) for s, p in listed if self.hub.listings.name_of(s, p.name) == name]
        if found:
            server, prompt = found[0]

            async def job(
                session: ServerSession,
            ) -> types.GetPromptResult | types.InputRequiredResult:
                return await session.prompt(prompt, arguments, self.rounds)

            key = {"name": prompt, "arguments": arguments or {}}
            try:
                downstream = self.hub.downstream(server, self.agent)
                got = await downstream.run(self.hub.group, job, self.ctx)
            except BaseException:
                self.pipeline.access(self.agent, server, "prompts/get", key, "server-error")
                raise
            self.pipeline.access(self.agent, server, "prompts/get", key, "ok")
            tokens = self.hub.privacy.tokenizer(self.ctx, self.agent)
            if isinstance(got, types.InputRequiredResult):
                assert self.binding is not None
                return relayed(self.ctx, got, self.binding, False, tokens)
            return tokens.prompt(got) if tokens is not None else got
        self.pipeline.access(self.agent, "-", "prompts/get", {"name": name}, "not-found")
        raise not_found(f"unknown prompt {name!r}; prompts/list shows the prompts you can use")

    async def complete(
        self,
        ref: types.PromptReference | types.ResourceTemplateReference,
        argument: dict[str, str],
        context: dict[str, str] | None,
    ) -> types.CompleteResult:
        """Completions for an argument of a prompt (by the name the client sees) or a resource
        template (by its URI template), from the server in use that has it; the answer passes
        the tokenizer like every other text a server sends."""
        found: list[tuple[str, types.PromptReference | types.ResourceTemplateReference]]
        if isinstance(ref, types.PromptReference):
            prompts = await self._gather(_PROMPTS)
            found = [
                (s, types.PromptReference(name=p.name))
                for s, p in prompts
                if self.hub.listings.name_of(s, p.name) == ref.name
            ]
            what = f"prompt {ref.name!r}"
        else:
            templates = await self._gather(_TEMPLATES)
            found = [(s, ref) for s, t in templates if t.uri_template == ref.uri]
            what = f"template {ref.uri!r}"
        if not found:
            raise not_found(f"unknown {what}; nothing to complete")
        server, real = found[0]

        async def job(session: ServerSession) -> types.CompleteResult:
            result: types.CompleteResult = await session.complete(real, argument, context)
            return result

        result: types.CompleteResult = await self.hub.downstream(server, self.agent).run(
            self.hub.group, job, self.ctx
        )
        tokens = self.hub.privacy.tokenizer(self.ctx, self.agent)
        if tokens is None:
            return result
        values = [tokens.text(value) for value in result.completion.values]
        completion = result.completion.model_copy(update={"values": values})
        return result.model_copy(update={"completion": completion})

    async def list_resources(self) -> list[types.Resource]:
        found = [item for _, item in await self._gather(_RESOURCES)]
        return self._tokenized(found, "uri", "name", "title", "description")

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        found = await self._gather(_TEMPLATES)
        return self._tokenized([item for _, item in found], "name", "title", "description")

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """The resource from the server in use that lists it, or else from the first that can
        read it (a URI made from a template). A listed URI that was tokenized is read by its
        real value, from the server that listed it only (no token is put back elsewhere)."""

        listed = await self._gather(_RESOURCES)
        tokens = self.hub.privacy.tokenizer(self.ctx, self.agent)
        real = tokens.restore(uri) if tokens is not None else uri
        owners = [server for server, item in listed if str(item.uri) == real]
        uri = real if owners else uri
        candidates = owners or await self._servers_in_use()

        async def job(session: ServerSession) -> types.ReadResourceResult | None:
            try:
                return await session.read(uri)
            except MCPError:  # not this server's: the next candidate may have it
                return None

        for server in candidates:
            try:
                downstream = self.hub.downstream(server, self.agent)
                result = await downstream.run(self.hub.group, job, self.ctx)
            except BundlectlError:
                continue
            if result is not None:
                self.pipeline.access(self.agent, server, "resources/read", {"uri": uri}, "ok")
                tokens = self.hub.privacy.tokenizer(self.ctx, self.agent)
                return tokens.read(result) if tokens is not None else result
        self.pipeline.access(self.agent, "-", "resources/read", {"uri": uri}, "not-found")
        raise not_found(f"unknown resource {uri!r}; resources/list shows what you can read", uri)

    async def subscribe(
        self, uri: str, key: WatcherKey, notify: Notify, ctx: RequestContext | None = None
    ) -> None:
        """Watch a resource of a server in use: the one that lists it, or else the first that
        can watch it (a URI made from a template); until the client of request `ctx`
        unsubscribes or its connection ends."""
        listed = await self._gather(_RESOURCES)
        owners = [server for server, item in listed if str(item.uri) == uri]
        for server in owners or await self._servers_in_use():
            if await self.hub.watch(server, self.agent, uri, key, notify):
                if ctx is not None:
                    self.hub.release_at_end(connection_of(ctx), key)
                return
        raise not_found(f"unknown resource {uri!r}; resources/list shows what you can read", uri)


async def _PROMPTS(session: ServerSession) -> list[types.Prompt]:
    return await session.prompts()


async def _RESOURCES(session: ServerSession) -> list[types.Resource]:
    return await session.resources()


async def _TEMPLATES(session: ServerSession) -> list[types.ResourceTemplate]:
    return await session.templates()
