// Types of dsh-tools' main entry (hand-written; test/example.ts type-checks against them).

/** What a tool call gives back to the model. */
export interface ToolResult {
  /** The text the model sees, byte-exact as the component rendered it. */
  text: string;
  isError: boolean;
  /** `INVALID_ARGS`, `UNKNOWN_TOOL`, ... when the result is an error with a code. */
  errorCode: string | null;
}

/** A completion notice for a session: a background task of it ended. */
export interface Notice {
  /** The session's owner token. */
  owner: string;
  text: string;
  source: { kind: string; plugin: string | null };
}

export type DefinitionsFormat = "mcp" | "openai" | "anthropic";

export type JsonSchema = { [key: string]: unknown };

export interface McpToolDefinition {
  name: string;
  title: string;
  description: string;
  inputSchema: JsonSchema;
  annotations: {
    title: string;
    readOnlyHint: boolean;
    destructiveHint: boolean;
    idempotentHint: boolean;
    openWorldHint: boolean;
  };
}

export interface OpenAiToolDefinition {
  type: "function";
  function: { name: string; description: string; parameters: JsonSchema };
}

export interface AnthropicToolDefinition {
  name: string;
  description: string;
  input_schema: JsonSchema;
}

export interface DefinitionsByFormat {
  mcp: McpToolDefinition[];
  openai: OpenAiToolDefinition[];
  anthropic: AnthropicToolDefinition[];
}

export declare const FORMATS: readonly DefinitionsFormat[];

/** Settings of the default executor; each number finite and > 0. */
export interface ExecutorSettings {
  /** Timeout of a call that names none (ms); default 120000. */
  defaultTimeoutMs?: number;
  /** Cap on any timeout (ms); default 600000. */
  maxTimeoutMs?: number;
  /** Bytes of each stream kept in memory (the tail); default 64000. */
  maxOutputBytes?: number;
  /** SIGTERM to SIGKILL, and the pipe drain bound after the leader exits (ms); default 3000. */
  graceMs?: number;
  /** Running background tasks at once; default 64. */
  maxTasks?: number;
  /** Finished tasks kept for reads; default 1024. */
  maxFinishedTasks?: number;
  /** Working directory of calls that name none; default the process's cwd. */
  cwd?: string;
  /** More variable-name patterns withheld from commands (`*` any run, any case). */
  envDeny?: string[];
  /** Variable names passed on whatever the patterns say (exact). */
  envAllow?: string[];
}

export declare const DEFAULTS: Readonly<Required<Omit<ExecutorSettings, "cwd" | "envDeny" | "envAllow">>>;

/**
 * Where a task stands. `lost`: the executor that ran it is gone (a `ServedExecutor`'s far side
 * lost for good); whether the command still runs or finished, and how, is unknown, and its
 * output can no longer be read. `LocalExecutor` never produces it.
 */
export type TaskState = "running" | "completed" | "killed" | "lost";

/** A background task, in jco's shape of the WIT record. */
export interface Task {
  id: string;
  command: string;
  owner: string | undefined;
  state: TaskState;
  exitCode: number | undefined;
  signal: string | undefined;
}

/**
 * One operation a sandbox denied. `target`: the path as the kernel resolved it, the address
 * (`203.0.113.7:443`, `[2001:db8::1]:443`) or the socket family (`AF_INET`).
 */
export interface Denial {
  access: "read" | "write" | "socket" | "connect" | "undone";
  target: string;
  reason: "outside-writable-roots" | "denied-read" | "protected-path" | "network-off" | "loopback-only" | "created-after-setup" | "host-not-allowed";
}

/**
 * What a sandbox denied a command (a run, or a task since its previous read): the first few
 * distinct denials in order, and how many more there were. Without a sandbox: `{ first: [], more: 0 }`.
 */
export interface Denials {
  first: Denial[];
  more: number;
}

/** The sandbox every command runs in, for the tools to describe to the model. */
export interface SandboxPolicy {
  mode: "read-only" | "workspace-write";
  /** Directories a command may write beneath, besides its own TMPDIR; empty in read-only. */
  writable: string[];
  deniedReads: string[];
  network: "off" | "loopback" | "on";
  /**
   * The hosts a command may reach through the sandbox's proxy (`registry.npmjs.org`,
   * `*.pythonhosted.org`); the network is then `"loopback"`. Absent is read as none.
   */
  allowedHosts?: string[];
}

