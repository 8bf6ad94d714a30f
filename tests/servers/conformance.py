"""The downstream server for the MCP conformance suite's server scenarios, run behind `serve`.

    python conformance.py            (stdio)

It offers what the suite's scenarios call by name (tools `test_*`, resources `test://...`,
prompts `test_*`), answered the way each scenario checks: content of every type, log and progress
notifications during a call, an elicitation and a sampling request back to the client, resources
(text, binary, a template, one to subscribe to), prompts with arguments and embedded content,
completion and `logging/setLevel`. Written with the SDK's lowlevel server, so every schema and
result is exactly what is written here.
"""

from __future__ import annotations

import _unmeasured  # noqa: F401  # first: see its docstring
import json
import secrets
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import PromptsListChanged, ToolsListChanged

from conformance_jobs import JOBS, jobs
from conformance_rounds import _form, ask, inputs, said, text

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5E" + (
    "rkJggg=="
)
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
EMPTY: dict[str, Any] = {"type": "object", "properties": {}}


def tool(name: str, description: str, schema: dict[str, Any] | None = None) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=schema or EMPTY)


TOOLS = [
    tool("test_simple_text", "Answers one text block."),
    tool("test_image_content", "Answers one PNG image."),
    tool("test_audio_content", "Answers one WAV clip."),
    tool("test_embedded_resource", "Answers one embedded text resource."),
    tool("test_multiple_content_types", "Answers text, an image and a resource."),
    tool("test_tool_with_logging", "Sends three log messages while it runs."),
    tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100."),
    tool("test_error_handling", "Always fails (a tool error)."),
    tool(
        "test_sampling",
        "Asks the client's model to complete a prompt.",
        {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]},
    ),
    tool(
        "test_elicitation",
        "Asks the user for a response.",
        {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
    ),
    tool("test_elicitation_sep1034_defaults", "Asks for a form whose fields have defaults."),
    tool("test_elicitation_sep1330_enums", "Asks for a form with each kind of enum."),
    tool("test_streaming_elicitation", "Reports progress while it runs (a streamed answer)."),
    tool("test_logging_tool", "Logs one message, to a request that asked for log messages."),
    tool(
        "test_custom_headers",
        "Echoes its region, which a 2026-07-28 client also sends as the Mcp-Param-Region header.",
        {
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
            "required": ["region"],
        },
    ),
    tool("whoami", "This process's own random name (bundlectl's tests: was it restarted?)."),
    tool("test_trigger_tool_change", "Tells listening clients that its tools changed."),
    tool("test_trigger_prompt_change", "Tells listening clients that its prompts changed."),
    tool("test_missing_capability", "Samples; refused to a client without sampling (-32021)."),
    *(
        tool(f"test_input_required_result_{name}", f"Asks through input-required rounds: {what}.")
        for name, what in [
            ("elicitation", "a name"),
            ("sampling", "a completion"),
            ("list_roots", "the roots"),
            ("request_state", "a confirmation, with state"),
            ("multiple_inputs", "a name, a completion and the roots at once"),
            ("multi_round", "a name, then a colour"),
            ("tampered_state", "a confirmation, with signed state"),
            ("capabilities", "what the client's capabilities allow"),
        ]
    ),
    tool(
        "json_schema_2020_12_tool",
        "Takes a JSON Schema 2020-12 input schema.",
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                }
            },
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"},
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {
                "properties": {"contactMethod": {"const": "phone"}},
                "required": ["contactMethod"],
            },
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": False,
        },
    ),
]

DEFAULTS_FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verified", "default": True},
    },
    "required": [],
}
CHOICES = ["option1", "option2", "option3"]
TITLED = [{"const": f"value{n}", "title": f"Choice {n}"} for n in (1, 2, 3)]
ENUMS_FORM = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": CHOICES},
        "titledSingle": {"type": "string", "oneOf": TITLED},
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {"type": "string", "enum": CHOICES},
        },
        "titledMulti": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"anyOf": TITLED}},
    },
    "required": [],
}


def image() -> types.ImageContent:
    return types.ImageContent(type="image", data=PNG, mime_type="image/png")


def embedded(uri: str, value: str, mime: str = "text/plain") -> types.EmbeddedResource:
    contents = types.TextResourceContents(uri=uri, mime_type=mime, text=value)
    return types.EmbeddedResource(type="resource", resource=contents)


RESPONSE_FORM = {
    "type": "object",
    "properties": {"response": {"type": "string", "description": "Your response"}},
    "required": ["response"],
}
FORMS = {
    "test_elicitation_sep1034_defaults": (DEFAULTS_FORM, "Please review the fields' defaults"),
    "test_elicitation_sep1330_enums": (ENUMS_FORM, "Please select options from the enum fields"),
}


async def list_tools(ctx: ServerRequestContext, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[*TOOLS, *JOBS])


