// The Vercel AI SDK adapter, offline: the SDK's own tool objects' `execute`, no model, no network.
// Prints JSON {names, call, badArgument, unknownTask} for tests/bindings_node.rs to compare.

import { Tools } from "dsh-tools";
import { aiTools } from "dsh-tools/ai";

const tools = new Tools();
const session = tools.session();
const set = aiTools(tools, session);
const options = { toolCallId: "call-1", messages: [] };
const report = {
  names: Object.keys(set),
  schemaIsTheComponents: JSON.stringify(await set.bash.inputSchema.jsonSchema) === JSON.stringify(tools.definitions("mcp")[0].inputSchema),
  call: await set.bash.execute({ command: "printf 'ran in %s\\n' \"$0\"", description: "Name the shell" }, options),
  badArgument: await set.bash.execute({ command: 42 }, options),
  unknownTask: await set.bash_output.execute({ task_id: "bash-9" }, options),
};
await tools.close();
process.stdout.write(JSON.stringify(report) + "\n");