/** The limits in force; `sandbox` is undefined when commands run unconfined. */
export interface Limits {
  defaultTimeoutMs: number;
  maxTimeoutMs: number;
  maxOutputBytes: bigint;
  graceMs: number;
  sandbox: SandboxPolicy | undefined;
}

/**
 * The `dsh:bash/bash-executor` interface in jco's shapes (camelCase records, `undefined` for
 * none, `u64` as bigint). A failing operation throws an ExecutorError. The host sets
 * `onTaskDone`; the executor calls it once per background task that ends. One with a sandbox
 * names it in `currentLimits().sandbox` and reports what it denied in the `denials` of each run
 * result and read (`Denials`).
 */
export interface Executor {
  currentLimits(): Limits | Promise<Limits>;
  resolve(request: { command: string; workdir?: string; timeoutMs?: number; owner?: string }): Spec | Promise<Spec>;
  /** May return a promise (the host awaits it outside the component); `signal` aborts the run. */
  run(spec: Spec, options: { signal?: AbortSignal }): unknown;
  start(spec: Spec): Task | Promise<Task>;
  readOutput(id: string): unknown;
  kill(id: string): boolean | Promise<boolean>;
  ownerOf(id: string): string | undefined | Promise<string | undefined>;
  get(id: string): Task | Promise<Task>;
  listTasks(): Task[] | Promise<Task[]>;
  onTaskDone: ((task: Task) => void) | null;
  /** Optional: stop every task and wait; called by `Tools.close()`. */
  shutdown?(): Promise<void>;
  /** Optional: stop the tasks of one owner and wait; called by `Session.close()`. */
  stopOwned?(owner: string): Promise<void>;
}

/** A request with defaults and caps applied: what `run` and `start` get. */
export interface Spec {
  command: string;
  workdir: string;
  timeoutMs: number;
  owner?: string;
}

/** One case of the WIT `executor-error` variant. */
export declare class ExecutorError extends Error {
  constructor(
    tag: "invalid-request" | "workdir-unusable" | "spawn-failed" | "unknown-task" | "task-limit" | "aborted" | "internal",
    message?: string,
  );
  readonly tag: string;
  readonly detail: string | undefined;
}

/** The executor contract on this machine's processes (see the README for its differences). */
export declare class LocalExecutor implements Executor {
  constructor(settings?: ExecutorSettings);
  currentLimits(): Limits;
  resolve(request: { command: string; workdir?: string; timeoutMs?: number; owner?: string }): {
    command: string;
    workdir: string;
    timeoutMs: number;
    owner?: string;
  };
  run(spec: { command: string; workdir: string; timeoutMs: number; owner?: string }, options?: { signal?: AbortSignal }): Promise<unknown>;
  start(spec: { command: string; workdir: string; timeoutMs: number; owner?: string }): Task;
  readOutput(id: string): unknown;
  kill(id: string): boolean;
  ownerOf(id: string): string | undefined;
  get(id: string): Task;
  listTasks(): Task[];
  onTaskDone: ((task: Task) => void) | null;
  shutdown(): Promise<void>;
  stopOwned(owner: string): Promise<void>;
  readonly kind: "local";
  describe(): ExecutorDescription;
}

/** Which executor runs the commands, and what it lacks against dsh-host's own. */
export interface ExecutorDescription {
  /** `"local"` (LocalExecutor), `"served"` (ServedExecutor) or `"custom"`. */
  kind: string;
  /** The far side's name and version, for a served one. */
  server?: string | null;
  /** The `dsh-host` serving a served one (`null` when it was given as a `command`). */
  binary?: string | null;
  /** Where that `dsh-host` came from (`null` when it was given as a `command`). */
  binarySource?: DshHostSource | null;
  /** What dsh-host's executor does that this one does not; `null` when unknown (custom). */
  lacks: string[] | null;
}

/**
 * Where a `dsh-host` came from: `"env"` (`DSH_HOST`), `"package"` (this platform's package,
 * `platformPackage()`), `"path"` (found on `PATH`), or `"argument"` (given as `dshHost`).
 */
