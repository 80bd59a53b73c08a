// Runs a foreground command longer than the client's request timeout through `dsh-host mcp`,
// with the official TypeScript SDK's client: with `resetTimeoutOnProgress` the server's progress
// reports keep the request alive and the full result arrives; without it the same call times out.
// Usage: node progress.mjs <dsh-host binary> [dsh-host flags...]; prints one JSON line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [bin, ...flags] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: bin,
  args: ["mcp", ...flags],
  env: process.env,
  stderr: "inherit",
});
const client = new Client({ name: "dsh-host-tests", version: "0" });
await client.connect(transport);

const call = (options) =>
  client.callTool(
    {
      name: "bash",
      arguments: { command: "sleep 2; echo done", description: "Outlast the request timeout" },
    },
    undefined,
    options,
  );

const reports = [];
const kept = await call({
  timeout: 1000,
  resetTimeoutOnProgress: true,
  onprogress: (p) => reports.push(p),
});

let withoutReset;
try {
  await call({ timeout: 1000, onprogress: () => {} });
  withoutReset = "completed";
} catch (e) {
  withoutReset = String(e.message ?? e);
}

console.log(JSON.stringify({ text: kept.content.map((c) => c.text), isError: kept.isError ?? false, reports, withoutReset }));
await client.close();
