// Run the dsh:bash tools component from Node: jco (1.35) transpiles it, this module supplies its
// two imports in JavaScript: `dsh:bash/bash-executor` (LocalExecutor, real processes) and
// `dsh:bash/agent` (ToolHost sessions collect the injected notices).
//
//   const host = await loadToolHost("guest_tools.wasm", new LocalExecutor());
//   const session = host.openSession("/tmp");
//   const result = session.call("bash", { command: "ls", description: "List the files" });
//
// jco specifics handled here: imports are called synchronously, so a foreground command runs in a
// blocking child (supervise.mjs via spawnSync) while background tasks fill buffers on the event
// loop between calls; the generated code looks imports up by unversioned names while its .d.ts
// names versioned ones, so both are supplied; records use camelCase fields, `u64` is a BigInt,
// `option` is undefined, a `result` import returns {tag: "ok"|"err", val}. The component imports
// these two interfaces and nothing else (no WASI), so no WASI shim is loaded: a component that
// imports anything more is refused at load, naming the import.

import { spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { accessSync, constants, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { Stream, drive } from "./supervise.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const SUPERVISOR = join(HERE, "supervise.mjs");

// ---------------------------------------------------------------------------------------------
// The executor: the shapes jco gives and expects (camelCase records, undefined for none).
// ---------------------------------------------------------------------------------------------

/** One case of the WIT `executor-error` variant (`invalid-request`, `unknown-task`, ...). */
export class ExecutorError extends Error {
  constructor(tag, message) {
    super(message ?? tag);
    this.tag = tag;
    this.detail = message;
  }
}

// The Rust executor's wording (strerror and errno), so that every host renders the same text.
const STRERROR = {
  ENOENT: [2, "No such file or directory"],
  EACCES: [13, "Permission denied"],
  ENOTDIR: [20, "Not a directory"],
  ELOOP: [40, "Too many levels of symbolic links"],
  ENAMETOOLONG: [36, "File name too long"],
};

function osErrorText(e) {
  const known = STRERROR[e.code];
  return known ? `${known[1]} (os error ${known[0]})` : String(e.message);
}

function workdirUnusable(dir, e) {
  return new ExecutorError("workdir-unusable", `workdir ${JSON.stringify(dir)} is not usable: ${osErrorText(e)}`);
}

function checkWorkdir(dir) {
  let st;
  try {
    st = statSync(dir);
  } catch (e) {
    throw workdirUnusable(dir, e);
  }
  if (!st.isDirectory()) throw workdirUnusable(dir, { code: "ENOTDIR" });
  try {
    accessSync(dir, constants.X_OK);
  } catch (e) {
    throw workdirUnusable(dir, e);
  }
}

/**
 * The executor contract on this machine's processes. Each command is `bash -c` in a new session
 * (own process group, no terminal, stdin from /dev/null); a timeout or kill sends SIGTERM to the
 * group and SIGKILL after the grace period. Simplifications against the Rust executor: no spill
 * files (a truncated stream reports `(unavailable)`), and the process group is the tree's boundary.
 */
export class LocalExecutor {
  constructor({
    cwd = undefined,
    defaultTimeoutMs = 120_000,
    maxTimeoutMs = 600_000,
    maxOutputBytes = 64_000,
    graceMs = 3_000,
    maxTasks = 64,
    maxFinishedTasks = 1024,
  } = {}) {
    Object.assign(this, { cwd, defaultTimeoutMs, maxTimeoutMs, maxOutputBytes, graceMs, maxTasks, maxFinishedTasks });
    this.tasks = new Map();
    this.finished = [];
    this.running = 0;
    this.nextId = 1;
    this.live = new Set();
    /** Called once per background task when it ends (the host hands it to the component). */
    this.onTaskDone = null;
    this.shuttingDown = false;
  }

  currentLimits() {
    return {
      defaultTimeoutMs: this.defaultTimeoutMs,
      maxTimeoutMs: this.maxTimeoutMs,
      maxOutputBytes: BigInt(this.maxOutputBytes),
      graceMs: this.graceMs,
    };
  }

  resolve({ command, workdir, timeoutMs, owner }) {
    const requested = timeoutMs ?? this.defaultTimeoutMs;
    if (!Number.isFinite(requested) || requested <= 0) {
      throw new ExecutorError("invalid-request", `invalid timeoutMs: expected a positive number, got ${requested}`);
    }
    return {
      command,
      workdir: workdir ?? this.cwd ?? process.cwd(),
      timeoutMs: Math.min(requested, this.maxTimeoutMs),
      owner,
    };
  }

  run(spec) {
    if (!Number.isFinite(spec.timeoutMs) || spec.timeoutMs <= 0) {
      throw new ExecutorError("invalid-request", `invalid timeoutMs: expected a positive number, got ${spec.timeoutMs}`);
    }
    const timeoutMs = Math.min(spec.timeoutMs, this.maxTimeoutMs);
    checkWorkdir(spec.workdir);
    const child = spawnSync(process.execPath, [SUPERVISOR], {
      input: JSON.stringify({ spec: { ...spec, timeoutMs }, graceMs: this.graceMs, maxOutputBytes: this.maxOutputBytes }),
      maxBuffer: 16 * this.maxOutputBytes + 1_000_000,
      stdio: ["pipe", "pipe", "inherit"],
      // A safety net only: the supervisor itself ends within timeout + 3 grace periods.
      timeout: timeoutMs + 4 * this.graceMs + 10_000,
      killSignal: "SIGKILL",
    });
    if (child.error || child.status !== 0) {
      throw new ExecutorError("internal", `the foreground supervisor failed: ${child.error ?? `status ${child.status}`}`);
    }
    const r = JSON.parse(child.stdout.toString("utf8"));
    if (r.spawnError) throw this.spawnError(spec.workdir, r.spawnError);
    return {
      exitCode: r.exitCode ?? undefined,
      signal: r.signal ?? undefined,
      timedOut: r.cause === "timeout",
      aborted: false,
      timeoutMs,
      stdout: r.stdout,
      stderr: r.stderr,
      leftoverProcesses: r.leftovers,
      // This executor has no foreground limit: a run never continues as a task.
      yielded: undefined,
    };
  }

  start(spec) {
    if (this.shuttingDown) throw new ExecutorError("internal", "the executor is shutting down; no new background tasks");
    checkWorkdir(spec.workdir);
    if (this.running >= this.maxTasks) {
      throw new ExecutorError(
        "task-limit",
        `too many background tasks: ${this.running} are running, the limit is ${this.maxTasks}; wait for one to finish or kill one`,
      );
    }
    const task = {
      id: `bash-${this.nextId++}`,
      command: spec.command,
      owner: spec.owner,
      state: "running",
      exitCode: undefined,
      signal: undefined,
    };
    const record = {
      task,
      out: new Stream(this.maxOutputBytes),
      err: new Stream(this.maxOutputBytes),
      offsets: [0, 0],
      stop: new AbortController(),
    };
    this.tasks.set(task.id, record);
    this.running += 1;
    const ended = drive(spec.command, spec.workdir, { graceMs: this.graceMs, stop: record.stop.signal }, record.out, record.err)
      .then(
        (end) => this.finish(record, end.exitCode ?? undefined, end.signal ?? undefined, false),
        (e) => {
          record.err.write(Buffer.from(`spawn failed: ${this.spawnError(spec.workdir, e).detail}`));
          this.finish(record, undefined, undefined, true);
        },
      )
      .finally(() => this.live.delete(ended));
    this.live.add(ended);
    return { ...task };
  }

  readOutput(id) {
    const record = this.record(id);
    const [stdout, outNext] = record.out.readSince(record.offsets[0]);
    const [stderr, errNext] = record.err.readSince(record.offsets[1]);
    record.offsets = [outNext, errNext];
    return { stdout, stderr, task: { ...record.task } };
  }

  kill(id) {
    const record = this.record(id);
    if (record.task.state !== "running") return false;
    record.task.state = "killed";
    this.running -= 1;
    this.retire(id);
    record.stop.abort();
    return true;
  }

  ownerOf(id) {
    return this.tasks.get(id)?.task.owner;
  }

  get(id) {
    return { ...this.record(id).task };
  }

  listTasks() {
    return [...this.tasks.values()]
      .map((r) => ({ ...r.task }))
      .sort((a, b) => Number(a.id.slice(5)) - Number(b.id.slice(5)));
  }

  /** Kill every running task and wait for each to end. No task-done events after this. */
  async shutdown() {
    this.shuttingDown = true;
    for (const record of this.tasks.values()) {
      if (record.task.state === "running") this.kill(record.task.id);
    }
    await Promise.all([...this.live]);
  }

  // -- internals ------------------------------------------------------------------------------

  record(id) {
    const record = this.tasks.get(id);
    if (!record) throw new ExecutorError("unknown-task", id);
    return record;
  }

  spawnError(workdir, e) {
    try {
      checkWorkdir(workdir);
    } catch (unusable) {
      return unusable;
    }
    return new ExecutorError("spawn-failed", `cannot start bash: ${osErrorText(e)}`);
  }

  finish(record, exitCode, signal, spawnFailed) {
    const task = record.task;
    task.exitCode = exitCode;
    task.signal = signal;
    if (task.state === "running") {
      task.state = signal !== undefined || spawnFailed ? "killed" : "completed";
      this.running -= 1;
      this.retire(task.id);
    }
    if (!this.shuttingDown && this.onTaskDone) this.onTaskDone({ ...task });
  }

  retire(id) {
    this.finished.push(id);
    while (this.finished.length > this.maxFinishedTasks) this.tasks.delete(this.finished.shift());
  }
}

// ---------------------------------------------------------------------------------------------
// The host: transpiles the component once, links the executor and the agent, calls the tools.
// ---------------------------------------------------------------------------------------------

/** jco's output for a component, cached in the temp dir by the component's hash. */
async function transpiled(componentPath) {
  const bytes = readFileSync(componentPath);
  const { transpile } = await import("@bytecodealliance/jco");
  const jcoVersion = JSON.parse(
    readFileSync(join(HERE, "node_modules/@bytecodealliance/jco/package.json"), "utf8"),
  ).version;
  const hash = createHash("sha256").update(bytes).update(jcoVersion).digest("hex").slice(0, 24);
  const dir = join(tmpdir(), `dsh-jco-${hash}`);
  if (!existsSync(join(dir, "done"))) {
    const { files, imports } = await transpile(bytes, { name: "tools", instantiation: "sync", noTypescript: true, quiet: true });
    const tmp = `${dir}.${process.pid}.${randomBytes(4).toString("hex")}`;
    for (const [name, data] of Object.entries(files)) {
      mkdirSync(dirname(join(tmp, name)), { recursive: true });
      writeFileSync(join(tmp, name), data);
    }
    writeFileSync(join(tmp, "imports.json"), JSON.stringify(imports));
    writeFileSync(join(tmp, "done"), "");
    try {
      renameSync(tmp, dir);
    } catch {
      rmSync(tmp, { recursive: true, force: true }); // another process won the race
    }
  }
  const mod = await import(pathToFileURL(join(dir, "tools.js")).href);
  const modules = new Map();
  const getCoreModule = (path) => {
    if (!modules.has(path)) modules.set(path, new WebAssembly.Module(readFileSync(join(dir, path))));
    return modules.get(path);
  };
  return {
    /** The component's import names, versioned (`dsh:bash/agent@0.2.0`). */
    imports: JSON.parse(readFileSync(join(dir, "imports.json"), "utf8")),
    instantiate: (imports) => mod.instantiate(getCoreModule, imports),
  };
}

/** A `result` for jco: {tag: "ok", val} or {tag: "err", val: executor-error}. */
function result(op) {
  try {
    return { tag: "ok", val: op() };
  } catch (e) {
    if (!(e instanceof ExecutorError)) throw e; // a bug in the executor: trap
    return { tag: "err", val: e.tag === "aborted" ? { tag: "aborted" } : { tag: e.tag, val: e.detail ?? "" } };
  }
}

/** One agent session: an owner token, a working directory and the notices injected for it. */
export class Session {
  constructor(host, owner, cwd) {
    Object.assign(this, { host, owner, cwd });
    this.notices = [];
  }

  call(tool, args) {
    return this.host.call(tool, args, { owner: this.owner, cwd: this.cwd });
  }

  takeNotices() {
    return this.notices.splice(0);
  }

  close() {
    this.host.sessions.delete(this.owner);
  }
}

export class ToolHost {
  constructor(component, executor, { onInject = null } = {}) {
    this.component = component;
    this.executor = executor;
    this.sessions = new Map();
    this.onInject = onInject;
    this.log = [];
    const agent = { inject: (owner, text, source) => this.inject(owner, text, source) };
    const bashExecutor = {
      currentLimits: () => executor.currentLimits(),
      resolve: (req) => result(() => executor.resolve(req)),
      run: (spec) => result(() => executor.run(spec)),
      start: (spec) => result(() => executor.start(spec)),
      readOutput: (id) => result(() => executor.readOutput(id)),
      kill: (id) => result(() => executor.kill(id)),
      ownerOf: (id) => executor.ownerOf(id),
      get: (id) => result(() => executor.get(id)),
      listTasks: () => executor.listTasks(),
    };
    const imports = { "dsh:bash/bash-executor": bashExecutor, "dsh:bash/agent": agent };
    // The generated code reads unversioned keys, its .d.ts names versioned ones: supply both.
    this.imports = { ...imports };
    for (const versioned of component.imports) {
      const name = versioned.split("@")[0];
      if (!(name in imports)) throw new Error(`the component imports ${versioned}, which this host does not provide`);
      this.imports[versioned] = imports[name];
    }
    executor.onTaskDone = (task) => this.taskDone(task);
    this.tools = this.instance()
      .listTools()
      .map((t) => ({
        name: t.name,
        title: t.title,
        description: t.description,
        inputSchema: JSON.parse(t.inputSchema),
        annotations: {
          readOnlyHint: t.annotations.readOnlyHint,
          destructiveHint: t.annotations.destructiveHint,
          idempotentHint: t.annotations.idempotentHint,
          openWorldHint: t.annotations.openWorldHint,
        },
      }));
  }

  openSession(cwd = undefined) {
    const session = new Session(this, `session-${randomBytes(16).toString("hex")}`, cwd);
    this.sessions.set(session.owner, session);
    return session;
  }

  /** Run one tool call; `args` is JSON text or a value to serialize. */
  call(tool, args, { owner = undefined, cwd = undefined } = {}) {
    const text = typeof args === "string" ? args : JSON.stringify(args);
    const r = this.instance().callTool(tool, text, { owner: owner ?? undefined, cwd: cwd ?? undefined });
    return { text: r.text, isError: r.isError, errorCode: r.errorCode ?? null };
  }

  async shutdown() {
    await this.executor.shutdown();
  }

  // -- internals ------------------------------------------------------------------------------

  /** A fresh instance per call: the component keeps no state between calls. */
  instance() {
    return this.component.instantiate(this.imports).tools;
  }

  inject(owner, text, source) {
    const notice = { owner, text, source: { kind: source.kind, plugin: source.plugin } };
    const session = this.sessions.get(owner);
    const delivered = this.onInject ? this.onInject(notice) : session?.notices.push(notice) !== undefined;
    return delivered ? { tag: "ok", val: undefined } : { tag: "err", val: { tag: "unknown-owner" } };
  }

  taskDone(task) {
    try {
      this.instance().taskDone(task);
    } catch (e) {
      this.log.push(`notice for task ${task.id} not delivered: ${e.payload ?? e}`);
    }
  }
}

/** Load the tools component from `componentPath` and link it to `executor`. */
export async function loadToolHost(componentPath, executor, options = {}) {
  return new ToolHost(await transpiled(componentPath), executor, options);
}
