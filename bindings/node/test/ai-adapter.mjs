// The Vercel AI SDK adapter through the SDK's own loop, offline: `generateText` with the SDK's
// mock model, which asks for tool calls step by step; what the SDK then puts in front of the
// model (the prompt of the step after each call) is recorded. No network.
// Prints JSON for tests/bindings_node.rs to compare.

import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { Tools } from "dsh-tools";
import { aiTools } from "dsh-tools/ai";

const tools = new Tools();
const session = tools.session();
const set = aiTools(tools, session);

// The calls the model makes, one step each.
const steps = [
  ["bash", { command: "printf 'ran in %s\\n' \"$0\"", description: "Name the shell" }],
  ["bash", { command: 42 }],
  ["bash_output", { task_id: "bash-9" }],
  ["bash", { command: "echo done-in-background", description: "Background", run_in_background: true }],
  // The task ends meanwhile: its notice rides on the next result.
  ["bash", { command: "sleep 0.5; echo later", description: "Wait" }],
  ["bash", { command: "echo plain", description: "Plain" }],
];
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};
const prompts = [];
const model = new MockLanguageModelV3({
  doGenerate: async ({ prompt }) => {
    prompts.push(prompt);
    const step = steps[prompts.length - 1];
    if (step === undefined) {
      return { content: [{ type: "text", text: "finished" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
    }
    const [toolName, input] = step;
    return {
      content: [{ type: "tool-call", toolCallId: `call-${prompts.length}`, toolName, input: JSON.stringify(input) }],
      finishReason: { unified: "tool-calls", raw: "tool_calls" },
      usage,
      warnings: [],
    };
  },
});
const result = await generateText({ model, tools: set, prompt: "Use the tools", stopWhen: stepCountIs(steps.length + 1) });

// The tool result each step put in front of the model: the last message of the next prompt.
const seen = prompts.slice(1).map((prompt) => {
  const part = prompt.at(-1).content.find((p) => p.type === "tool-result");
  return part.output;
});
const report = {
  names: Object.keys(set),
  schemaIsTheComponents: JSON.stringify(await set.bash.inputSchema.jsonSchema) === JSON.stringify(tools.definitions("mcp")[0].inputSchema),
  finalText: result.text,
  seen,
};
await session.close();
await tools.close();
process.stdout.write(JSON.stringify(report) + "\n");
