// The executor of `dsh-host executor serve --stdio` (docs/executor-protocol.md), as the package's
// executor: the Rust executor's containment, spill files, sandbox and permission rules behind the
// same nine functions the `LocalExecutor` offers, so the same commands give the same text here as
// in `dsh-host`. The far side starts with the executor and says hello at once; every function
// answers with a promise (the host replays the component around them, src/replay.js) that waits
// for the hello first; the limits are the ones `hello` gave.
//
// What the protocol adds is kept: `run` and `start` carry a request id (a repeat never runs twice),
// reads send the offsets the previous answer ended at, task-done events pass on once each (by
// their sequence number) and are acknowledged. When the far side ends, nothing is retried
// elsewhere: a `run` or `start` already sent fails saying the command may or may not have run
// (one never sent: that it did not start), every running task gets one task-done event as
// lost (nobody knows whether its command still runs or finished), a read of such a task answers
// no output and that state (the component then says its output can no longer be read), and other
// calls fail naming the cause; the wording is dsh-host's own (`--executor-command`), so a model
// reads the same.

import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, constants, statSync } from "node:fs";
import { createRequire } from "node:module";
import { delimiter, join } from "node:path";
import { createInterface } from "node:readline";

import { ExecutorError } from "./executor.js";

/** The protocol version this package speaks. */
export const PROTOCOL_VERSION = 1;

/** The longest line the protocol carries (docs/executor-protocol.md). */
const MAX_LINE_BYTES = 512 * 1024 * 1024;

/** How long the far side has to answer `hello`, as dsh-host's own client gives it. */
const HELLO_TIMEOUT_MS = 30_000;

/** Ended tasks kept as last seen (for a task whose end came before its start's answer, and to
 * answer for tasks once the far side is gone), as dsh-host's own client keeps them. */
const KEPT_TASKS = 4096;

