// What is left to keep the process alive once the tools are closed: a foreground call, a
// background task and a call whose output outlives its leader were made first. Prints the
// kinds of the active resources (Node's own list) as JSON for tests/bindings_node.rs.

import { Tools } from "dsh-tools";

const tools = new Tools();
const session = tools.session();
await session.call("bash", { command: "echo hi", description: "Say hi" });
await session.call("bash", { command: "echo bg", description: "Background", run_in_background: true });
await session.call("bash", { command: "sleep 0.2 & echo leader-done", description: "Leftover" });
await session.close();
await tools.close();
// One turn of the event loop, so that whatever the close settled is gone.
await new Promise((resolve) => setImmediate(resolve));
process.stdout.write(JSON.stringify(process.getActiveResourcesInfo()) + "\n");
