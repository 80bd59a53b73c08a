// Sessions, the executor's settings and its environment scrub through the installed package.
// Prints JSON facts for tests/bindings_node.rs to compare; throws on anything unexpected.

import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { LocalExecutor, Tools } from "dsh-tools";

const errorOf = (f) => {
  try {
    f();
    return null;
  } catch (e) {
    return `${e.name}: ${e.message}`;
  }
};
const rejectionOf = async (p) => p.then(() => null, (e) => `${e.name}: ${e.message}`);

const executor = new LocalExecutor({ graceMs: 200, maxOutputBytes: 100, envDeny: ["DSH_TEST_*"], envAllow: ["DSH_TEST_API_KEY_ALLOWED"] });
const tools = new Tools({ executor });
const dir = realpathSync(mkdtempSync(join(tmpdir(), "dsh-sessions-")));
const a = tools.session({ cwd: dir });
const b = tools.session();
const bash = (session, command, extra = {}) => session.call("bash", { command, description: "Test a session", ...extra });

const facts = {};
facts.cwd = (await bash(a, "pwd")).text === `${dir}\n`;
facts.relativeWorkdir = (await bash(a, "pwd", { workdir: "." })).text === `${dir}\n`;
facts.env = (await bash(a, "echo \"${API_KEY-unset} ${DSH_TEST_X-unset} ${DSH_TEST_API_KEY_ALLOWED-unset} $TERM\"")).text;
// The event loop runs during a foreground command: this one waits for a file a timer creates.
setTimeout(() => writeFileSync(`${dir}/go`, ""), 50);
facts.eventLoopRuns = (await bash(a, `while [ ! -e ${dir}/go ]; do sleep 0.01; done; echo went`, { timeoutMs: 60_000 })).text;
const abort = new AbortController();
setTimeout(() => abort.abort(), 50);
facts.aborted = (await a.call("bash", { command: "sleep 60", description: "Wait to be aborted" }, { signal: abort.signal })).text;
facts.tail = (await bash(a, "printf '%0200d' 0; printf END")).text.split("\n")[0].endsWith("0END");

// Each session has its own tasks; closing one stops its tasks only.
const started = await bash(a, `echo $$ > ${dir}/pid; exec sleep 30`, { run_in_background: true });
const other = await bash(b, "sleep 30", { run_in_background: true });
facts.started = [started.text, other.text];
facts.othersTask = (await b.call("bash_output", { task_id: "bash-1" })).isError;
while (!existsSync(`${dir}/pid`)) await new Promise((resolve) => setTimeout(resolve, 10));
const pid = Number(readFileSync(`${dir}/pid`, "utf8"));
await a.close();
facts.afterClose = [executor.get("bash-1").state, executor.get("bash-2").state];
facts.processGone = errorOf(() => process.kill(pid, 0))?.includes("ESRCH") ?? false;
facts.callAfterClose = await rejectionOf(bash(a, "true"));
await tools.close();
facts.afterToolsClose = executor.get("bash-2").state;

facts.badSettings = [
  errorOf(() => new LocalExecutor({ graceMs: -1 })),
  errorOf(() => new LocalExecutor({ maxTasks: 1.5 })),
  errorOf(() => new LocalExecutor({ timeoutMs: 5 })),
  errorOf(() => new LocalExecutor({ envDeny: ["A=B"] })),
  errorOf(() => new Tools({ executor: {} })),
  errorOf(() => new Tools({ exeuctor: executor })),
  errorOf(() => tools.session({ cwd: 3 })),
  errorOf(() => new Tools().session({ cwd: "relative" })),
  errorOf(() => tools.session()),
];
facts.badName = await rejectionOf(tools.call(7, {}));
facts.otherTools = await rejectionOf(new Tools().call("bash", {}, b));

// Without a sandbox the executor names none and the component says nothing of one.
facts.noSandbox = [new LocalExecutor().currentLimits().sandbox === undefined, new Tools().instructions().includes("sandbox")];
// An executor's sandbox facts, through the package's linking, as the component renders them.
const denials = {
  first: [
    { access: "read", target: "/root/.ssh/id", reason: "denied-read" },
    { access: "connect", target: "203.0.113.7:443", reason: "loopback-only" },
  ],
  more: 2,
};
class Sandboxed extends LocalExecutor {
  currentLimits() {
    const sandbox = { mode: "read-only", writable: [], deniedReads: ["/root/.ssh", "/root/.aws"], network: "loopback" };
    return { ...super.currentLimits(), sandbox };
  }
  async run(spec, options) {
    return { ...(await super.run(spec, options)), denials };
  }
  readOutput(id) {
    return { ...super.readOutput(id), denials };
  }
}
const sandboxed = new Tools({ executor: new Sandboxed({ graceMs: 200 }) });
facts.sandboxInstructions = sandboxed.instructions().split("\n\n").at(-1).split("\n").slice(0, 3);
facts.sandboxRun = (await sandboxed.call("bash", { command: "echo hi", description: "Greet" })).text;
await sandboxed.call("bash", { command: "true", description: "Nothing", run_in_background: true });
while (sandboxed.executor.get("bash-1").state === "running") await new Promise((resolve) => setTimeout(resolve, 10));
facts.sandboxRead = (await sandboxed.call("bash_output", { task_id: "bash-1" })).text;
await sandboxed.close();

process.stdout.write(JSON.stringify(facts) + "\n");
rmSync(dir, { recursive: true, force: true });
