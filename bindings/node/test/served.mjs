// The package against `dsh-host executor serve --stdio` (a ServedExecutor), as a newcomer tries
// it: an escaping process, `kill $PPID`, a 200 KB command, a 100 KB output; then a background
// task whose far side is killed with SIGKILL (it is lost), and a far side speaking another
// protocol version.
// Prints JSON for tests/bindings_node.rs, which compares the texts with `dsh-host call`'s.
//
// Usage: node served.mjs DSH_HOST SCRATCH_DIR

import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

import { ServedExecutor, Tools } from "dsh-tools";

const [dshHost, scratch] = process.argv.slice(2);
const report = {};

const executor = await ServedExecutor.start({ dshHost });
report.kind = executor.kind;
report.server = executor.welcome.server;
const tools = new Tools({ executor });
const session = tools.session();
const call = async (args) => (await session.call("bash", { description: "Try", ...args })).text;

const pidFile = join(scratch, "escapee.pid");
report.escapee = await call({ command: `setsid sleep 300 & echo $! > ${pidFile}; echo started` });
const pid = Number(readFileSync(pidFile, "utf8").trim());
report.escapeePid = pid;
report.escapeeAlive = existsSync(`/proc/${pid}`) && !readFileSync(`/proc/${pid}/stat`, "utf8").includes(") Z ");
report.killParent = await call({ command: "kill -TERM $PPID; echo survived" });
report.longCommand = await call({ command: `: '${"x".repeat(200_000)}'; echo long-ok` });
report.bigOutput = await call({ command: "head -c 100000 /dev/zero | tr '\\0' a" });
const spill = /full output: (\S+)\]/.exec(report.bigOutput)?.[1];
report.spillBytes = spill && existsSync(spill) ? statSync(spill).size : null;
report.spillPath = spill ?? null;

// A background task, then the far side killed: the task ends once, as lost, and the tools say
// what that means (a notice, bash_output, bash_kill); a task that ended before the loss cannot
// be read either.
const ended = [];
const events = await ServedExecutor.start({ dshHost });
const lostTools = new Tools({ executor: events });
const toolsTaskDone = events.onTaskDone;
events.onTaskDone = (task) => {
  ended.push(task);
  toolsTaskDone(task);
};
const lostSession = lostTools.session();
const lostCall = async (name, args) => {
  const r = await lostSession.call(name, args);
  return [r.text, r.isError];
};
report.backgroundStarted = await lostCall("bash", { description: "Try", command: "sleep 30", run_in_background: true });
report.finishedStarted = await lostCall("bash", { description: "Try", command: "true", run_in_background: true });
for (let i = 0; i < 100 && ended.length < 1; i++) await new Promise((resolve) => setTimeout(resolve, 50));
const farSide = events.childPid;
process.kill(farSide, "SIGKILL");
await new Promise((resolve) => setTimeout(resolve, 500));
report.endedAfterKill = ended.map((t) => [t.id, t.state]);
report.noticesAfterKill = lostSession.takeNotices().map((n) => n.text);
report.outputAfterKill = await lostCall("bash_output", { task_id: "bash-1" });
report.killAfterKill = await lostCall("bash_kill", { task_id: "bash-1" });
report.finishedOutputAfterKill = await lostCall("bash_output", { task_id: "bash-2" });
report.finishedKillAfterKill = await lostCall("bash_kill", { task_id: "bash-2" });
report.readAfterKill = await events.readOutput("bash-1").then(
  (read) => ({ stdout: read.stdout.text, stderr: read.stderr.text, state: read.task.state }),
  (e) => `${e.tag}: ${e.message}`,
);
report.finishedReadAfterKill = await events.readOutput("bash-2").then(
  () => "answered",
  (e) => `${e.tag}: ${e.message}`,
);
await lostSession.close();
await lostTools.close();

// Tasks that end at once: a task-done event may come before its start's answer, and such a
// task must not be taken for a running one (stopping the owner's tasks would wait for it).
const quick = await ServedExecutor.start({ dshHost });
for (let i = 0; i < 200; i++) await quick.start(await quick.resolve({ command: "true", owner: undefined }));
// Every end has arrived by then.
await new Promise((resolve) => setTimeout(resolve, 1000));
let timer;
report.quickStartsSettled = await Promise.race([
  quick.stopOwned(undefined).then(() => true),
  new Promise((resolve) => {
    timer = setTimeout(() => resolve(false), 10_000);
  }),
]);
clearTimeout(timer);
await quick.close();

// A far side that speaks another version: refused, naming both.
const reply = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  error: { code: -32001, message: "protocol version mismatch: the client speaks version 1, this server (stand-in) speaks version 9" },
});
report.mismatch = await ServedExecutor.start({ command: ["sh", "-c", `read line; echo '${reply}'; read rest`] }).then(
  () => "accepted",
  (e) => e.message,
);

await session.close();
await tools.close();
process.stdout.write(JSON.stringify(report) + "\n");