/** Whether `path` is a file this process may execute. */
function isExecutableFile(path) {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** `dsh-host` on `PATH`, or `undefined`. */
export function findDshHost(path = process.env.PATH ?? "") {
  for (const dir of path.split(delimiter)) {
    if (dir === "") continue;
    const candidate = join(dir, "dsh-host");
    if (isExecutableFile(candidate)) return candidate;
  }
  return undefined;
}

/** The platforms (`process.platform`-`process.arch`) a package carrying `dsh-host` is made for. */
const BINARY_PLATFORMS = new Set(["linux-x64", "linux-arm64"]);

/**
 * The package carrying a `dsh-host` binary (as `bin/dsh-host`) for a platform and architecture
 * (Node's names, `process.platform` and `process.arch`), or `undefined` for one without.
 */
export function platformPackage(platform = process.platform, arch = process.arch) {
  return BINARY_PLATFORMS.has(`${platform}-${arch}`) ? `@dsh-tools/dsh-host-${platform}-${arch}` : undefined;
}

/**
 * The `dsh-host` of this platform's package (`platformPackage()`), resolved from this package as
 * an import of it would be, when that package is installed and its binary is executable;
 * otherwise `undefined`.
 */
export function packagedDshHost() {
  const name = platformPackage();
  if (name === undefined) return undefined;
  let path;
  try {
    path = createRequire(import.meta.url).resolve(`${name}/bin/dsh-host`);
  } catch {
    return undefined;
  }
  return isExecutableFile(path) ? path : undefined;
}

/**
 * The `dsh-host` to serve the executor and where it was found, `{ path, source }`: `DSH_HOST`
 * when set (`"env"`), else the binary of this platform's package (`"package"`), else `dsh-host`
 * on `PATH` (`"path"`); `undefined` when there is none.
 */
export function locateDshHost(env = process.env) {
  if (env.DSH_HOST) return { path: env.DSH_HOST, source: "env" };
  const packaged = packagedDshHost();
  if (packaged !== undefined) return { path: packaged, source: "package" };
  const onPath = findDshHost(env.PATH ?? "");
  if (onPath !== undefined) return { path: onPath, source: "path" };
  return undefined;
}

/** A WIT enum case from its wire spelling (`read_only` → `read-only`). */
const kebab = (s) => s.replaceAll("_", "-");

const optional = (v) => (v === null ? undefined : v);

function limitsFromWire(l) {
  const s = l.sandbox;
  return {
    defaultTimeoutMs: l.default_timeout_ms,
    maxTimeoutMs: l.max_timeout_ms,
    maxOutputBytes: BigInt(l.max_output_bytes),
    graceMs: l.grace_ms,
    sandbox: s === null
      ? undefined
      : {
          mode: kebab(s.mode),
          writable: s.writable,
          deniedReads: s.denied_reads,
          network: kebab(s.network),
          allowedHosts: s.allowed_hosts ?? [],
        },
  };
}

const specFromWire = (s) => ({ command: s.command, workdir: s.workdir, timeoutMs: s.timeout_ms, owner: optional(s.owner) });

const specToWire = (s) => ({ command: s.command, workdir: s.workdir, timeout_ms: s.timeoutMs, owner: s.owner ?? null });

function taskFromWire(t) {
  return {
    id: t.id,
    command: t.command,
    owner: optional(t.owner),
    state: kebab(t.state),
    exitCode: optional(t.exit_code),
    signal: optional(t.signal),
  };
}

const denialsFromWire = (d) => ({
  first: d.first.map((x) => ({ access: kebab(x.access), target: x.target, reason: kebab(x.reason) })),
  more: d.more,
});

const streamFromWire = (s) => ({
  text: s.text,
  truncated: s.truncated,
  spillPath: optional(s.spill_path),
  spillEvicted: s.spill_evicted ?? false,
});

const deltaFromWire = (d) => ({
  text: d.text,
  lossy: d.lossy,
  spillPath: optional(d.spill_path),
  spillEvicted: d.spill_evicted ?? false,
});

/** A read of a task lost with the far side: no output (it can no longer be read), no denials,
 * and the task as last seen. */
function lostRead(task) {
  const empty = () => ({ text: "", lossy: false, spillPath: undefined, spillEvicted: false });
  return { stdout: empty(), stderr: empty(), task: { ...task }, denials: { first: [], more: 0 } };
}

function runFromWire(r) {
  return {
    exitCode: optional(r.exit_code),
    signal: optional(r.signal),
    timedOut: r.timed_out,
    aborted: r.aborted,
    timeoutMs: r.timeout_ms,
    stdout: streamFromWire(r.stdout),
    stderr: streamFromWire(r.stderr),
    leftoverProcesses: r.leftover_processes,
    yielded: r.yielded === null ? undefined : { task: taskFromWire(r.yielded.task), afterMs: r.yielded.after_ms },
    denials: denialsFromWire(r.denials),
  };
}

/** An executor error from its wire form: `"aborted"` or `{"<kind>": value}`. */
function errorFromWire(e) {
  if (e === "aborted") return new ExecutorError("aborted");
  const [[kind, value]] = Object.entries(e);
  if (kind === "refused") {
    const error = new ExecutorError("refused", `refused by the permission rules: ${value.part}`);
    error.detail = {
      kind: kebab(value.kind),
      part: value.part,
      rule: optional(value.rule),
      source: optional(value.source),
      message: optional(value.message),
      allowRule: optional(value.allow_rule),
      waitedMs: optional(value.waited_ms),
    };
    return error;
  }
  return new ExecutorError(kebab(kind), value);
}

/** A JSON-RPC error answer: the protocol's own failure (not an executor error). */
class ProtocolError extends Error {
  constructor(error) {
    super(String(error?.message ?? "an error without a message"));
    this.code = error?.code;
  }
}

/** Why a call got no answer. */
class Lost extends Error {
  constructor(reason, sent) {
    super(reason);
    this.sent = sent;
  }
}

/** The error a `run` or `start` without an answer gets; dsh-host's wording. */
function startingError(lost) {
  if (lost instanceof ProtocolError) {
    return new ExecutorError(
      "internal",
      `the executor service failed the call (${lost.message}); the command may or may not have run`,
    );
  }
  if (!lost.sent) {
    return new ExecutorError("spawn-failed", `the executor service is gone (${lost.message}); the command did not start`);
  }
  return new ExecutorError(
    "internal",
    `the executor service was lost (${lost.message}) while the command was in flight; it may or may not have run`,
  );
}

/** The error any other call without an answer gets. */
function otherError(lost) {
  if (lost instanceof ProtocolError) return new ExecutorError("internal", `the executor service failed the call: ${lost.message}`);
  if (!lost.sent) return new ExecutorError("internal", `the executor service was not reached (${lost.message})`);
  return new ExecutorError("internal", `the executor service is gone (${lost.message})`);
}

/**
 * The program and arguments to run for `options` (see `ServedExecutor`), with the `dsh-host` it
 * runs and where that came from (both `null` for a `command`).
 */
function commandLine({ command, dshHost }) {
  if (command === undefined) {
    const found = dshHost === undefined ? locateDshHost() : { path: dshHost, source: "argument" };
    if (found === undefined) {
      const carrier = platformPackage();
      const packaged = carrier === undefined ? "no package carries one for this platform" : `${carrier} is not installed`;
      throw new Error(`ServedExecutor: no dsh-host found (DSH_HOST is not set, ${packaged}, none is on PATH); give dshHost or command`);
    }
    return { argv: [found.path, "executor", "serve", "--stdio"], binary: found.path, binarySource: found.source };
  }
  if (!Array.isArray(command) || command.length === 0 || !command.every((a) => typeof a === "string")) {
    throw new TypeError("ServedExecutor: command must be a non-empty array of strings");
  }
  return { argv: command, binary: null, binarySource: null };
}

/**
 * The executor behind `dsh-host executor serve --stdio`. `command` is the program and arguments
 * to run (by default `dsh-host executor serve --stdio`, with `dsh-host` given as `dshHost`, else
 * the one `locateDshHost()` finds: `DSH_HOST`, this platform's package, `PATH`); the executor's
 * flags (limits, sandbox, spill) go on that command line. `new ServedExecutor()` starts it and
 * says hello; `ready` settles with the answer (rejected, naming both versions, when the far side
 * speaks another protocol version, and every call then fails with that error).
 * `await ServedExecutor.start()` is both at once.
 */
export class ServedExecutor {
  #child;
  #pending = new Map();
  #nextId = 1;
  #requestPrefix = randomBytes(6).toString("hex");
  #nextRequest = 1;
  /** The offsets each task's last read ended at. */
  #offsets = new Map();
  /** Tasks started (or yielded) and not yet reported ended, by id. */
  #running = new Map();
  /** Ended tasks as last seen, oldest first (bounded by `KEPT_TASKS`). */
  #ended = new Map();
  /** Waiters for a task's end, by id. */
  #endWaiters = new Map();
  #lastSeq = 0;
  /** Why the far side is gone, once it is. */
  #gone = null;
  /** This side ends the connection: no task-done event is passed on any more. */
  #closing = false;
  #argv;
  #env;
  /** Whether the far side's process and pipes keep the event loop alive now. */
  #held;
  /** The far side's process ended and its pipes closed. */
  #childClosed = false;
  #exited;

  /** Called once per background task when it ends (the host hands it to the component). */
  onTaskDone = null;

  constructor(options = {}) {
    const { argv, binary, binarySource } = commandLine(options);
    this.#argv = argv;
    /** The `dsh-host` serving the executor (`null` for a `command`). */
    this.binary = binary;
    /** Where `binary` came from: `"argument"` (`dshHost`), `"env"`, `"package"` or `"path"`. */
    this.binarySource = binarySource;
    this.#env = options.env ?? process.env;
    const child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "inherit"], env: options.env ?? process.env });
    this.#child = child;
    this.#exited = new Promise((resolve) =>
      child.once("close", () => {
        this.#childClosed = true;
        resolve();
      }),
    );
    child.stdin.on("error", () => {});
    // Idle, the far side does not keep this process alive (as an idle LocalExecutor holds
    // nothing): a program that forgot `close()` still exits, and the far side then sees its input
    // end and stops. A call waiting for its answer, or a task still running, holds it.
    this.#held = true;
    this.#hold(false);
    const lines = createInterface({ input: child.stdout, crlfDelay: Infinity });
    lines.on("line", (line) => this.#receive(line));
    // Worded as dsh-host's own client words the end of a connection.
    lines.on("close", () => this.#lost("it closed the connection"));
    child.once("error", (e) => this.#lost(`cannot run it: ${e.message}`));
    child.once("exit", () => this.#lost("it closed the connection"));
    /** What `hello` said (the server's name, session and limits), once it answered. */
    this.welcome = null;
    this.kind = "served";
    this.limits = null;
    this.ready = this.#hello();
    // Failing calls report it; an executor nobody calls must not crash the process with it.
    this.ready.catch(() => {});
  }

  /** Starts the far side and says hello; rejects, naming both versions, on a mismatch. */
  static async start(options = {}) {
    const executor = new ServedExecutor(options);
    await executor.ready;
    return executor;
  }

  /** Says hello; the errors are worded as dsh-host's own client words them. */
  async #hello() {
    const command = JSON.stringify(this.#argv.join(" "));
    let timer;
    const timedOut = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`the executor command ${command} did not answer hello within ${HELLO_TIMEOUT_MS / 1000}s`)), HELLO_TIMEOUT_MS);
    });
    try {
      const hello = { protocol: PROTOCOL_VERSION, client: "dsh-tools (node)", session: null };
      this.welcome = await Promise.race([this.#call("hello", hello), timedOut]);
    } catch (e) {
      await this.close();
      if (e instanceof ProtocolError) throw new Error(`the executor command ${command} refused the connection: ${e.message}`);
      if (e instanceof Lost) throw new Error(`the executor command ${command} ended before answering hello (${e.message})`);
      throw e;
    } finally {
      clearTimeout(timer);
    }
    this.limits = limitsFromWire(this.welcome.limits);
  }

  /**
   * Which executor this is, which `dsh-host` serves it and where that came from, and what it
   * lacks against dsh-host's own: nothing.
   */
  describe() {
    return {
      kind: this.kind,
      server: this.welcome?.server ?? null,
      binary: this.binary,
      binarySource: this.binarySource,
      lacks: [],
    };
  }

  /** The far side's process id. */
  get childPid() {
    return this.#child.pid;
  }

  // -- the nine functions -------------------------------------------------------------------

  /**
   * The limits `hello` gave. Asked before that answer came (the tools describe themselves when
   * they are made, synchronously), the far side's command is run once more, synchronously, for
   * its hello alone: the same command line gives the same limits.
   */
  currentLimits() {
    if (this.limits === null) this.limits = this.#probeLimits();
    return this.limits;
  }

  #probeLimits() {
    const hello = { jsonrpc: "2.0", id: 1, method: "hello", params: { protocol: PROTOCOL_VERSION, client: "dsh-tools (node)", session: null } };
    const probe = spawnSync(this.#argv[0], this.#argv.slice(1), {
      input: `${JSON.stringify(hello)}\n`,
      encoding: "utf8",
      env: this.#env,
      timeout: 30_000,
      stdio: ["pipe", "pipe", "inherit"],
    });
    let answer;
    try {
      answer = JSON.parse(probe.stdout.split("\n")[0]);
    } catch {
      const why = probe.error ? probe.error.message : `it answered ${JSON.stringify(probe.stdout.slice(0, 200))}`;
      throw new Error(`the executor command ${JSON.stringify(this.#argv.join(" "))} ended before answering hello (${why})`);
    }
    if (answer.error) {
      throw new Error(`the executor command ${JSON.stringify(this.#argv.join(" "))} refused the connection: ${answer.error.message}`);
    }
    return limitsFromWire(answer.result.limits);
  }

  async resolve({ command, workdir, timeoutMs, owner }) {
    const request = { command, workdir: workdir ?? null, timeout_ms: timeoutMs ?? null, owner: owner ?? null };
    return specFromWire(await this.#outcome("resolve", { request }, otherError));
  }

  async run(spec, { signal = undefined } = {}) {
    if (signal?.aborted) throw new ExecutorError("aborted");
    const requestId = this.#requestId();
    const cancel = () => this.#notify("cancel", { request_id: requestId });
    signal?.addEventListener("abort", cancel, { once: true });
    try {
      const result = runFromWire(await this.#outcome("run", { request_id: requestId, spec: specToWire(spec) }, startingError));
      if (result.yielded) this.#started(result.yielded.task);
      return result;
    } finally {
      signal?.removeEventListener("abort", cancel);
    }
  }

  async start(spec) {
    const task = taskFromWire(await this.#outcome("start", { request_id: this.#requestId(), spec: specToWire(spec) }, startingError));
    this.#started(task);
    return task;
  }

  async readOutput(id) {
    if (this.#gone !== null) {
      const task = this.#ended.get(id);
      // Its output went with the far side: nothing more to read, and the state says so.
      if (task?.state === "lost") return lostRead(task);
      throw new ExecutorError("internal", `the executor service is gone (${this.#gone}); the output of ${id} can no longer be read`);
    }
    const from = this.#offsets.get(id) ?? { stdout: 0, stderr: 0 };
    const answer = await this.#outcome("read", { task: id, from }, otherError);
    this.#offsets.set(id, answer.to);
    const read = answer.read;
    return {
      stdout: deltaFromWire(read.stdout),
      stderr: deltaFromWire(read.stderr),
      task: taskFromWire(read.task),
      denials: denialsFromWire(read.denials),
    };
  }

  async kill(id) {
    if (this.#gone !== null) {
      // Every task of a lost far side has ended already (lost, if it was running).
      if (this.#ended.has(id)) return false;
      throw new ExecutorError("unknown-task", id);
    }
    return this.#outcome("kill", { task: id }, otherError);
  }

  async ownerOf(id) {
    if (this.#gone !== null) return this.#ended.get(id)?.owner;
    await this.#ready().catch(() => {});
    try {
      return optional(await this.#call("owner_of", { task: id }));
    } catch (e) {
      // `owner-of` has no error case: a task the far side cannot name has no owner here.
      if (e instanceof Lost || e instanceof ProtocolError) return undefined;
      throw e;
    }
  }

  async get(id) {
    if (this.#gone !== null) {
      const task = this.#ended.get(id);
      if (task === undefined) throw new ExecutorError("unknown-task", id);
      return { ...task };
    }
    return taskFromWire(await this.#outcome("get", { task: id }, otherError));
  }

  async listTasks() {
    if (this.#gone !== null) return [...this.#ended.values()].map((task) => ({ ...task }));
    await this.#ready().catch(() => {});
    try {
      return (await this.#call("list", null)).map(taskFromWire);
    } catch (e) {
      if (e instanceof Lost || e instanceof ProtocolError) return [];
      throw e;
    }
  }

  // -- lifecycle ------------------------------------------------------------------------------

  /** Stops the running tasks of `owner` and waits until each has ended. */
  async stopOwned(owner) {
    const ending = [];
    for (const task of this.#running.values()) {
      if (task.owner !== owner) continue;
      ending.push(this.#whenEnded(task.id));
      await this.kill(task.id).catch(() => {});
    }
    await Promise.all(ending);
  }

  /** Kills every running task on the far side, waits for each, and ends the connection. */
  async shutdown() {
    this.#closing = true;
    this.#hold();
    if (this.#gone === null) {
      await this.#call("shutdown", null).catch(() => {});
    }
    await this.close();
  }

  /** Ends the connection (the far side then kills what still runs) and waits for it to exit. */
  async close() {
    this.#closing = true;
    // Waited for: the far side's exit holds the event loop until it came.
    this.#hold();
    this.#child.stdin.end();
    await this.#exited;
  }

  // -- the wire -------------------------------------------------------------------------------

  /** Keeps the event loop alive while there is something to wait for, and only then. */
  #hold(wanted = this.#pending.size > 0 || this.#running.size > 0 || (this.#closing && !this.#childClosed)) {
    if (wanted === this.#held) return;
    this.#held = wanted;
    for (const handle of [this.#child, this.#child.stdin, this.#child.stdout]) {
      if (wanted) handle?.ref?.();
      else handle?.unref?.();
    }
  }

  #requestId() {
    return `${this.#requestPrefix}-${this.#nextRequest++}`;
  }

  /** An executor method's `{ok}` value, or its error thrown; `lostError` words a lost call. */
  /** The hello's outcome, as an executor error when it failed. */
  async #ready() {
    try {
      await this.ready;
    } catch (e) {
      throw new ExecutorError("internal", e.message);
    }
  }

  async #outcome(method, params, lostError) {
    await this.#ready();
    let result;
    try {
      result = await this.#call(method, params);
    } catch (e) {
      if (e instanceof Lost || e instanceof ProtocolError) throw lostError(e);
      throw e;
    }
    if (result === null || typeof result !== "object" || !("ok" in result || "err" in result)) {
      throw lostError(new ProtocolError({ message: "an answer that does not decode" }));
    }
    if ("err" in result) throw errorFromWire(result.err);
    return result.ok;
  }

  /** One request's `result`; rejects with `Lost` when no answer can come. */
  #call(method, params) {
    if (this.#gone !== null) return Promise.reject(new Lost(this.#gone, false));
    const id = this.#nextId++;
    const line = `${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`;
    // The far side answers a longer line with no id to match: refused here, unsent.
    if (Buffer.byteLength(line) > MAX_LINE_BYTES) {
      return Promise.reject(new Lost(`the request is longer than the protocol's line limit of ${MAX_LINE_BYTES} bytes`, false));
    }
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#hold();
      this.#child.stdin.write(line);
    });
  }

  #notify(method, params) {
    if (this.#gone === null) this.#child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", method, params })}\n`);
  }

  #receive(line) {
    let message;
    try {
      message = JSON.parse(line);
    } catch {
      // Not a message of the protocol (as dsh-host's own client, skipped).
      return;
    }
    if (message === null || typeof message !== "object") return;
    if (message.method === "task_done") {
      this.#taskDone(message.params.seq, taskFromWire(message.params.task));
      return;
    }
    const waiter = this.#pending.get(message.id);
    if (!waiter) return;
    this.#pending.delete(message.id);
    this.#hold();
    if (message.error) {
      waiter.reject(new ProtocolError(message.error));
    } else {
      waiter.resolve(message.result);
    }
  }

  /** A task's end: passed on once (by sequence number), then acknowledged. */
  #taskDone(seq, task) {
    if (seq <= this.#lastSeq) return;
    this.#lastSeq = seq;
    this.#finish(task);
    this.#notify("ack", { cursor: seq });
  }

  /** A task a `start` or a yielded `run` answered: running, unless its end came first. */
  #started(task) {
    if (task.state !== "running" || this.#ended.has(task.id)) return;
    this.#running.set(task.id, task);
    this.#hold();
  }

  #finish(task) {
    this.#running.delete(task.id);
    this.#ended.delete(task.id);
    this.#ended.set(task.id, task);
    while (this.#ended.size > KEPT_TASKS) {
      const [oldest] = this.#ended.keys();
      this.#ended.delete(oldest);
      this.#offsets.delete(oldest);
    }
    this.#hold();
    for (const wake of this.#endWaiters.get(task.id) ?? []) wake();
    this.#endWaiters.delete(task.id);
    if (this.onTaskDone && !this.#closing) this.onTaskDone(task);
  }

  /** Resolves when `id` has ended (at once if it is not known to run). */
  #whenEnded(id) {
    if (!this.#running.has(id)) return Promise.resolve();
    return new Promise((resolve) => {
      const waiters = this.#endWaiters.get(id) ?? [];
      waiters.push(resolve);
      this.#endWaiters.set(id, waiters);
    });
  }

  /** The far side is gone: every waiting call fails, every running task ends as lost, once. */
  #lost(reason) {
    if (this.#gone !== null) return;
    this.#gone = reason;
    // The far side kills what still runs once its input ends; nothing here waits for it.
    this.#child.stdin.end();
    for (const waiter of this.#pending.values()) waiter.reject(new Lost(reason, true));
    this.#pending.clear();
    this.#hold();
    for (const task of [...this.#running.values()]) {
      this.#finish({ ...task, state: "lost", exitCode: undefined, signal: undefined });
    }
  }
}
