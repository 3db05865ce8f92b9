// Drives `agent-sandbox mcp` with the official TypeScript MCP SDK's client: list the tools, then call
// k8s_get_pod_status, then every call in $E2E_CALLS (a JSON list of {name, arguments}). Having listed the
// tools, the SDK checks each structured result against the tool's outputSchema (Ajv) and throws when one
// does not match: such a call is reported with its error. Prints one JSON object on stdout for the Go
// end-to-end test to check.
//   node client.mjs <agent-sandbox binary> <mcp args...>      (stdio: starts the server)
//   node client.mjs --http <endpoint URL>                     (streamable HTTP; bearer token in $E2E_HTTP_TOKEN)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [command, ...args] = process.argv.slice(2);
const transport = command === "--http"
  ? new StreamableHTTPClientTransport(new URL(args[0]), { requestInit: { headers: { Authorization: `Bearer ${process.env.E2E_HTTP_TOKEN}` } } })
  : new StdioClientTransport({ command, args: ["mcp", ...args], stderr: "ignore" });
const client = new Client({ name: "typescript-sdk-e2e", version: "1.0.0" });
await client.connect(transport);
const { tools } = await client.listTools();
const progress = [];
const result = await client.callTool(
  { name: "k8s_get_pod_status", arguments: { namespace: "demo-app" } },
  undefined,
  { onprogress: (p) => progress.push(p.message), timeout: 120000 },
);
const calls = [];
for (const call of JSON.parse(process.env.E2E_CALLS ?? "[]")) {
  try {
    const r = await client.callTool({ name: call.name, arguments: call.arguments }, undefined, { timeout: 180000 });
    const text = (r.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
    calls.push({ name: call.name, isError: r.isError ?? false, structured: r.structuredContent !== undefined, text: r.isError ? text : "" });
  } catch (e) {
    calls.push({ name: call.name, isError: true, error: String(e) });
  }
}
console.log(JSON.stringify({
  calls,
  server: client.getServerVersion(),
  protocolVersion: transport.protocolVersion,
  tools: tools.map((t) => t.name),
  isError: result.isError ?? false,
  structured: result.structuredContent,
  progress,
}));
await client.close();
