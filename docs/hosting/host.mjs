// The worked Node host of docs/hosting.md: the tools component run through jco's transpile output.
//
//   npm ci --prefix docs/hosting
//   node docs/hosting/host.mjs target/guest-wasm/guest_tools.wasm
//
// It supplies the component's two imports, `dsh:bash/bash-executor` (a tiny executor on
// child_process) and `dsh:bash/agent` (notices collected per session), calls the `tools` exports,
// and prints each step with the imports the component called during it. tests/hosting.rs runs it
// and checks every line.
//
// The executor keeps the contract's shape but not all of its mechanics: output goes to files (so
// a full pipe never blocks the command), the process group is the tree, there are no limits on
// tasks, and a foreground command that times out gets SIGTERM only (jco calls imports
// synchronously, and spawnSync can neither start a new session nor escalate to SIGKILL; a
// production host runs the command under a small supervising process instead).

import { spawn, spawnSync } from "node:child_process";
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";

import { transpile } from "@bytecodealliance/jco";

// u64 fields are BigInts; f64 and s32 fields are numbers. No sandbox: `sandbox` is undefined.
const LIMITS = { defaultTimeoutMs: 120000, maxTimeoutMs: 600000, maxOutputBytes: 64000n, graceMs: 3000, sandbox: undefined };

/** What this executor reports of denials: none, as it has no sandbox. */
const noDenials = () => ({ first: [], more: 0 });

/** One case of `executor-error`. jco turns a thrown value's `payload` into the `err` case. */
class ExecutorError extends Error {
  constructor(tag, message) {
    super(message);
    this.payload = { tag, val: message };
  }
}

function childEnv() {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !["KEY", "SECRET", "TOKEN", "PASSWORD"].some((w) => k.toUpperCase().includes(w))),
  );
  return { ...env, NO_COLOR: "1", TERM: "dumb", PAGER: "cat", GIT_PAGER: "cat", GIT_TERMINAL_PROMPT: "0" };
}

/** [exit code, signal name] of a finished process: jco's `option` is undefined when absent. */
function endOf(status, signal) {
  return signal ? [undefined, signal] : [status, undefined];
}

class Executor {
  constructor(trace) {
    this.trace = trace;
    this.dir = mkdtempSync(join(tmpdir(), "dsh-hosting-"));
    this.tasks = []; // {task, child, files, read, ended}
    this.filesMade = 0;
    this.onEnd = () => {};
  }

  /** Two output files, and the check that the workdir is a directory. */
  prepare(command, workdir) {
    let isDir = false;
    try {
      isDir = statSync(workdir).isDirectory();
    } catch {}
    if (!isDir) throw new ExecutorError("workdir-unusable", `workdir ${JSON.stringify(workdir)} is not usable: no such directory`);
    this.filesMade += 1;
    const files = ["stdout", "stderr"].map((s) => join(this.dir, `${this.filesMade}-${s}.log`));
    return { files, fds: files.map((f) => openSync(f, "w")) };
  }

  find(id) {
    const entry = this.tasks.find((t) => t.task.id === id);
    // unknown-task carries the id; the component words the message.
    if (!entry) throw new ExecutorError("unknown-task", id);
    return entry;
  }

  tail(path) {
    const data = readFileSync(path);
    const keep = Number(LIMITS.maxOutputBytes);
    const truncated = data.length > keep;
    // The file holds the complete stream.
    return { text: data.subarray(Math.max(0, data.length - keep)).toString("utf8"), truncated, spillPath: truncated ? path : undefined, spillEvicted: false };
  }

  // The nine `bash-executor` functions, camelCased. The component calls only some of them, but
  // it imports all nine, so all must be there for it to instantiate.
  functions() {
    const trace = (name, fn) => (...args) => {
      this.trace.push(name);
      return fn(...args);
    };
    return {
      currentLimits: trace("current-limits", () => LIMITS),
      resolve: trace("resolve", (req) => {
        const requested = req.timeoutMs ?? LIMITS.defaultTimeoutMs;
        if (!(Number.isFinite(requested) && requested > 0)) {
          throw new ExecutorError("invalid-request", `invalid timeoutMs: expected a positive number, got ${requested}`);
        }
        const workdir = req.workdir ?? process.cwd();
        return { command: req.command, workdir, timeoutMs: Math.min(requested, LIMITS.maxTimeoutMs), owner: req.owner };
      }),
      run: trace("run", (spec) => {
        const { files, fds } = this.prepare(spec.command, spec.workdir);
        const r = spawnSync("bash", ["-c", spec.command], {
          cwd: spec.workdir,
          env: childEnv(),
          stdio: ["ignore", fds[0], fds[1]],
          timeout: spec.timeoutMs,
          killSignal: "SIGTERM",
        });
        fds.forEach(closeSync);
        if (r.error && r.error.code !== "ETIMEDOUT") throw new ExecutorError("spawn-failed", `cannot start bash: ${r.error.message}`);
        const [exitCode, signal] = endOf(r.status, r.signal);
        return {
          exitCode,
          signal,
          timedOut: r.error?.code === "ETIMEDOUT",
          aborted: false,
          timeoutMs: spec.timeoutMs,
          stdout: this.tail(files[0]),
          stderr: this.tail(files[1]),
          leftoverProcesses: 0,
          yielded: undefined,
          denials: noDenials(),
        };
      }),
      start: trace("start", (spec) => {
        const { files, fds } = this.prepare(spec.command, spec.workdir);
        // detached: a new session, so the task is its own process group.
        const child = spawn("bash", ["-c", spec.command], { cwd: spec.workdir, env: childEnv(), stdio: ["ignore", fds[0], fds[1]], detached: true });
        fds.forEach(closeSync);
        const task = { id: `bash-${this.tasks.length + 1}`, command: spec.command, owner: spec.owner, state: "running", exitCode: undefined, signal: undefined };
        const entry = { task, child, files, read: [0, 0] };
        child.on("exit", (status, signal) => {
          [task.exitCode, task.signal] = endOf(status, signal);
          if (task.state === "running") task.state = signal ? "killed" : "completed";
          this.onEnd({ ...task });
        });
        this.tasks.push(entry);
        return { ...task };
      }),
      readOutput: trace("read-output", (id) => {
        const entry = this.find(id);
        const [stdout, stderr] = [0, 1].map((i) => {
          const data = readFileSync(entry.files[i]);
          const delta = data.subarray(entry.read[i]);
          entry.read[i] = data.length;
          return { text: delta.toString("utf8"), lossy: false, spillPath: undefined, spillEvicted: false };
        });
        return { stdout, stderr, task: { ...entry.task }, denials: noDenials() };
      }),
      kill: trace("kill", (id) => {
        const entry = this.find(id);
        if (entry.task.state !== "running") return false;
        entry.task.state = "killed";
        process.kill(-entry.child.pid, "SIGTERM");
        return true;
      }),
      ownerOf: trace("owner-of", (id) => this.tasks.find((t) => t.task.id === id)?.task.owner),
      get: trace("get", (id) => ({ ...this.find(id).task })),
      listTasks: trace("list-tasks", () => this.tasks.map((t) => ({ ...t.task }))),
    };
  }
}

