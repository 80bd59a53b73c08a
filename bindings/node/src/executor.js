// The default executor: the executor contract (executor-contract.md) on this machine's
// processes, in the shapes jco gives and expects (camelCase records, undefined for none, u64 as
// BigInt); `run` returns a promise, every other function answers at once. Each command is `bash -c` in a new session (own process group, no terminal, stdin
// from /dev/null); a timeout or kill sends SIGTERM to the group and SIGKILL after the grace
// period. Differences from the Rust executor: no spill files (a truncated stream reports
// `(unavailable)`), the process group is the tree's boundary (no cgroup, no subreaper), and
// there is no sandbox (the limits name none, and no denial is ever reported).

import { accessSync, constants, statSync } from "node:fs";

import { checkNames, childEnv } from "./env.js";
import { Stream, drive } from "./supervise.js";

/** One case of the WIT `executor-error` variant (`invalid-request`, `unknown-task`, ...). */
export class ExecutorError extends Error {
  constructor(tag, message) {
    super(message ?? tag);
    this.name = "ExecutorError";
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

/** The executor contract's defaults. */
export const DEFAULTS = Object.freeze({
  defaultTimeoutMs: 120_000,
  maxTimeoutMs: 600_000,
  maxOutputBytes: 64_000,
  graceMs: 3_000,
  maxTasks: 64,
  maxFinishedTasks: 1024,
});

const WHOLE = new Set(["maxOutputBytes", "maxTasks", "maxFinishedTasks"]);

/** What this executor reports of denials: none, as it has no sandbox. */
const noDenials = () => ({ first: [], more: 0 });

/** Settings merged over the defaults, each checked: finite and > 0, whole where it counts. */
function checkSettings(options) {
  if (options === null || typeof options !== "object") {
    throw new TypeError(`executor settings: expected an object, got ${options === null ? "null" : typeof options}`);
  }
  const known = new Set([...Object.keys(DEFAULTS), "cwd", "envDeny", "envAllow"]);
  for (const key of Object.keys(options)) {
    if (!known.has(key)) throw new TypeError(`executor settings: unknown setting ${JSON.stringify(key)}; known: ${[...known].join(", ")}`);
  }
  const settings = { ...DEFAULTS };
  for (const key of Object.keys(DEFAULTS)) {
    const value = options[key];
    if (value === undefined) continue;
    const whole = WHOLE.has(key);
    if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || (whole && !Number.isSafeInteger(value))) {
      throw new RangeError(`executor settings: ${key} must be a finite ${whole ? "whole number" : "number"} > 0, got ${String(value)}`);
    }
    settings[key] = value;
  }
  if (options.cwd !== undefined && (typeof options.cwd !== "string" || options.cwd === "")) {
    throw new TypeError(`executor settings: cwd must be a non-empty string, got ${JSON.stringify(options.cwd)}`);
  }
  settings.cwd = options.cwd;
  settings.env = {
    deny: checkNames("envDeny", options.envDeny ?? []),
    allow: checkNames("envAllow", options.envAllow ?? []),
  };
  return settings;
}

/**
 * The executor contract on this machine's processes. Settings: `defaultTimeoutMs`,
 * `maxTimeoutMs`, `maxOutputBytes` (per stream, kept in memory), `graceMs`, `maxTasks` (running
 * background tasks), `maxFinishedTasks` (kept for reads), `cwd` (for calls without a workdir;
 * else the process's cwd), `envDeny` (more variable-name patterns to withhold, `*` wildcard) and
 * `envAllow` (names passed on whatever the patterns say).
 */
export class LocalExecutor {
  constructor(options = {}) {
    const s = checkSettings(options);
    this.settings = s;
    this.tasks = new Map();
    this.finished = [];
    this.running = 0;
    this.nextId = 1;
    this.live = new Set();
    this.foreground = new Set();
    /** Called once per background task when it ends (the host hands it to the component). */
    this.onTaskDone = null;
    this.shuttingDown = false;
    /** Which executor this is: `"local"` (this one) or `"served"` (`ServedExecutor`). */
    this.kind = "local";
  }

  /** Which executor this is and what it lacks against dsh-host's own. */
  describe() {
    return {
      kind: this.kind,
      lacks: [
        "spill files: a truncated output names no file",
        "containment beyond the process group: a process that leaves it (setsid) outlives the call",
        "a sandbox",
        "commands longer than the kernel's argument limit (about 128 KiB)",
      ],
    };
  }

  currentLimits() {
    const s = this.settings;
    return {
      defaultTimeoutMs: s.defaultTimeoutMs,
      maxTimeoutMs: s.maxTimeoutMs,
      maxOutputBytes: BigInt(s.maxOutputBytes),
      graceMs: s.graceMs,
      // No sandbox: commands run with this user's authority.
      sandbox: undefined,
    };
  }

