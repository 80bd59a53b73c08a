// Run the bash tools component from Node: node example.mjs guest_tools.wasm
import { LocalExecutor, loadToolHost } from "./dsh-host.mjs";

const host = await loadToolHost(process.argv[2], new LocalExecutor({ graceMs: 500 }));
const session = host.openSession("/tmp");

const result = session.call("bash", { command: "echo hello from bash", description: "Say hello from bash" });
process.stdout.write(result.text); // result.isError is false

const started = session.call("bash", {
  command: "sleep 0.2; echo done",
  description: "Finish in the background",
  run_in_background: true,
});
console.log(started.text); // started background task bash-1

let notices = [];
while (notices.length === 0) {
  // when the task ends, the component injects a notice into the session
  await new Promise((resolve) => setTimeout(resolve, 50));
  notices = session.takeNotices();
}
console.log(notices[0].text);

console.log(session.call("bash_output", { task_id: "bash-1" }).text);
await host.shutdown();