/** The component transpiled by jco into `dir`, loaded as a synchronous `instantiate`. */
async function load(wasmPath, dir) {
  const { files } = await transpile(readFileSync(wasmPath), { name: "tools", instantiation: "sync", noTypescript: true, quiet: true });
  for (const [name, data] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, name)), { recursive: true });
    writeFileSync(join(dir, name), data);
  }
  // The generated .js files are ES modules. Outside a `"type": "module"` package Node takes a .js
  // file for CommonJS (recent versions then detect the ES syntax and reload it; older ones fail).
  writeFileSync(join(dir, "package.json"), JSON.stringify({ type: "module" }));
  const { instantiate } = await import(pathToFileURL(join(dir, "tools.js")).href);
  const getCoreModule = (name) => new WebAssembly.Module(readFileSync(join(dir, name)));
  return (imports) => instantiate(getCoreModule, imports);
}

async function main() {
  const trace = [];
  const sessions = new Set();
  const notices = [];
  const executor = new Executor(trace);
  const agent = {
    inject(owner, text, source) {
      trace.push("inject");
      if (source.kind !== "plugin" || source.plugin !== "tool-bash") throw new Error("unexpected source");
      // unknown-owner: the session is gone, the component drops the notice.
      if (!sessions.has(owner)) throw { payload: { tag: "unknown-owner" } };
      notices.push([owner, text]);
    },
  };
  // The generated code looks the imports up by these unversioned names, although its .d.ts
  // names them `dsh:bash/bash-executor@0.9.0` and `dsh:bash/agent@0.9.0`. Nothing else is
  // imported: the component needs no WASI shim.
  const imports = { "dsh:bash/bash-executor": executor.functions(), "dsh:bash/agent": agent };
  const instantiate = await load(process.argv[2] ?? "target/guest-wasm/guest_tools.wasm", executor.dir + "-jco");
  // A fresh instance per export call: one whose call trapped is never reused.
  const tools = () => instantiate(imports).tools;
  const importsCalled = () => `[${trace.splice(0).join(" ")}]`;
  const call = (name, args, caller) => {
    const r = tools().callTool(name, args, caller);
    console.log(`${name}: ${JSON.stringify(r.text)} error=${r.isError} ${r.errorCode ?? "-"} ${importsCalled()}`);
  };

  const names = tools().listTools().map((d) => d.name);
  console.log(`list-tools: ${names.join(" ")} ${importsCalled()}`);

  sessions.add("session-1");
  const caller = { owner: "session-1", cwd: "/" };
  // Arguments that fail validation never reach the executor.
  call("bash", "{}", caller);
  call("bash", '{"command":"pwd; echo oops >&2; exit 3","description":"Show the dir"}', caller);
  call("bash", '{"command":"ls","description":"List files","workdir":"/no/such/dir"}', caller);
  const ended = new Promise((resolve) => (executor.onEnd = resolve));
  call("bash", '{"command":"echo done","description":"Echo","run_in_background":true}', caller);

  // A task's end arrives on the event loop, between export calls, never inside one.
  const task = await ended;
  let outcome = "ok";
  try {
    tools().taskDone(task);
  } catch (e) {
    // result<_, string>: the err case is thrown, its string in `payload`; a message for the log.
    outcome = `error ${e.payload}`;
  }
  console.log(`task-done ${task.id}: ${outcome} ${importsCalled()}`);
  for (const [owner, text] of notices) console.log(`notice for ${owner}: ${text}`);

  const taskId = '{"task_id":"bash-1"}';
  call("bash_output", taskId, caller);
  call("bash_kill", taskId, caller);
  // A caller without the owner token cannot touch the task.
  call("bash_output", taskId, { owner: undefined, cwd: undefined });

  for (const dir of [executor.dir, `${executor.dir}-jco`]) rmSync(dir, { recursive: true, force: true });
}

await main();
