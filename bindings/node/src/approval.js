// Permission rules for a component composed with the policy middleware: the host side of
// `dsh:bash/approval`. The rules are enforced inside the component (the middleware in front of
// its executor import), so every text the model reads comes from the component; this module only
// hands it the policy files, `~`, the session's grants and the person's answers. The question
// goes to the application's `approve` callback, never through a tool: the model has no way to
// approve a command itself.

import { readFileSync } from "node:fs";
import { isAbsolute } from "node:path";

import { APPROVAL, WIT_VERSION } from "./component.js";

/** How long `approve` is given to answer unless `approveTimeoutMs` says otherwise (as dsh-host). */
export const APPROVE_TIMEOUT_MS = 50_000;

/** The largest `approveTimeoutMs`: the WIT `timed-out` case carries it as a u32. */
const MAX_TIMEOUT_MS = 2 ** 32 - 1;

const DECLINED = Object.freeze({ tag: "declined" });

/** The `policy` option as WIT `policy-file`s: paths read now, `{ name, text }` taken as given. */
export function policyFiles(policy) {
  if (!Array.isArray(policy)) {
    throw new TypeError(`policy: expected an array of file paths or { name, text } objects, got ${policy === null ? "null" : typeof policy}`);
  }
  return policy.map((entry, i) => {
    if (typeof entry === "string") {
      if (entry === "") throw new TypeError(`policy[${i}]: the file path is empty`);
      let text;
      try {
        text = readFileSync(entry, "utf8");
      } catch (e) {
        throw new Error(`policy: cannot read the policy file ${JSON.stringify(entry)}: ${e.message}`);
      }
      // The name as given, so that refusals cite the file the way the application named it.
      return { name: entry, text };
    }
    if (entry !== null && typeof entry === "object" && typeof entry.name === "string" && typeof entry.text === "string") {
      if (entry.name === "") throw new TypeError(`policy[${i}]: the file name is empty`);
      return { name: entry.name, text: entry.text };
    }
    throw new TypeError(`policy[${i}]: expected a file path or a { name, text } object of strings`);
  });
}

/** Checks `approveTimeoutMs`: a whole number of milliseconds the WIT answer can carry. */
export function approveTimeout(value) {
  if (value === undefined) return APPROVE_TIMEOUT_MS;
  if (!Number.isSafeInteger(value) || value <= 0 || value > MAX_TIMEOUT_MS) {
    throw new RangeError(`approveTimeoutMs must be a whole number of milliseconds from 1 to ${MAX_TIMEOUT_MS}, got ${String(value)}`);
  }
  return value;
}

/** Refuses permission options for a component that cannot enforce them, saying how to get one. */
export function requireApproval(component, given) {
  if (component.importsApproval) return;
  throw new Error(
    `${given.join(", ")} given, but the component does not import ${APPROVAL}@${WIT_VERSION}, so no ` +
      "permission rule would be enforced: compose it with the policy middleware " +
      "(policy/middleware/compose.sh TOOLS.wasm OUT.wasm) and load the result with loadComponent",
  );
}

/**
 * The files checked by the component's own `policy-check` export (the parser that enforces them),
 * so that rules that do not load stop the application here, naming the file and line, rather than
 * refusing every command later.
 */
export function checkPolicy(exports, files) {
  const check = exports.policyCheck?.check;
  if (typeof check !== "function") {
    throw new Error(
      `the component imports ${APPROVAL}@${WIT_VERSION} but does not export dsh:bash/policy-check@${WIT_VERSION}, ` +
        "so its policy files cannot be checked: compose it with policy/middleware/compose.sh",
    );
  }
  try {
    return check(files);
  } catch (e) {
    // jco throws a `result` error as an exception carrying the error value.
    if (typeof e?.payload === "string") throw new Error(`policy: ${e.payload}`);
    throw e;
  }
}

/** `~` in rules and commands: $HOME when it is an absolute path, else none (as dsh-host). */
export function homeDir() {
  const home = process.env.HOME;
  return home && isAbsolute(home) ? home : undefined;
}

/** The WIT question in the callback's shape: `null` for none. */
function questionFor(q) {
  return {
    owner: q.owner ?? null,
    command: q.command,
    cwd: q.cwd,
    parts: [...q.parts],
    rule: q.rule ?? null,
    source: q.source ?? null,
    construct: q.construct ?? null,
    sessionRule: q.sessionRule ?? null,
  };
}

/**
 * Puts questions to `approve` and keeps the grants of "for this session" answers. `ask` returns
 * the WIT answer, or a promise of it when the callback is asynchronous: the host awaits it between
 * passes over the call's journal, as it awaits a foreground run (src/replay.js), so the event
 * loop runs while the person thinks.
 */
export class Approver {
  /** Rules granted for a session, by owner, in the order granted. */
  #grants = new Map();
  #approve;
  #timeoutMs;
  #isOpen;

  /** `isOpen(owner)`: whether that session is still open (a closed one gets no grant). */
  constructor(approve, timeoutMs, isOpen) {
    this.#approve = approve;
    this.#timeoutMs = timeoutMs;
    this.#isOpen = isOpen;
  }

  grants(owner) {
    return owner === undefined ? [] : [...(this.#grants.get(owner) ?? [])];
  }

  /** The session `owner` ended: its grants go with it. */
  forget(owner) {
    this.#grants.delete(owner);
  }

  /** The answer to `q`; `signal` (the call's) aborting while the person is asked declines it. */
  ask(q, signal) {
    if (this.#approve === undefined) return { tag: "cannot-ask" };
    if (signal?.aborted) return DECLINED;
    const question = questionFor(q);
    const started = performance.now();
    let reply;
    try {
      reply = this.#approve(question);
    } catch {
      return DECLINED;
    }
    if (typeof reply?.then !== "function") {
      // A synchronous callback cannot be interrupted; one that answered late still timed out, so
      // that the deadline means the same for both kinds.
      if (performance.now() - started > this.#timeoutMs) return { tag: "timed-out", val: this.#timeoutMs };
      return this.#accept(q, reply);
    }
    return new Promise((resolve) => {
      let done = false;
      const settle = (answer) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        resolve(answer());
      };
      const onAbort = () => settle(() => DECLINED);
      const timer = setTimeout(() => settle(() => ({ tag: "timed-out", val: this.#timeoutMs })), this.#timeoutMs);
      signal?.addEventListener("abort", onAbort, { once: true });
      Promise.resolve(reply).then(
        (value) => settle(() => this.#accept(q, value)),
        () => settle(() => DECLINED),
      );
    });
  }

  /** The callback's reply as a WIT answer; "session" records the question's rule for its session. */
  #accept(q, reply) {
    if (reply === "once") return { tag: "once" };
    if (reply === "session") {
      // A question without a session rule can be allowed only once; a call without a session (or
      // one closed meanwhile) has no session to keep the grant.
      if (q.sessionRule !== undefined && q.owner !== undefined && this.#isOpen(q.owner)) {
        const rules = this.#grants.get(q.owner) ?? [];
        if (!rules.includes(q.sessionRule)) rules.push(q.sessionRule);
        this.#grants.set(q.owner, rules);
      }
      return { tag: "session" };
    }
    return DECLINED;
  }
}
