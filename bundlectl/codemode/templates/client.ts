/**
 * callTool: every generated function's way to a tool. Through the bundlectl gateway when
 * BUNDLECTL_GATEWAY_URL is set (streamable HTTP, BUNDLECTL_GATEWAY_TOKEN as the bearer token),
 * else through `bundlectl exec` (the same policy, validation and audit as any call).
 */
import { execFileSync } from "node:child_process";

/** The agent this code was generated for: every call is made as this agent. */
export const AGENT: string = "__AGENT__";

export class ToolDenied extends Error {}
export class ToolFailed extends Error {}

interface ToolResult {
  content?: Array<{ type: string; text?: string }>;
  structuredContent?: unknown;
  isError?: boolean;
}

function value(name: string, result: ToolResult): unknown {
  const blocks = result.content ?? [];
  const text = blocks.map((b) => b.text ?? "").join("\n");
  if (result.isError) throw new ToolFailed(`${name}: ${text || "the tool reported an error"}`);
  if (result.structuredContent !== undefined) return result.structuredContent;
  return blocks.every((b) => b.type === "text") ? text : blocks;
}

function viaExec(name: string, args: object): unknown {
  const command = process.env.BUNDLECTL ?? "bundlectl";
  const argv = ["exec", "--agent", AGENT, name, "--args", JSON.stringify(args), "--format", "json"];
  try {
    const out = execFileSync(command, argv, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    return value(name, (JSON.parse(out) as { result: ToolResult }).result);
  } catch (error) {
    if (error instanceof ToolFailed) throw error;
    const failed = error as { status?: number; stderr?: string; stdout?: string };
    if (failed.status === 1 && failed.stdout) {
      return value(name, (JSON.parse(failed.stdout) as { result: ToolResult }).result);
    }
    const message = (failed.stderr ?? "").trim() || String(error);
    if (failed.status === 3) throw new ToolDenied(message);
    throw new ToolFailed(message);
  }
}

interface Reply {
  id?: number;
  result?: ToolResult;
  error?: { message: string };
}

async function post(url: string, body: object, session?: string): Promise<[Reply | undefined, string | undefined]> {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
  };
  const token = process.env.BUNDLECTL_GATEWAY_TOKEN;
  if (token) headers.authorization = `Bearer ${token}`;
  if (session) headers["mcp-session-id"] = session;
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  if (response.status === 401) throw new ToolDenied("the gateway did not accept the token (401)");
  const text = await response.text();
  const next = response.headers.get("mcp-session-id") ?? session;
  if (!text.trim()) return [undefined, next];
  const kind = response.headers.get("content-type") ?? "";
  const messages: Reply[] = kind.includes("text/event-stream")
    ? text.split("\n").filter((l) => l.startsWith("data:")).map((l) => JSON.parse(l.slice(5)) as Reply)
    : [JSON.parse(text) as Reply];
  return [messages.find((m) => m.id !== undefined), next];
}

async function viaGateway(url: string, name: string, args: object, wire: string): Promise<unknown> {
  const hello = { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "bundlectl-codegen", version: "1" } };
  const [, session] = await post(url, { jsonrpc: "2.0", id: 1, method: "initialize", params: hello });
  await post(url, { jsonrpc: "2.0", method: "notifications/initialized" }, session);
  const [reply] = await post(url, { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: wire, arguments: args } }, session);
  if (session) {
    const headers: Record<string, string> = { "mcp-session-id": session };
    const token = process.env.BUNDLECTL_GATEWAY_TOKEN;
    if (token) headers.authorization = `Bearer ${token}`;
    await fetch(url, { method: "DELETE", headers });
  }
  if (reply?.error) throw new ToolFailed(`${name}: ${reply.error.message}`);
  const result = reply?.result ?? {};
  const text = (result.content ?? []).map((b) => b.text ?? "").join(" ");
  if (result.isError && text.startsWith("unknown tool")) throw new ToolDenied(`${name}: ${text}`);
  return value(name, result);
}

export async function callTool(name: string, args: object, wire: string): Promise<unknown> {
  const chosen = process.env.BUNDLECTL_AGENT;
  if (chosen && chosen !== AGENT) {
    throw new ToolDenied(
      `this code was generated for agent '${AGENT}', but BUNDLECTL_AGENT names '${chosen}' ` +
        `(generate it for that agent: bundlectl codegen --agent ${chosen}, or unset BUNDLECTL_AGENT)`,
    );
  }
  const url = process.env.BUNDLECTL_GATEWAY_URL;
  return url ? viaGateway(url, name, args, wire) : viaExec(name, args);
}