  resolve({ command, workdir, timeoutMs, owner }) {
    const requested = timeoutMs ?? this.settings.defaultTimeoutMs;
    if (!Number.isFinite(requested) || requested <= 0) {
      throw new ExecutorError("invalid-request", `invalid timeoutMs: expected a positive number, got ${requested}`);
    }
    return {
      command,
      workdir: workdir ?? this.settings.cwd ?? process.cwd(),
      timeoutMs: Math.min(requested, this.settings.maxTimeoutMs),
      owner,
    };
  }

  /**
   * Runs in the foreground to the end (timeout, abort and drain included). Asynchronous: the
   * host awaits it outside the component (see src/replay.js). `signal` aborts the run: the
   * command is stopped as by a timeout and the result says `aborted`.
   */
  async run(spec, { signal = undefined } = {}) {
    const { graceMs, maxOutputBytes, maxTimeoutMs } = this.settings;
    if (!Number.isFinite(spec.timeoutMs) || spec.timeoutMs <= 0) {
      throw new ExecutorError("invalid-request", `invalid timeoutMs: expected a positive number, got ${spec.timeoutMs}`);
    }
    const timeoutMs = Math.min(spec.timeoutMs, maxTimeoutMs);
    checkWorkdir(spec.workdir);
    if (this.shuttingDown) throw new ExecutorError("internal", "the executor is shutting down; no new commands");
    if (signal?.aborted) throw new ExecutorError("aborted");
    // Shutdown stops foreground runs too; the caller's signal joins it.
    const shutdown = new AbortController();
    const stop = signal ? AbortSignal.any([signal, shutdown.signal]) : shutdown.signal;
    const out = new Stream(maxOutputBytes);
    const err = new Stream(maxOutputBytes);
    const running = drive(spec.command, spec.workdir, { timeoutMs, graceMs, stop, env: this.env() }, out, err);
    const entry = { shutdown, ended: running.catch(() => {}) };
    this.foreground.add(entry);
    let end;
    try {
      end = await running;
    } catch (e) {
      throw this.spawnError(spec.workdir, e);
    } finally {
      this.foreground.delete(entry);
    }
    return {
      exitCode: end.exitCode ?? undefined,
      signal: end.signal ?? undefined,
      timedOut: end.cause === "timeout",
      aborted: end.cause === "kill",
      timeoutMs,
      stdout: out.snapshot(),
      stderr: err.snapshot(),
      leftoverProcesses: end.leftovers,
      // This executor has no foreground limit: a run never continues as a task.
      yielded: undefined,
      denials: noDenials(),
    };
  }

  start(spec) {
    const { maxTasks, maxOutputBytes, graceMs } = this.settings;
    if (this.shuttingDown) throw new ExecutorError("internal", "the executor is shutting down; no new background tasks");
    checkWorkdir(spec.workdir);
    if (this.running >= maxTasks) {
      throw new ExecutorError(
        "task-limit",
        `too many background tasks: ${this.running} are running, the limit is ${maxTasks}; wait for one to finish or kill one`,
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
      out: new Stream(maxOutputBytes),
      err: new Stream(maxOutputBytes),
      offsets: [0, 0],
      stop: new AbortController(),
    };
    this.tasks.set(task.id, record);
    this.running += 1;
    const options = { graceMs, stop: record.stop.signal, env: this.env() };
    const ended = drive(spec.command, spec.workdir, options, record.out, record.err)
      .then(
        (end) => this.finish(record, end.exitCode ?? undefined, end.signal ?? undefined, false),
        (e) => {
          record.err.write(Buffer.from(`spawn failed: ${this.spawnError(spec.workdir, e).detail}`));
          this.finish(record, undefined, undefined, true);
        },
      )
      .finally(() => this.live.delete(ended));
    record.ended = ended;
    this.live.add(ended);
    return { ...task };
  }

  readOutput(id) {
    const record = this.record(id);
    const [stdout, outNext] = record.out.readSince(record.offsets[0]);
    const [stderr, errNext] = record.err.readSince(record.offsets[1]);
    record.offsets = [outNext, errNext];
    return { stdout, stderr, task: { ...record.task }, denials: noDenials() };
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

  /** Stops the running tasks of `owner` and waits for each to end. */
  async stopOwned(owner) {
    const ending = [];
    for (const record of this.tasks.values()) {
      if (record.task.owner === owner && record.task.state === "running") {
        ending.push(record.ended);
        this.kill(record.task.id);
      }
    }
    await Promise.all(ending);
  }

  /** Stops every foreground run and running task and waits for each to end. No task-done events after this. */
  async shutdown() {
    this.shuttingDown = true;
    for (const record of this.tasks.values()) {
      if (record.task.state === "running") this.kill(record.task.id);
    }
    for (const run of this.foreground) run.shutdown.abort();
    await Promise.all([...this.live, ...[...this.foreground].map((run) => run.ended)]);
  }

  // -- internals ------------------------------------------------------------------------------

  env() {
    return childEnv(process.env, this.settings.env);
  }

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
    while (this.finished.length > this.settings.maxFinishedTasks) this.tasks.delete(this.finished.shift());
  }
}
