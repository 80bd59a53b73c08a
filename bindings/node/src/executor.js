// The default executor: the executor contract (/spec/executor-contract.md) on this machine's
// processes, in the shapes jco gives and expects (camelCase records, undefined for none, u64 as
// BigInt). Each command is `bash -c` in a new session (own process group, no terminal, stdin
// from /dev/null); a timeout or kill sends SIGTERM to the group and SIGKILL after the grace
// period. Differences from the Rust executor: no spill files (a truncated stream reports
// `(unavailable)`), and the process group is the tree's boundary (no cgroup, no subreaper).

import { spawnSync } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { checkNames, childEnv } from "./env.js";
import { Stream, drive } from "./supervise.js";

const SUPERVISOR = fileURLToPath(new URL("./supervise.js", import.meta.url));

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
    /** Called once per background task when it ends (the host hands it to the component). */
    this.onTaskDone = null;
    this.shuttingDown = false;
  }

  currentLimits() {
    const s = this.settings;
    return {
      defaultTimeoutMs: s.defaultTimeoutMs,
      maxTimeoutMs: s.maxTimeoutMs,
      maxOutputBytes: BigInt(s.maxOutputBytes),
      graceMs: s.graceMs,
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

  run(spec) {
    const { graceMs, maxOutputBytes, maxTimeoutMs } = this.settings;
    if (!Number.isFinite(spec.timeoutMs) || spec.timeoutMs <= 0) {
      throw new ExecutorError("invalid-request", `invalid timeoutMs: expected a positive number, got ${spec.timeoutMs}`);
    }
    const timeoutMs = Math.min(spec.timeoutMs, maxTimeoutMs);
    checkWorkdir(spec.workdir);
    const child = spawnSync(process.execPath, [SUPERVISOR], {
      input: JSON.stringify({ spec: { ...spec, timeoutMs }, graceMs, maxOutputBytes, env: this.env() }),
      maxBuffer: 16 * maxOutputBytes + 1_000_000,
      stdio: ["pipe", "pipe", "inherit"],
      // A safety net only: the supervisor itself ends within timeout + 3 grace periods.
      timeout: timeoutMs + 4 * graceMs + 10_000,
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

  /** Kill every running task and wait for each to end. No task-done events after this. */
  async shutdown() {
    this.shuttingDown = true;
    for (const record of this.tasks.values()) {
      if (record.task.state === "running") this.kill(record.task.id);
    }
    await Promise.all([...this.live]);
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
