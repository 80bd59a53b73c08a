// The tools for the Vercel AI SDK: one `tool()` per component tool, its JSON Schema handed over
// as is with `jsonSchema()` (no validation in the SDK: the component validates, so a bad
// argument gets the component's own error text), and `execute` running the call in a session.

import { jsonSchema, tool } from "ai";

import { Session, Tools } from "./tools.js";

/**
 * A ToolSet for `generateText`/`streamText` ({bash, bash_output, bash_kill}) whose calls run in
 * `session`. Each `execute` resolves to the text the model should see, error or not; the SDK's
 * abort signal aborts a foreground command.
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
      execute: async (input, options) => (await session.call(def.name, input, { signal: options?.abortSignal })).text,
    });
  }
  return set;
}