def mixed() -> list[Any]:
    data = json.dumps({"test": "data", "value": 123})
    resource = embedded("test://mixed-content-resource", data, "application/json")
    return [text("Multiple content types test:"), image(), resource]


# The tools whose answer is the same content every time.
CONTENT = {
    "test_simple_text": lambda: [text("This is a simple text response for testing.")],
    "test_image_content": lambda: [image()],
    "test_audio_content": lambda: [
        types.AudioContent(type="audio", data=WAV, mime_type="audio/wav")
    ],
    "test_embedded_resource": lambda: [
        embedded("test://embedded-resource", "This is an embedded resource content.")
    ],
    "test_multiple_content_types": mixed,
}


async def call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
    name, args = params.name, params.arguments or {}
    if name in CONTENT:
        return types.CallToolResult(content=CONTENT[name]())
    if name == "test_tool_with_logging":
        for step in ("Tool execution started", "Tool processing data", "Tool execution completed"):
            await ctx.session.send_log_message(
                "info", step, "conformance", related_request_id=ctx.request_id
            )
            await anyio.sleep(0.05)
        return types.CallToolResult(content=[text("Tool with logging executed successfully")])
    if name == "test_tool_with_progress":
        token = (ctx.meta or {}).get("progress_token")
        for step in (0, 50, 100):
            if token is not None:
                await ctx.session.send_progress_notification(
                    token, step, 100, f"Completed step {step} of 100", str(ctx.request_id)
                )
            await anyio.sleep(0.05)
        return types.CallToolResult(content=[text(str(token))])
    if name == "test_error_handling":
        failed = text("This tool intentionally returns an error for testing")
        return types.CallToolResult(content=[failed], is_error=True)
    if name == "json_schema_2020_12_tool":
        said = f"JSON Schema 2020-12 tool called with: {json.dumps(args)}"
        return types.CallToolResult(content=[text(said)])
    return await diagnostics(ctx, params)


async def diagnostics(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
    """The 2026-07-28 suite's diagnostic tools: a log to a request that asked for logs, progress
    on the call's stream, list changes told to listening clients, an `x-mcp-header` argument."""
    name, args = params.name, params.arguments or {}
    if name == "test_logging_tool":
        said = "Diagnostic trace logging activated"
        await ctx.session.send_log_message("info", said, "conformance", ctx.request_id)
        return types.CallToolResult(content=[text("Logging evaluated")])
    if name == "test_streaming_elicitation":
        token = (ctx.meta or {}).get("progress_token")
        if token is not None:
            await ctx.session.send_progress_notification(token, 50, 100, "halfway", ctx.request_id)
        return types.CallToolResult(content=[text("Streaming complete")])
    if name in ("test_trigger_tool_change", "test_trigger_prompt_change"):
        tools = name == "test_trigger_tool_change"
        if ctx.protocol_version >= "2026-07-28":
            await BUS.publish(ToolsListChanged() if tools else PromptsListChanged())
        elif tools:
            await ctx.session.send_tool_list_changed()
        else:
            await ctx.session.send_prompt_list_changed()
        return types.CallToolResult(content=[text("Mutation triggered")])
    if name == "whoami":
        return types.CallToolResult(content=[text(PROCESS)])
    if name == "test_custom_headers":
        return types.CallToolResult(content=[text(f"region: {args.get('region')}")])
    return await questions(ctx, params)


async def questions(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
    """The tools that ask the client something: sampling, and the elicitation forms."""
    name, args = params.name, params.arguments or {}
    if name == "test_sampling":
        message = types.SamplingMessage(role="user", content=text(str(args.get("prompt", ""))))
        sampling = types.CreateMessageRequestParams(messages=[message], max_tokens=100)
        sampled = await ask(ctx, params, types.CreateMessageRequest(params=sampling))
        if isinstance(sampled, types.InputRequiredResult):
            return sampled
        answer = getattr(sampled.content, "text", "No response")
        return types.CallToolResult(content=[text(f"LLM response: {answer}")])
    if name in FORMS or name == "test_elicitation":
        form, message_text = FORMS.get(name) or (RESPONSE_FORM, str(args.get("message", "")))
        question = types.ElicitRequestFormParams(message=message_text, requested_schema=form)
        reply = await ask(ctx, params, types.ElicitRequest(params=question))
        if isinstance(reply, types.InputRequiredResult):
            return reply
        found = json.dumps(reply.content or {})
        label = "User response" if name == "test_elicitation" else "Elicitation completed"
        return types.CallToolResult(
            content=[text(f"{label}: action={reply.action}, content={found}")]
        )
    return await jobs(ctx, params)


BUS = InMemorySubscriptionBus()  # a 2026-07-28 client's listen streams
PROCESS = secrets.token_hex(8)

STATIC = {
    "test://static-text": ("Static Text Resource", "text/plain"),
    "test://static-binary": ("Static Binary Resource", "image/png"),
    "test://watched-resource": ("Watched Resource", "text/plain"),
}


async def list_resources(ctx: ServerRequestContext, params: Any) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[
            types.Resource(uri=uri, name=uri.removeprefix("test://"), title=title, mime_type=mime)
            for uri, (title, mime) in STATIC.items()
        ]
    )


async def list_templates(
    ctx: ServerRequestContext, params: Any
) -> types.ListResourceTemplatesResult:
    template = types.ResourceTemplate(
        uri_template="test://template/{id}/data",
        name="template",
        title="Resource Template",
        mime_type="application/json",
    )
    return types.ListResourceTemplatesResult(resource_templates=[template])


async def read_resource(
    ctx: ServerRequestContext, params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    uri = str(params.uri)
    contents: Any
    if uri == "test://static-text":
        contents = types.TextResourceContents(
            uri=uri, mime_type="text/plain", text="This is the content of the static text resource."
        )
    elif uri == "test://static-binary":
        contents = types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG)
    elif uri == "test://watched-resource":
        contents = types.TextResourceContents(
            uri=uri, mime_type="text/plain", text="Watched resource content"
        )
    elif uri.startswith("test://template/") and uri.endswith("/data"):
        ident = uri.removeprefix("test://template/").removesuffix("/data")
        body = {"id": ident, "templateTest": True, "data": f"Data for ID: {ident}"}
        contents = types.TextResourceContents(
            uri=uri, mime_type="application/json", text=json.dumps(body)
        )
    else:
        raise MCPError(code=-32002, message=f"Resource not found: {uri}", data={"uri": uri})
    return types.ReadResourceResult(contents=[contents])


async def subscribe(ctx: ServerRequestContext, params: Any) -> types.EmptyResult:
    return types.EmptyResult()


PROMPTS = [
    types.Prompt(name="test_simple_prompt", description="A prompt without arguments."),
    types.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with two required arguments.",
        arguments=[
            types.PromptArgument(name="arg1", description="First argument", required=True),
            types.PromptArgument(name="arg2", description="Second argument", required=True),
        ],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt that embeds a resource.",
        arguments=[types.PromptArgument(name="resourceUri", required=True)],
    ),
    types.Prompt(name="test_prompt_with_image", description="A prompt with an image."),
    types.Prompt(
        name="test_input_required_result_prompt", description="Asks for context before it answers."
    ),
]


