// A program that uses the served executor by default (DSH_HOST set) and never calls close(),
// after tools that failed to be made: it must still exit on its own, leaving no far side behind.
// Prints the far sides' pids for tests/bindings_node.rs to check.

import { Tools } from "dsh-tools";

const pids = [];
try {
  new Tools({ policy: [{ name: "p.toml", text: "[permissions]\n" }] });
} catch {
  // The bundled component has no permission rules: refused, and its executor must not linger.
}
const tools = new Tools();
pids.push(tools.executor.childPid);
const session = tools.session();
const text = (await session.call("bash", { command: "echo forgotten", description: "Say it" })).text;
await session.call("bash", { command: "sleep 0.2", description: "Wait", run_in_background: true });
process.stdout.write(JSON.stringify({ kind: tools.doctor().kind, text, pids }) + "\n");
// No close(): the event loop ends once the background task did.
