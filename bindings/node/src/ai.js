// The tools for the Vercel AI SDK: one `tool()` per component tool, its JSON Schema handed over
// as is with `jsonSchema()` (no validation in the SDK: the component validates, so a bad
// argument gets the component's own error text), and `execute` running the call in a session.
//
// What the model sees is what `dsh-host mcp` gives an MCP client for the same call:
// - a result the component marks as an error is thrown as a `ToolCallError` whose message is the
//   text, which the SDK hands the model as an error (`error-text`) with exactly that text;
// - completion notices of the session's background tasks ride on its next result that is not an
//   error, each as one more text part after the result's own text (as dsh-host adds them as more
//   content blocks), every notice once, oldest first. An error's single text has no room for them:
//   they wait for the next result.

import { jsonSchema, tool } from "ai";

import { Session, Tools } from "./tools.js";

/** A tool call the component answered as an error; `message` is the text the model sees. */
export class ToolCallError extends Error {
  constructor(text) {
    super(text);
    this.name = "ToolCallError";
  }
}

/** The parts the model reads for one output: the text, then one part per notice. */
function modelOutput({ output }) {
  if (output.notices.length === 0) return { type: "text", value: output.text };
  return { type: "content", value: [output.text, ...output.notices].map((text) => ({ type: "text", text })) };
}

/**
 * A ToolSet for `generateText`/`streamText` ({bash, bash_output, bash_kill}) whose calls run in
 * `session`. Each `execute` resolves to `{text, notices}` (the result's text and the completion
 * notices it carries to the model) or throws a `ToolCallError`; the SDK's abort signal aborts a
 * foreground command.
 */
export function aiTools(tools, session) {
  if (!(tools instanceof Tools)) throw new TypeError("aiTools: expected a Tools as the first argument");
  if (!(session instanceof Session)) throw new TypeError("aiTools: expected a Session from tools.session() as the second argument");
  const set = {};
  for (const def of tools.definitions("mcp")) {
    set[def.name] = tool({
      title: def.title,
      description: def.description,
      inputSchema: jsonSchema(def.inputSchema),
      execute: async (input, options) => {
        const result = await session.call(def.name, input, { signal: options?.abortSignal });
        if (result.isError) throw new ToolCallError(result.text);
        return { text: result.text, notices: session.takeNotices().map((notice) => notice.text) };
      },
      toModelOutput: modelOutput,
    });
  }
  return set;
}