async def list_prompts(ctx: ServerRequestContext, params: Any) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=PROMPTS)


async def get_prompt(
    ctx: ServerRequestContext, params: types.GetPromptRequestParams
) -> types.GetPromptResult | types.InputRequiredResult:
    args = params.arguments or {}

    def user(content: Any) -> types.PromptMessage:
        return types.PromptMessage(role="user", content=content)

    if params.name == "test_simple_prompt":
        messages = [user(text("This is a simple prompt for testing."))]
    elif params.name == "test_prompt_with_arguments":
        shown = f"Prompt with arguments: arg1='{args.get('arg1')}', arg2='{args.get('arg2')}'"
        messages = [user(text(shown))]
    elif params.name == "test_prompt_with_embedded_resource":
        uri = args.get("resourceUri", "test://example-resource")
        messages = [
            user(embedded(uri, "Embedded resource content for testing.")),
            user(text("Please process the embedded resource above.")),
        ]
    elif params.name == "test_prompt_with_image":
        messages = [user(image()), user(text("Please analyze the image above."))]
    elif params.name == "test_input_required_result_prompt":
        got = await inputs(ctx, params, {"user_context": _form("What context?", "context")})
        if isinstance(got, types.InputRequiredResult):
            return got
        messages = [user(text(f"Prompt with context: {said(got['user_context'], 'context')}"))]
    else:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")
    return types.GetPromptResult(messages=messages)


async def complete(
    ctx: ServerRequestContext, params: types.CompleteRequestParams
) -> types.CompleteResult:
    return types.CompleteResult(completion=types.Completion(values=[], total=0, has_more=False))


async def set_level(
    ctx: ServerRequestContext, params: types.SetLevelRequestParams
) -> types.EmptyResult:
    return types.EmptyResult()


server: Server[Any] = Server(
    "mcp-conformance-test-server",
    version="1.0.0",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_list_resource_templates=list_templates,
    on_read_resource=read_resource,
    on_subscribe_resource=subscribe,
    on_unsubscribe_resource=subscribe,
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
    on_completion=complete,
    on_set_logging_level=set_level,
    # 2026-07-28 clients watch resources on a listen stream instead of resources/subscribe.
    on_subscriptions_listen=ListenHandler(BUS),
)


async def main() -> None:
    changes = NotificationOptions(resources_changed=True, tools_changed=True, prompts_changed=True)
    options = server.create_initialization_options(changes)
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