export type DshHostSource = "env" | "package" | "path" | "argument";

/**
 * The executor `new Tools()` uses: a ServedExecutor when dsh-host is there (`DSH_HOST`, else this
 * platform's package, else on `PATH`: `locateDshHost()`), else a LocalExecutor.
 */
export declare function defaultExecutor(): Executor;

/** The protocol version of `dsh-host executor serve` this package speaks. */
export declare const PROTOCOL_VERSION: number;

/** `dsh-host` on `PATH` (or the given search path), or `undefined`. */
export declare function findDshHost(path?: string): string | undefined;

/**
 * The package carrying `dsh-host` as `bin/dsh-host` for a platform and architecture (by default
 * this process's), such as `@dsh-tools/dsh-host-linux-x64`, or `undefined` for one without.
 */
export declare function platformPackage(platform?: string, arch?: string): string | undefined;

/** The executable `dsh-host` of this platform's package when it is installed, or `undefined`. */
export declare function packagedDshHost(): string | undefined;

/**
 * The `dsh-host` the executor is served with by default and where it came from: `DSH_HOST`, else
 * this platform's package, else `PATH`; `undefined` when there is none.
 */
export declare function locateDshHost(env?: NodeJS.ProcessEnv): { path: string; source: "env" | "package" | "path" } | undefined;

/**
 * The executor of `dsh-host executor serve --stdio`: the Rust executor (containment, spill files,
 * sandbox) behind the same functions, each answering with a promise. Made with `start()`.
 */
export declare class ServedExecutor implements Executor {
  constructor(options?: { command?: string[]; dshHost?: string; env?: NodeJS.ProcessEnv });
  /** Settles once the far side said hello; rejected (naming both versions) on a mismatch. */
  readonly ready: Promise<void>;
  describe(): ExecutorDescription;
  /**
   * Starts the far side (`command`, by default `dshHost executor serve --stdio`, `dshHost` from
   * `locateDshHost()`: `DSH_HOST`, this platform's package or `PATH`) and says hello; rejects on
   * a protocol version mismatch, naming both.
   */
  static start(options?: { command?: string[]; dshHost?: string; env?: NodeJS.ProcessEnv }): Promise<ServedExecutor>;
  /** `"served"`. */
  readonly kind: "served";
  /** The `dsh-host` serving the executor (`null` when a `command` was given). */
  readonly binary: string | null;
  /** Where `binary` came from (`null` when a `command` was given). */
  readonly binarySource: DshHostSource | null;
  /** What the far side said in `hello`: its name, session and limits. */
  readonly welcome: { protocol: number; server: string; session: string; limits: unknown; remembered_requests: number };
  currentLimits(): Limits | Promise<Limits>;
  resolve(request: { command: string; workdir?: string; timeoutMs?: number; owner?: string }): Promise<Spec>;
  run(spec: Spec, options?: { signal?: AbortSignal }): Promise<unknown>;
  start(spec: Spec): Promise<Task>;
  readOutput(id: string): Promise<unknown>;
  kill(id: string): Promise<boolean>;
  ownerOf(id: string): Promise<string | undefined>;
  get(id: string): Promise<Task>;
  listTasks(): Promise<Task[]>;
  onTaskDone: ((task: Task) => void) | null;
  shutdown(): Promise<void>;
  stopOwned(owner: string): Promise<void>;
  /** Ends the connection (the far side kills what still runs) and waits for it to exit. */
  close(): Promise<void>;
}

/** A tools component other than the bundled one, transpiled and checked. */
export declare class PreparedComponent {
  private constructor();
  /** The interfaces it imports (unversioned, as jco reports them). */
  readonly imports: string[];
  /** Whether it imports `dsh:bash/approval` (composed with the policy middleware). */
  readonly importsApproval: boolean;
  bytes(): Uint8Array;
}

/** The interfaces the host links (`approval` only for a component that imports it). */
export declare const LINKED: readonly ["dsh:bash/bash-executor", "dsh:bash/agent", "dsh:bash/approval"];
export declare const WIT_VERSION: string;

