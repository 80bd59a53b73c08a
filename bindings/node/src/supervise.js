// Drives one `bash -c` from start to end: its own session (so its own process group), output
// kept as a bounded byte-exact tail, a timeout or a stop request sends SIGTERM to the group and
// SIGKILL after the grace period, the pipes drain for at most the grace period after the leader
// exits, and processes left in the group are stopped and counted. Foreground runs and
// background tasks alike, on the event loop.

import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/** Live (non-zombie) processes of a process group, read from /proc. */
export function groupMembers(pgid) {
  const members = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "latin1");
    } catch {
      continue; // the process ended while the directory was read
    }
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[0] !== "Z" && Number(fields[2]) === pgid) members.push(Number(entry));
  }
  return members;
}

function signalGroup(pgid, signal) {
  try {
    process.kill(-pgid, signal);
  } catch {
    // The group is already gone.
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Waits for `done`, at most `ms`. The timer is cleared when `done` comes first: a pending one
 * would keep the process alive for the rest of its time after the host is closed.
 */
async function within(done, ms) {
  let timer;
  const elapsed = new Promise((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  try {
    await Promise.race([done, elapsed]);
  } finally {
    clearTimeout(timer);
  }
}

/** The byte-exact tail of one stream and the stream's whole length. */
export class Stream {
  constructor(limit) {
    this.limit = limit;
    this.buf = Buffer.alloc(0);
    this.total = 0;
  }

  write(data) {
    this.total += data.length;
    this.buf = Buffer.concat([this.buf, data]);
    if (this.buf.length > this.limit) this.buf = this.buf.subarray(this.buf.length - this.limit);
  }

  /** This executor keeps no spill files: a truncated stream has no complete copy. */
  snapshot() {
    return { text: this.buf.toString("utf8"), truncated: this.total > this.buf.length, spillEvicted: false };
  }

  /** What came after the whole-stream offset `offset`; lossy when part of it left the window. */
  readSince(offset) {
    const start = this.total - this.buf.length;
    const lossy = offset < start;
    const chunk = lossy ? this.buf : this.buf.subarray(offset - start);
    return [{ text: chunk.toString("utf8"), lossy, spillEvicted: false }, this.total];
  }
}

/** Stops the group: TERM now, KILL after the grace period if anything is left. */
async function stopGroup(child, pgid, graceMs) {
  signalGroup(pgid, "SIGTERM");
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    const leaderDone = child.exitCode !== null || child.signalCode !== null;
    if (leaderDone && groupMembers(pgid).length === 0) return;
    await sleep(10);
  }
  signalGroup(pgid, "SIGKILL");
}

/**
 * Runs `bash -c command` in `workdir` with environment `env` to its end. Rejects (with the spawn
 * error) only when the shell cannot start. Resolves with {exitCode, signal, cause:
 * null|"timeout"|"kill", leftovers} once the leader exited and the pipes are drained.
 */
export async function drive(command, workdir, { timeoutMs = null, graceMs, stop = null, env }, out, err) {
  const child = spawn("bash", ["-c", command], {
    cwd: workdir,
    env,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true, // setsid(): a new session and process group, no controlling terminal
  });
  const spawned = await new Promise((resolve) => {
    child.once("spawn", () => resolve(null));
    child.once("error", (e) => resolve(e));
  });
  if (spawned) throw spawned;
  const pgid = child.pid;
  const closed = (s) => new Promise((resolve) => s.once("close", resolve));
  const pipesClosed = Promise.all([closed(child.stdout), closed(child.stderr)]);
  child.stdout.on("data", (d) => out.write(d));
  child.stderr.on("data", (d) => err.write(d));
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));

  let timer = null;
  const stopped = new Promise((resolve) => {
    if (timeoutMs !== null) timer = setTimeout(() => resolve("timeout"), timeoutMs);
    if (stop) {
      if (stop.aborted) resolve("kill");
      else stop.addEventListener("abort", () => resolve("kill"), { once: true });
    }
  });
  // The leader having exited beats a stop that fires at the same moment.
  const first = await Promise.race([exited.then((exit) => ({ exit })), stopped.then((cause) => ({ cause }))]);
  clearTimeout(timer);
  let cause = null;
  let exit = first.exit;
  if (!exit) {
    cause = first.cause;
    await stopGroup(child, pgid, graceMs);
    exit = await exited;
  }
  // The leader ended: drain the pipes for at most the grace period, then stop leftovers.
  await within(pipesClosed, graceMs);
  let leftovers = 0;
  const members = groupMembers(pgid);
  if (members.length > 0) {
    if (cause === null) leftovers = members.length;
    await stopGroup(child, pgid, graceMs);
  }
  await within(pipesClosed, graceMs);
  child.stdout.destroy();
  child.stderr.destroy();
  return { exitCode: exit.code, signal: exit.signal, cause, leftovers };
}
