// Type-checked (tsc --noEmit, strict) against the package's declarations by tests/bindings_node.rs.
import { LocalExecutor, Tools, type ApprovalQuestion, type Notice, type ToolResult, type ToolsOptions } from "dsh-tools";
import { aiTools } from "dsh-tools/ai";

const tools = new Tools({ executor: new LocalExecutor({ graceMs: 500, envDeny: ["*_PAT"] }) });
const seen: Notice[] = [];
const session = tools.session({ cwd: "/tmp", onNotice: (n) => seen.push(n) });
const result: ToolResult = await session.call("bash", { command: "true", description: "Do nothing" }, { signal: AbortSignal.timeout(60_000) });
const code: string | null = result.errorCode;
const names: string[] = tools.definitions("openai").map((d) => d.function.name);
const schema: object = tools.definitions("anthropic")[0].input_schema;
const instructions: string | undefined = tools.instructions();
const set = aiTools(tools, session);
const output = await set.bash.execute?.({ command: "true" }, { toolCallId: "1", messages: [] });
const text: string | undefined = output && "text" in output ? output.text : undefined;
await session.close();
await tools.close();
// Permission options need a composed component, so these are only type-checked here.
const permissions: ToolsOptions = {
  policy: ["permissions.toml", { name: "inline.toml", text: "[permissions]\n" }],
  approve: async (q: ApprovalQuestion) => (q.sessionRule !== null ? "session" : "once"),
  approveTimeoutMs: 30_000,
};
const granted: string[] = session.grants();
console.log(code, names, schema, instructions, text, seen.length, permissions, granted);