/**
 * Loads another tools component (a path or its bytes); needs @bytecodealliance/jco installed.
 * Rejects one that imports anything but the `dsh:bash` interfaces of `LINKED`, naming the import.
 */
export declare function loadComponent(source: string | Uint8Array): Promise<PreparedComponent>;

/** A policy file given by its text; `name` is what refusals and errors cite (`p.toml:4`). */
export interface PolicyFile {
  name: string;
  /** TOML, or JSON when `name` ends in `.json`. */
  text: string;
}

/** What the `approve` callback is asked about a command that needs approval. */
export interface ApprovalQuestion {
  /** The session's owner token; `null` for a call without a session. */
  owner: string | null;
  /** The whole command, every line of it. */
  command: string;
  /** Where it would run. */
  cwd: string;
  /** The parts of it that need approval. */
  parts: string[];
  /** The rule that asked, as written; `null` for the default or a part that cannot be analysed. */
  rule: string | null;
  /** Where that rule or default is set: `FILE:LINE`. */
  source: string | null;
  /** Why the part cannot be analysed, if that is why. */
  construct: string | null;
  /** The rule "session" grants for the rest of the session; `null` when only "once" can be given. */
  sessionRule: string | null;
}

/** Run it this once, run it and grant the session rule, or refuse. Anything else refuses. */
export type ApprovalAnswer = "once" | "session" | "decline";

export interface ToolsOptions {
  /** Default: `defaultExecutor()`, dsh-host's executor when it is installed, else a LocalExecutor. */
  executor?: Executor;
  /** Default: the bundled component. */
  component?: PreparedComponent;
  /**
   * Permission rules: policy file paths (read at construction) or `{ name, text }`, in order.
   * Needs a component composed with the policy middleware (one importing `dsh:bash/approval`);
   * files that do not load throw at construction, naming the file and line.
   */
  policy?: (string | PolicyFile)[];
  /**
   * Asked about each command that needs approval; a throw, a rejection or another answer
   * declines. Without it, such a command is refused as nobody can be asked.
   */
  approve?: (question: ApprovalQuestion) => ApprovalAnswer | Promise<ApprovalAnswer>;
  /** How long `approve` is given (ms, a whole number); default 50000. */
  approveTimeoutMs?: number;
}

export interface SessionOptions {
  /** The session's working directory, absolute: relative `workdir`s resolve against it. */
  cwd?: string;
  /** Receives each completion notice (they are also kept for `takeNotices()`). */
  onNotice?: (notice: Notice) => void;
}

export interface CallOptions {
  /** Aborts the call's foreground command: it is stopped and the result says so. */
  signal?: AbortSignal;
}

/** One agent session: its own owner token (so its own tasks), working directory and notices. */
export declare class Session {
  private constructor();
  readonly owner: string;
  readonly cwd: string | undefined;
  /** Runs one tool call (arguments as an object or its JSON text) in this session. */
  call(name: string, args?: unknown, options?: CallOptions): Promise<ToolResult>;
  /** The notices not taken yet, oldest first; empties the list. */
  takeNotices(): Notice[];
  /** The rules `approve` granted "for this session" so far; none once the session is closed. */
  grants(): string[];
  /** Stops the session's running tasks and waits for them to end. */
  close(): Promise<void>;
}

/** The bash tools: the bundled component (or another) linked to an executor. */
export declare class Tools {
  constructor(options?: ToolsOptions);
  readonly executor: Executor;
  /** Messages the host could not act on (a notice that was not delivered). */
  readonly log: string[];
  /** Which executor runs the commands and what it lacks against dsh-host's own. */
  doctor(): ExecutorDescription;
  /** The tool definitions as `dsh-host tools --format FORMAT` prints them. */
  definitions<F extends DefinitionsFormat = "mcp">(format?: F): DefinitionsByFormat[F];
  /** The component's instructions for the model, when the component exports them. */
  instructions(): string | undefined;
  session(options?: SessionOptions): Session;
  /** Runs one tool call; without a session it has no owner and no session cwd. */
  call(name: string, args?: unknown, session?: Session, options?: CallOptions): Promise<ToolResult>;
  /** Stops every running task and waits for them; no notices after this. */
  close(): Promise<void>;
}
