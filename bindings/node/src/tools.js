// The tools component linked to an executor and to this process's sessions. The component keeps
// no state between calls, so each call gets a fresh instance (a trap in one call cannot poison
// the next); the executor keeps the tasks and the sessions keep the notices.

import { randomBytes } from "node:crypto";
import { isAbsolute } from "node:path";

import { Approver, approveTimeout, checkPolicy, homeDir, policyFiles, requireApproval } from "./approval.js";
import { PreparedComponent, WIT_VERSION, bundledComponent } from "./component.js";
import { definitionsIn } from "./definitions.js";
import { LocalExecutor } from "./executor.js";
import { ServedExecutor, locateDshHost } from "./served.js";
import { asResult, callWithReplay } from "./replay.js";

// Loaded with the module, so that `new Tools()` is synchronous; an unbuilt package fails at
// construction, not at import.
const BUNDLED = await bundledComponent().catch((e) => e);

/**
 * The executor `new Tools()` uses: dsh-host's own behind `dsh-host executor serve --stdio` when
 * the binary is there (`DSH_HOST`, else the binary of this platform's package, else on `PATH`:
 * `locateDshHost()`), so that commands behave as in dsh-host; otherwise this package's
 * `LocalExecutor`.
 */
export function defaultExecutor() {
  return locateDshHost() === undefined ? new LocalExecutor() : new ServedExecutor();
}

/** The nine functions of `dsh:bash/bash-executor`; an executor must have every one. */
const EXECUTOR_FUNCTIONS = ["currentLimits", "resolve", "run", "start", "readOutput", "kill", "ownerOf", "get", "listTasks"];

function checkOptions(what, options, known) {
  if (options === null || typeof options !== "object") {
    throw new TypeError(`${what}: expected an options object, got ${options === null ? "null" : typeof options}`);
  }
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) throw new TypeError(`${what}: unknown option ${JSON.stringify(key)}; known: ${known.join(", ")}`);
  }
}

/**
 * Limits (or a promise of them) as the component takes them: a sandbox whose executor names no
 * `allowedHosts` (one written for an older version) allows none, since jco lowers every field.
 */
function withAllowedHosts(limits) {
  if (typeof limits?.then === "function") return Promise.resolve(limits).then(withAllowedHosts);
  const s = limits?.sandbox;
  return s && s.allowedHosts === undefined ? { ...limits, sandbox: { ...s, allowedHosts: [] } } : limits;
}

/** `arguments` as the JSON text the component validates. */
function argumentsText(args) {
  if (typeof args === "string") return args;
  if (args === undefined) return "{}";
  try {
    return JSON.stringify(args);
  } catch (e) {
    throw new TypeError(`tool arguments are not JSON-serializable: ${e.message}`);
  }
}

/** One agent session: its own owner token (so its own tasks), working directory and notices. */
export class Session {
  #tools;
  #onNotice;
  #notices = [];
  #closed = false;

  constructor(tools, owner, cwd, onNotice) {
    this.#tools = tools;
    this.owner = owner;
    this.cwd = cwd;
    this.#onNotice = onNotice;
  }

  /** Runs one tool call in this session; `signal` aborts its foreground command. */
  async call(name, args, options = {}) {
    if (this.#closed) throw new Error("this session is closed");
    return this.#tools.call(name, args, this, options);
  }

  /** The rules allowed "for this session" by the `approve` callback so far; none once closed. */
  grants() {
    return this.#tools.grantsOf(this.owner);
  }

  /** The notices not taken yet, oldest first (also those handed to `onNotice`); empties the list. */
  takeNotices() {
    return this.#notices.splice(0);
  }

  /** Stops the session's running tasks and waits for them to end; notices for it stop. */
  async close() {
    if (this.#closed) return;
    this.#closed = true;
    this.#tools.forget(this);
    await this.#tools.stopTasksOf(this.owner);
  }

  /** @internal */
  get closed() {
    return this.#closed;
  }

  /** @internal */
  belongsTo(tools) {
    return this.#tools === tools;
  }

  /** @internal A completion notice for this session. */
  deliver(notice) {
    this.#notices.push(notice);
    // Outside the component's import call: a throwing callback cannot trap the instance.
    if (this.#onNotice) queueMicrotask(() => this.#onNotice(notice));
  }
}

/**
 * The bash tools: the bundled component (or another) linked to an executor; with `policy`, a
 * component composed with the policy middleware enforcing those rules, asking `approve`.
 */
export class Tools {
  #component;
  /** A fresh instance made between calls for the next one; each instance serves one call. */
  #ready = null;
  #refilling = false;
  #sessions = new Map();
  #definitions;
  #closed = false;
  /** The policy files handed to the component, `{ name, text }`; none without `policy`. */
  #policyFiles = [];
  #home = homeDir();
  #approver;

  constructor(options = {}) {
    checkOptions("new Tools", options, ["executor", "component", "policy", "approve", "approveTimeoutMs"]);
    const { executor: given, component, policy, approve, approveTimeoutMs } = options;
    if (component === undefined) {
      if (BUNDLED instanceof Error) throw BUNDLED;
      this.#component = BUNDLED;
    } else if (component instanceof PreparedComponent) {
      this.#component = component;
    } else {
      throw new TypeError("component: expected the result of `await loadComponent(pathOrBytes)`");
    }
    if (given !== undefined) {
      const missing = EXECUTOR_FUNCTIONS.filter((f) => typeof given?.[f] !== "function");
      if (missing.length > 0) throw new TypeError(`executor: missing the bash-executor function(s) ${missing.join(", ")}`);
    }
    const permissions = Object.entries({ policy, approve, approveTimeoutMs }).filter(([, v]) => v !== undefined);
    if (permissions.length > 0) requireApproval(this.#component, permissions.map(([k]) => k));
    if (approve !== undefined && typeof approve !== "function") {
      throw new TypeError(`approve: expected a function, got ${approve === null ? "null" : typeof approve}`);
    }
    this.#approver = new Approver(approve, approveTimeout(approveTimeoutMs), (owner) => this.#sessions.has(owner));
    const files = policy === undefined ? [] : policyFiles(policy);

    /** Messages the host could not act on (a notice for a task that was not delivered). */
    this.log = [];

    // Made last, once the options are known to be good: a default executor may be a process,
    // and tools that failed to be made must not leave one behind.
    this.executor = given ?? defaultExecutor();
    try {
      this.#policyFiles = files;
      if (policy !== undefined) checkPolicy(this.#fresh().exports, this.#policyFiles);
      this.executor.onTaskDone = (task) => this.#taskDone(task);
      this.#definitions = this.#instance()
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
    } catch (e) {
      if (given === undefined) Promise.resolve(this.executor.close?.()).catch(() => {});
      throw e;
    }
  }

  /**
   * Which executor runs the commands (`"local"`, `"served"`, or `"custom"` for one of yours) and
   * what it lacks against dsh-host's own.
   */
  doctor() {
    if (typeof this.executor.describe === "function") return this.executor.describe();
    return { kind: "custom", lacks: null };
  }

  /** The tool definitions as `dsh-host tools --format FORMAT` prints them. */
  definitions(format = "mcp") {
    return definitionsIn(this.#definitions, format);
  }

  /** The component's instructions for the model, when the component exports them. */
  instructions() {
    const tools = this.#instance();
    return typeof tools.instructions === "function" ? tools.instructions() : undefined;
  }

  /** A new session with its own owner token, working directory and notice callback. */
  session(options = {}) {
    checkOptions("tools.session", options, ["cwd", "onNotice"]);
    const { cwd, onNotice } = options;
    if (cwd !== undefined && (typeof cwd !== "string" || !isAbsolute(cwd))) {
      throw new TypeError(`a session's cwd must be an absolute path, got ${JSON.stringify(cwd)}`);
    }
    if (this.#closed) throw new Error("these tools are closed");
    if (onNotice !== undefined && typeof onNotice !== "function") {
      throw new TypeError(`onNotice: expected a function, got ${typeof onNotice}`);
    }
    const session = new Session(this, `session-${randomBytes(16).toString("hex")}`, cwd, onNotice);
    this.#sessions.set(session.owner, session);
    return session;
  }

  /**
   * Runs one tool call. `args` is an object or its JSON text; without a session the call has no
   * owner (it reaches only tasks without one) and no session cwd.
   */
  async call(name, args, session = undefined, options = {}) {
    if (typeof name !== "string") throw new TypeError(`tool name: expected a string, got ${typeof name}`);
    if (session !== undefined && !(session instanceof Session)) {
      throw new TypeError("session: expected a Session from tools.session()");
    }
    if (session !== undefined && (session.closed || !session.belongsTo(this))) {
      throw new Error("the session is closed or belongs to other tools");
    }
    if (this.#closed) throw new Error("these tools are closed");
    checkOptions("call options", options, ["signal"]);
    const { signal } = options;
    if (signal !== undefined && !(signal instanceof AbortSignal)) throw new TypeError("signal: expected an AbortSignal");
    const caller = { owner: session?.owner, cwd: session?.cwd };
    const text = argumentsText(args);
    const r = await callWithReplay((step) => this.#instance(step, signal, caller.owner).callTool(name, text, caller));
    return { text: r.text, isError: r.isError, errorCode: r.errorCode ?? null };
  }

  /** Stops every running task and waits for them; no notices after this. */
  async close() {
    this.#closed = true;
    if (typeof this.executor.shutdown === "function") await this.executor.shutdown();
  }

  /** @internal */
  forget(session) {
    this.#sessions.delete(session.owner);
    this.#approver.forget(session.owner);
  }

  /** @internal */
  grantsOf(owner) {
    return this.#approver.grants(owner);
  }

  /** @internal */
  async stopTasksOf(owner) {
    if (typeof this.executor.stopOwned === "function") {
      await this.executor.stopOwned(owner);
      return;
    }
    for (const task of this.executor.listTasks()) {
      if (task.owner === owner && task.state === "running") this.executor.kill(task.id);
    }
  }

  /**
   * A fresh instance's exports for one call, its executor and approval calls going through
   * `step` (a call's replay journal; straight through by default), `run` and `ask` getting
   * `signal`, and `owner` the only session it may ask about. Instantiating
   * costs milliseconds, so the next instance is made on the event loop after this one is taken:
   * between calls, or while a pass's command runs.
   */
  #instance(step = (op, perform) => perform(), signal = undefined, owner = undefined) {
    const fresh = this.#ready ?? this.#fresh();
    this.#ready = null;
    this.#refill();
    Object.assign(fresh.binding, { step, signal, owner });
    return fresh.exports.tools;
  }

  #refill() {
    if (this.#refilling) return;
    this.#refilling = true;
    // unref: a pending refill does not keep the process alive.
    setImmediate(() => {
      this.#refilling = false;
      if (this.#ready === null && !this.#closed) this.#ready = this.#fresh();
    }).unref();
  }

  #fresh() {
    const binding = { step: (op, perform) => perform(), signal: undefined, owner: undefined };
    return { binding, exports: this.#component.instantiate(this.#linked(binding)) };
  }

  /**
   * The interfaces for one instance, its executor and approval calls routed through
   * `binding.step`: the approval answers are journaled like executor results, so that a pass
   * replaying the journal sees the same grants and answers (and the person is asked once).
   */
  #linked(binding) {
    const executor = this.executor;
    const step = (op, perform) => binding.step(op, perform);
    const bashExecutor = {
      currentLimits: () => step("currentLimits", () => withAllowedHosts(executor.currentLimits())),
      resolve: (req) => step("resolve", () => asResult(() => executor.resolve(req))),
      run: (spec) => step("run", () => asResult(() => executor.run(spec, { signal: binding.signal }))),
      start: (spec) => step("start", () => asResult(() => executor.start(spec))),
      readOutput: (id) => step("readOutput", () => asResult(() => executor.readOutput(id))),
      kill: (id) => step("kill", () => asResult(() => executor.kill(id))),
      ownerOf: (id) => step("ownerOf", () => executor.ownerOf(id)),
      get: (id) => step("get", () => asResult(() => executor.get(id))),
      listTasks: () => step("listTasks", () => executor.listTasks()),
    };
    const agent = { inject: (owner, text, source) => this.#inject(owner, text, source) };
    // The component speaks only for the session of the call it serves, as in dsh-host: asking
    // about another session, or reading its grants, is a bug that traps the call.
    const own = (owner) => {
      if (owner !== binding.owner) {
        throw new Error(`the component named the session ${JSON.stringify(owner ?? null)} in a call of ${JSON.stringify(binding.owner ?? null)}`);
      }
    };
    const approval = {
      policyFiles: () => step("policyFiles", () => this.#policyFiles.map((f) => ({ ...f }))),
      home: () => step("home", () => this.#home),
      grants: (owner) => step("grants", () => (own(owner), this.#approver.grants(owner))),
      ask: (q) => step("ask", () => (own(q.owner), this.#approver.ask(q, binding.signal))),
    };
    // jco's glue looks the imports up by unversioned name while its declarations name the
    // versioned ones; both spellings point at the same objects.
    const byName = { "dsh:bash/bash-executor": bashExecutor, "dsh:bash/agent": agent, "dsh:bash/approval": approval };
    const imports = { ...byName };
    for (const [name, value] of Object.entries(byName)) imports[`${name}@${WIT_VERSION}`] = value;
    return imports;
  }

  #inject(owner, text, source) {
    const session = this.#sessions.get(owner);
    if (!session) return { tag: "err", val: { tag: "unknown-owner" } };
    session.deliver({ owner, text, source: { kind: source.kind, plugin: source.plugin ?? null } });
    return { tag: "ok", val: undefined };
  }

  #taskDone(task) {
    try {
      const r = this.#instance().taskDone(task);
      if (r !== undefined && r?.tag === "err") this.log.push(`notice for task ${task.id} not delivered: ${r.val}`);
    } catch (e) {
      this.log.push(`notice for task ${task.id} not delivered: ${e.payload ?? e}`);
    }
  }
}
