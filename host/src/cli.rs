//! The `dsh-host` command line: `tools`, `call` and `mcp`, with the executor's settings as flags.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use dsh_executor::pool::PoolOptions;
use dsh_executor::service::ServeOptions;
use dsh_executor::{
    Config, Containment, ContainmentPreference, EnvPolicy, Executor, LocalExecutor, NetworkMode,
    RemoteExecutor, Sandbox, SandboxConfig, SandboxMode, TierPreference,
};
use tokio_util::sync::CancellationToken;

use crate::{ComponentSource, HostOptions, ToolDefinition, ToolHost};

// clap turns the doc comments of this type, of `Command` and of `CommonArgs` into this command's
// `about` and `long_about`; the explicit ones below are applied last, so `--help` shows `about`.
/// The `dsh-host` command line.
#[derive(Debug, Parser)]
#[command(
    name = "dsh-host",
    version,
    // The last value of a flag wins, so the command line overrides a `--config` file's.
    args_override_self = true,
    about = "Runs the bash tools component with a native process executor",
    long_about = None
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// The settings every subcommand shares.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the tool definitions as JSON.
    Tools {
        /// The shape of the definitions.
        #[arg(long, value_enum, default_value_t = Format::Mcp)]
        format: Format,
    },
    /// Run one tool call in a fresh session and print the result text.
    Call {
        /// Tool name: bash, bash_output or bash_kill.
        tool: String,
        /// The arguments as a JSON object.
        #[arg(default_value = "{}")]
        args: String,
        /// Print {"text":…,"isError":…} instead of the text.
        #[arg(long)]
        json: bool,
    },
    /// Serve the tools over MCP on stdin/stdout.
    Mcp {
        /// Tool calls one session may have in flight at once; one more is answered at once with
        /// an error naming this limit.
        #[arg(long, value_name = "N", default_value_t = crate::mcp::DEFAULT_MAX_CALLS_IN_FLIGHT, value_parser = call_limit)]
        max_calls_in_flight: usize,
        /// Tool calls in flight in all sessions together (at most the default); one more is
        /// answered at once with an error naming this limit.
        #[arg(long, value_name = "N", default_value_t = crate::mcp::MAX_CALLS_TOTAL, value_parser = calls_total)]
        max_calls_total: usize,
        /// How often a call whose request carries a progressToken reports progress (clients
        /// that reset their request timeout on progress then wait for long commands).
        #[arg(long, value_name = "MS", default_value_t = 10000.0, allow_negative_numbers = true, value_parser = progress_ms)]
        progress_interval_ms: f64,
        /// Serving over HTTP instead of stdio.
        #[command(flatten)]
        http: HttpArgs,
    },
    /// Report how this machine contains commands and where the host keeps its files; with
    /// --executor nats://URL, the pool's live nodes instead (exit 1 when none is).
    Doctor,
    /// The executor on its own, for other hosts (`--executor-command`).
    Executor {
        /// What to do with it.
        #[command(subcommand)]
        command: ExecutorCommand,
    },
}

/// `dsh-host executor …`.
#[derive(Debug, Subcommand)]
pub enum ExecutorCommand {
    /// Serve this machine's executor (with the executor flags given: limits, containment,
    /// sandbox, permission rules) to one client over the executor protocol
    /// (docs/executor-protocol.md). Ends when its input ends, killing the tasks still running;
    /// with --reconnect-grace-ms, a lost connection leaves the session running that long for a
    /// new connection (the same command, whose hello names the session) to take it over.
    #[command(group(clap::ArgGroup::new("transport").required(true).args(["stdio", "nats"])))]
    Serve {
        /// Speak the protocol on stdin and stdout, to one client.
        #[arg(long)]
        stdio: bool,
        /// Join the pool of executor nodes on the NATS servers at URL (`nats://host:4222`, a
        /// comma-separated list for a cluster): serve the sessions placed on this node
        /// (docs/pool.md).
        #[arg(long, value_name = "URL", conflicts_with = "reconnect_grace_ms")]
        nats: Option<String>,
        /// This node's id in the pool (letters, digits, '-', '_'); the host name by default.
        #[arg(long, value_name = "ID", requires = "nats")]
        node_id: Option<String>,
        /// How long the session (its running tasks, answers and events) waits for a new
        /// connection once its connection is lost, in milliseconds; past it, the tasks are
        /// killed. 0 (the default): a lost connection ends the session at once.
        #[arg(long, value_name = "MS", default_value_t = 0.0, allow_negative_numbers = true, value_parser = grace_ms)]
        reconnect_grace_ms: f64,
    },
}

/// `dsh-host mcp --http`: MCP over streamable HTTP, one dsh session per MCP session.
#[derive(Debug, Clone, Args)]
pub struct HttpArgs {
    /// Serve MCP streamable HTTP at ADDR (IP:PORT, localhost:PORT, or PORT on 127.0.0.1; port 0
    /// picks a free one) instead of stdio, with one dsh session per MCP session. The endpoint
    /// is /mcp; the address is printed on stderr.
    #[arg(long, value_name = "ADDR", value_parser = crate::mcp::http_listen_addr)]
    pub http: Option<std::net::SocketAddr>,
    /// Read the bearer token every request must carry from FILE (keep it mode 0600). Without
    /// this, --http-token or DSH_HTTP_TOKEN, a random token is written to a new file whose path
    /// is printed.
    #[arg(
        long,
        value_name = "FILE",
        requires = "http",
        conflicts_with = "http_token"
    )]
    pub http_token_file: Option<PathBuf>,
    /// The bearer token itself. Other users can read it in the process list: prefer
    /// --http-token-file or DSH_HTTP_TOKEN.
    #[arg(long, value_name = "TOKEN", requires = "http")]
    pub http_token: Option<String>,
    /// Also accept requests whose Origin is ORIGIN (scheme://host[:port]); loopback origins and
    /// requests without Origin always pass. Repeatable.
    // This doc comment is the flag's `--help` text, so `[:port]` stays as the terminal shows it.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long = "http-allow-origin", value_name = "ORIGIN", requires = "http", value_parser = crate::mcp::http_origin)]
    pub http_allow_origin: Vec<String>,
    /// MCP sessions open at once; one more initialize is refused.
    #[arg(long, value_name = "N", requires = "http", allow_negative_numbers = true, value_parser = call_limit, default_value_t = crate::mcp::DEFAULT_MAX_SESSIONS)]
    pub http_max_sessions: usize,
    /// Close a session idle this long (no message either way: 30 min by default) and kill its
    /// tasks.
    #[arg(long, value_name = "MS", requires = "http", allow_negative_numbers = true, value_parser = positive_ms, default_value_t = crate::mcp::DEFAULT_SESSION_IDLE.as_secs_f64() * 1000.0)]
    pub http_session_idle_ms: f64,
    /// HTTP connections open at once (fewer when the descriptor limit leaves less room). At the
    /// limit the oldest unauthenticated connection is closed to make room; when every one is
    /// authenticated, a new one gets 503.
    #[arg(long, value_name = "N", requires = "http", allow_negative_numbers = true, value_parser = call_limit, default_value_t = crate::mcp::DEFAULT_HTTP_MAX_CONNECTIONS)]
    pub http_max_connections: usize,
    /// Connections open at once on which no request has carried the token yet; one more closes
    /// the oldest of them.
    #[arg(long, value_name = "N", requires = "http", allow_negative_numbers = true, value_parser = call_limit, default_value_t = crate::mcp::DEFAULT_HTTP_MAX_UNAUTHENTICATED)]
    pub http_max_unauthenticated: usize,
    /// How long a client may take to send a request's headers; a keep-alive connection idle
    /// this long is closed too.
    #[arg(long, value_name = "MS", requires = "http", allow_negative_numbers = true, value_parser = positive_ms, default_value_t = crate::mcp::DEFAULT_HTTP_HEADER_TIMEOUT.as_secs_f64() * 1000.0)]
    pub http_header_timeout_ms: f64,
    /// How long a client may take to send a request's body (413 beyond 16 MiB, 408 beyond
    /// this time).
    #[arg(long, value_name = "MS", requires = "http", allow_negative_numbers = true, value_parser = positive_ms, default_value_t = crate::mcp::DEFAULT_HTTP_BODY_TIMEOUT.as_secs_f64() * 1000.0)]
    pub http_body_timeout_ms: f64,
}

impl HttpArgs {
    /// The HTTP server's settings, when `--http` is given.
    pub fn options(&self, session: crate::mcp::McpOptions) -> Option<crate::mcp::HttpOptions> {
        let addr = self.http?;
        let mut options = crate::mcp::HttpOptions::new(addr);
        options.token = match (&self.http_token, &self.http_token_file) {
            (Some(token), _) => crate::mcp::TokenSource::Value(token.clone()),
            (None, Some(file)) => crate::mcp::TokenSource::File(file.clone()),
            (None, None) => match std::env::var(crate::mcp::HTTP_TOKEN_ENV) {
                Ok(token) if !token.is_empty() => crate::mcp::TokenSource::Value(token),
                _ => crate::mcp::TokenSource::Generate,
            },
        };
        options.allowed_origins = self.http_allow_origin.clone();
        options.max_sessions = self.http_max_sessions;
        options.session_idle = http_duration(self.http_session_idle_ms);
        options.max_connections = self.http_max_connections;
        options.max_unauthenticated = self.http_max_unauthenticated;
        options.header_timeout = http_duration(self.http_header_timeout_ms);
        options.body_timeout = http_duration(self.http_body_timeout_ms);
        options.session = session;
        Some(options)
    }
}

/// An HTTP flag's milliseconds as a duration: a year at most, which any f64 converts to and
/// any deadline can add (the timers would overflow on the largest ones).
fn http_duration(ms: f64) -> Duration {
    const YEAR_MS: f64 = 365.0 * 86_400_000.0;
    Duration::from_secs_f64(ms.min(YEAR_MS) / 1000.0)
}

/// `dsh-host tools --format`: the shape of the tool definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// MCP `tools/list` entries: name, title, description, inputSchema, annotations.
    Mcp,
    /// OpenAI function tools: {type:"function", function:{name, description, parameters}}.
    Openai,
    /// Anthropic tools: name, description, input_schema.
    Anthropic,
}

/// `--containment`: how command trees are contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ContainmentArg {
    /// A cgroup per command where the host may create one, else subreaper tracking.
    Auto,
    /// Subreaper tracking only.
    Subreaper,
}

/// `--sandbox`: how much of the filesystem a command may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxArg {
    /// No sandbox: commands have the host's full authority.
    Off,
    /// Nothing writable but a private TMPDIR and devices like /dev/null.
    ReadOnly,
    /// Also the --cwd tree (else the host's cwd), /tmp and each --sandbox-allow-write.
    WorkspaceWrite,
}

/// `--sandbox-network`: what a sandboxed command may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxNetworkArg {
    /// No network at all.
    Off,
    /// A loopback interface of its own (its own local servers), nothing else.
    Loopback,
    /// The host's network.
    On,
}

/// `--sandbox-tier`: which enforcement the sandbox may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxTierArg {
    /// Namespaces where the machine allows them, else Landlock and seccomp only.
    Auto,
    /// Require user, mount and network namespaces.
    Namespaces,
    /// Landlock and seccomp only.
    Landlock,
}

/// The executor's and the component's settings, shared by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// A tools component to load instead of the embedded one.
    #[arg(long, global = true, value_name = "FILE")]
    pub component: Option<PathBuf>,
    /// The session's working directory; relative workdirs resolve against it.
    #[arg(long, global = true, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Default timeout of a foreground command.
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "MS", value_parser = positive_ms)]
    pub timeout_ms: Option<f64>,
    /// Largest timeout a call may ask for.
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "MS", value_parser = positive_ms)]
    pub max_timeout_ms: Option<f64>,
    /// Bytes of each stream kept in memory (the tail).
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "BYTES", value_parser = positive_u64)]
    pub max_output_bytes: Option<u64>,
    /// Time between SIGTERM and SIGKILL, and the pipe drain bound after the leader exits.
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "MS", value_parser = positive_ms)]
    pub grace_ms: Option<f64>,
    /// Where spill files go (a per-process directory is created inside).
    #[arg(long, global = true, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Cap of one spill file.
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "BYTES", value_parser = positive_u64)]
    pub max_spill_bytes: Option<u64>,
    /// Total bytes all spill files may hold together; past it, the oldest finished spill files
    /// of the session holding most are deleted first (a file that still cannot fit is withdrawn
    /// like a capped one) [default: 1 GiB].
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "BYTES", value_parser = positive_u64)]
    pub max_spill_total_bytes: Option<u64>,
    /// Bytes one session's spill files may hold together; past it, that session's oldest
    /// finished spill files are deleted first, never another session's; set it below
    /// --max-spill-total-bytes on a server shared by sessions [default: 1 GiB, the total].
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "BYTES", value_parser = positive_u64)]
    pub max_session_spill_bytes: Option<u64>,
    /// Keep spill files when the host exits (they are removed on a clean shutdown otherwise).
    #[arg(long, global = true)]
    pub keep_spill: bool,
    /// How command trees are contained: a cgroup per command where possible, or subreaper
    /// process tracking only.
    #[arg(long, global = true, value_enum, default_value_t = ContainmentArg::Auto)]
    pub containment: ContainmentArg,
    /// Background tasks allowed to run at once, in all sessions together [default: 64].
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "N", value_parser = positive_usize)]
    pub max_tasks: Option<usize>,
    /// Background tasks one session may have running at once; set it below --max-tasks on a
    /// server shared by sessions [default: 64, the total].
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "N", value_parser = positive_usize)]
    pub max_session_tasks: Option<usize>,
    /// Finished background tasks kept for bash_output, in all sessions together; past it, the
    /// oldest of the session keeping most is forgotten [default: 1024].
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "N", value_parser = positive_usize)]
    pub max_finished_tasks: Option<usize>,
    /// Finished background tasks kept per session; past it, that session's oldest is
    /// forgotten, never another session's [default: 1024, the total].
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "N", value_parser = positive_usize)]
    pub max_session_finished_tasks: Option<usize>,
    /// Off by default. A foreground command still running after MS continues as a background
    /// task: the call returns its output so far and a line naming the task (read it with
    /// bash_output). For clients that give up on a request after a fixed time. When
    /// --max-tasks tasks already run, the command stays in the foreground until its timeout.
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "MS", value_parser = positive_ms)]
    pub yield_after_ms: Option<f64>,
    /// The longest command accepted, in bytes (default 1 MiB, at most 64 MiB); a longer one is
    /// refused with an error naming this flag, and nothing runs.
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "BYTES", value_parser = positive_u64)]
    pub max_command_bytes: Option<u64>,
    /// Also withhold from commands the variables whose names match PATTERN (`*` matches any run
    /// of characters; any case), besides names holding KEY, SECRET, TOKEN or PASSWORD.
    /// Repeatable.
    #[arg(long = "env-deny", global = true, value_name = "PATTERN", value_parser = env_name)]
    pub env_deny: Vec<String>,
    /// Pass the variable NAME to commands even where a word or pattern would withhold it.
    /// Repeatable.
    #[arg(long = "env-allow", global = true, value_name = "NAME", value_parser = env_name)]
    pub env_allow: Vec<String>,
    /// Permission rules every command must pass before it runs (TOML `[permissions]`, or a
    /// JSON settings file with `permissions`); see docs/permissions.md. A file
    /// that does not read stops the host, naming its line. Repeatable: all rules apply.
    #[arg(long = "policy", global = true, value_name = "FILE")]
    pub policy: Vec<PathBuf>,
    /// How long a person is given to answer a permission question (MCP elicitation) before
    /// the command is refused as not approved in time (default 50000: below the 60 s after
    /// which common clients give up on a request).
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "MS", value_parser = positive_ms)]
    pub policy_ask_timeout_ms: Option<f64>,
    /// Confine every command (enforced by the kernel; the host refuses to start where it
    /// cannot be): `read-only` or `workspace-write`. Secrets (~/.ssh, ~/.aws, ...) are never
    /// readable; see docs/sandbox.md.
    #[arg(long, global = true, value_enum, default_value_t = SandboxArg::Off)]
    pub sandbox: SandboxArg,
    /// What a sandboxed command may reach on the network.
    #[arg(long, global = true, value_enum, default_value_t = SandboxNetworkArg::Off)]
    pub sandbox_network: SandboxNetworkArg,
    /// Another directory a workspace-write sandbox lets commands write. Repeatable.
    #[arg(long = "sandbox-allow-write", global = true, value_name = "DIR")]
    pub sandbox_allow_write: Vec<PathBuf>,
    /// Another path (absolute) no sandboxed command may read. Repeatable.
    #[arg(long = "sandbox-deny-read", global = true, value_name = "PATH")]
    pub sandbox_deny_read: Vec<PathBuf>,
    /// A host sandboxed commands may reach through the host's HTTP proxy (a name, `*.` and a
    /// domain for every name beneath it, or an address); nothing else beyond each command's own
    /// loopback is reachable. Needs the namespace tier. Repeatable.
    #[arg(long = "sandbox-allow-net", global = true, value_name = "HOST")]
    pub sandbox_allow_net: Vec<String>,
    /// Which enforcement the sandbox uses.
    #[arg(long, global = true, value_enum, default_value_t = SandboxTierArg::Auto)]
    pub sandbox_tier: SandboxTierArg,
    /// Run commands through the executor service this command starts (`sh -c CMD`), e.g.
    /// `ssh build-box dsh-host executor serve --stdio`, instead of on this machine. The
    /// executor's flags (limits, containment, sandbox, spill) then belong on CMD's command line;
    /// --policy still applies here.
    #[arg(long, global = true, value_name = "CMD")]
    pub executor_command: Option<String>,
    /// Run commands on the pool of executor nodes on the NATS servers at URL
    /// (`nats://host:4222`, a comma-separated list for a cluster) instead of on this machine:
    /// each session is placed on one node (docs/pool.md). The executor's flags belong on the
    /// nodes' command lines; --policy still applies here.
    #[arg(
        long,
        global = true,
        value_name = "nats://URL",
        conflicts_with = "executor_command"
    )]
    pub executor: Option<String>,
    /// A NATS credentials file (JWT and seed) for the pool's servers.
    #[arg(long, global = true, value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// PEM root certificates to trust for the pool's servers (`tls://…`) instead of the
    /// system's. Any --nats-tls-… flag makes TLS required.
    #[arg(long, global = true, value_name = "FILE")]
    pub nats_tls_ca: Option<PathBuf>,
    /// A PEM client certificate for pool servers that verify their clients (with
    /// --nats-tls-key).
    #[arg(long, global = true, value_name = "FILE", requires = "nats_tls_key")]
    pub nats_tls_cert: Option<PathBuf>,
    /// The PEM private key of --nats-tls-cert.
    #[arg(long, global = true, value_name = "FILE", requires = "nats_tls_cert")]
    pub nats_tls_key: Option<PathBuf>,
    /// How often a pool node writes its heartbeat, in milliseconds (every node and front of a
    /// pool uses the same).
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "MS", value_parser = positive_ms)]
    pub nats_heartbeat_ms: Option<f64>,
    /// How long a pool node is live after its last heartbeat, in milliseconds; a node that
    /// could not renew its heartbeat for this long kills its tasks and ends.
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "MS", value_parser = positive_ms)]
    pub nats_lease_ms: Option<f64>,
    /// Copies the pool's key-value buckets keep (at most the cluster's servers).
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=5))]
    pub nats_replicas: Option<u64>,
    /// The first token of the pool's subjects and bucket names.
    #[arg(long, global = true, value_name = "NAME")]
    pub nats_prefix: Option<String>,
    /// How long a pool node keeps a session no front holds any more (a front that went away),
    /// in milliseconds; past it, the session's commands are killed.
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "MS", value_parser = positive_ms)]
    pub nats_session_grace_ms: Option<f64>,
    /// How long a pool front waits for a node's answer to a call that starts no command (and
    /// to a placement) before it asks again, in milliseconds.
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "MS", value_parser = positive_ms)]
    pub nats_request_timeout_ms: Option<f64>,
    /// A pool node that lets this many calls of a front in a row go unanswered is dead to that
    /// front, whatever its heartbeat says.
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub nats_dead_after_timeouts: Option<u32>,
    /// Read these settings from a TOML file: each key is one of these flags, or of `mcp`'s,
    /// without its dashes (`timeout-ms = 120000`, `env-deny = ["*_PAT"]`, `http = "8765"`).
    /// Flags on the command line win; repeatable ones add to the file's.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

fn positive_ms(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of milliseconds, got {s:?}"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("expected a finite number > 0, got {s}"))
    }
}

/// A reconnect grace: 0 (none) up to a day.
fn grace_ms(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of milliseconds, got {s:?}"))?;
    if v.is_finite() && (0.0..=86_400_000.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("expected 0 to 86400000 (a day), got {s}"))
    }
}

/// A limit on calls in flight: at least one; beyond 2^20 it would be no limit.
fn call_limit(s: &str) -> Result<usize, String> {
    match positive_u64(s)? {
        n @ 1..=1_048_576 => Ok(n as usize),
        n => Err(format!("expected at most 1048576, got {n}")),
    }
}

/// The server-wide limit on calls in flight: at most what the host runs at once.
fn calls_total(s: &str) -> Result<usize, String> {
    let n = usize::try_from(positive_u64(s)?).unwrap_or(usize::MAX);
    crate::mcp::CallsTotal::new(n).map(|_| n)
}

/// A progress interval: at least 10 ms, so that reports cannot flood the client.
fn progress_ms(s: &str) -> Result<f64, String> {
    match positive_ms(s)? {
        ms if ms >= 10.0 => Ok(ms),
        ms => Err(format!("expected at least 10 ms, got {ms}")),
    }
}

fn positive_u64(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("expected a whole number > 0, got 0".into()),
        Ok(v) => Ok(v),
        Err(_) => Err(format!("expected a whole number > 0, got {s:?}")),
    }
}

/// A variable name or name pattern: not empty, without `=` or NUL.
fn env_name(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Err("expected a variable name, got nothing".to_string())
    } else if s.contains(['=', '\0']) {
        Err(format!("{s:?} is no variable name: it holds '=' or NUL"))
    } else {
        Ok(s.to_string())
    }
}

fn positive_usize(s: &str) -> Result<usize, String> {
    positive_u64(s).and_then(|v| usize::try_from(v).map_err(|_| format!("{v} is too large")))
}

impl CommonArgs {
    /// The executor configuration these flags describe.
    pub fn executor_config(&self) -> Config {
        let mut c = Config::default();
        if let Some(v) = self.timeout_ms {
            c.default_timeout_ms = v;
        }
        if let Some(v) = self.max_timeout_ms {
            c.max_timeout_ms = v;
        }
        if let Some(v) = self.max_output_bytes {
            c.max_output_bytes = v;
        }
        if let Some(v) = self.grace_ms {
            c.grace_ms = v;
        }
        if let Some(v) = &self.spill_dir {
            c.spill_dir = Some(v.clone());
        }
        if let Some(v) = self.max_spill_bytes {
            c.max_spill_bytes = v;
        }
        if let Some(v) = self.max_spill_total_bytes {
            c.max_spill_total_bytes = v;
        }
        if let Some(v) = self.max_session_spill_bytes {
            c.max_session_spill_bytes = v;
        }
        if let Some(v) = self.max_tasks {
            c.max_tasks = v;
        }
        if let Some(v) = self.max_session_tasks {
            c.max_session_tasks = v;
        }
        if let Some(v) = self.max_finished_tasks {
            c.max_finished_tasks = v;
        }
        if let Some(v) = self.max_session_finished_tasks {
            c.max_session_finished_tasks = v;
        }
        if let Some(v) = self.max_command_bytes {
            c.max_command_bytes = v;
        }
        c.yield_after_ms = self.yield_after_ms;
        c.cwd = self.cwd.clone();
        c.keep_spill = self.keep_spill;
        c.env = EnvPolicy {
            deny: self.env_deny.clone(),
            allow: self.env_allow.clone(),
        };
        c.containment = match self.containment {
            ContainmentArg::Auto => ContainmentPreference::Auto,
            ContainmentArg::Subreaper => ContainmentPreference::Subreaper,
        };
        c.sandbox = self.sandbox_config();
        c
    }

    /// With `--executor-command`, the executor's flags would configure nothing here: refuse them
    /// rather than let them look applied. (`--cwd` stays: it is the session's directory.)
    fn check_no_executor_flags(&self, flag: &str) -> Result<(), CliError> {
        let mut bare = self.clone();
        bare.cwd = None;
        bare.config = None;
        if bare.executor_config() != Config::default() {
            return Err(CliError::Usage(format!(
                "--{flag}: the executor's flags (limits, containment, sandbox, spill, \
                 environment) configure the executor on the far side: put them on its command \
                 line (`dsh-host executor serve --timeout-ms …`)"
            )));
        }
        Ok(())
    }

    /// The pool the `--nats-…` flags describe, on the servers at `urls`.
    fn pool_options(&self, flag: &str, urls: &str) -> Result<PoolOptions, CliError> {
        let urls = PoolOptions::urls_from(urls);
        if urls.is_empty()
            || !urls
                .iter()
                .all(|u| u.starts_with("nats://") || u.starts_with("tls://"))
        {
            return Err(CliError::Usage(format!(
                "--{flag}: expected nats://host:port (or tls://…), comma-separated for a cluster"
            )));
        }
        let mut options = PoolOptions {
            urls,
            creds: self.nats_creds.clone(),
            tls_ca: self.nats_tls_ca.clone(),
            tls_cert: self.nats_tls_cert.clone(),
            tls_key: self.nats_tls_key.clone(),
            ..PoolOptions::default()
        };
        options.check_tls().map_err(CliError::Usage)?;
        if let Some(ms) = self.nats_heartbeat_ms {
            options.heartbeat = Duration::from_secs_f64(ms.min(3_600_000.0) / 1000.0);
        }
        if let Some(ms) = self.nats_lease_ms {
            options.lease = Duration::from_secs_f64(ms.min(86_400_000.0) / 1000.0);
        }
        if options.lease <= options.heartbeat {
            return Err(CliError::Usage(format!(
                "--nats-lease-ms: the lease ({:?}) must be longer than the heartbeat interval ({:?})",
                options.lease, options.heartbeat
            )));
        }
        if let Some(ms) = self.nats_session_grace_ms {
            options.session_grace = Duration::from_secs_f64(ms.min(86_400_000.0) / 1000.0);
        }
        if let Some(ms) = self.nats_request_timeout_ms {
            options.request_timeout = Duration::from_secs_f64(ms.min(3_600_000.0) / 1000.0);
        }
        if let Some(n) = self.nats_dead_after_timeouts {
            options.dead_after_timeouts = n;
        }
        if let Some(n) = self.nats_replicas {
            options.replicas = n as usize;
        }
        if let Some(prefix) = &self.nats_prefix {
            if !dsh_executor::pool::valid_name(prefix) {
                return Err(CliError::Usage(format!(
                    "--nats-prefix {prefix:?}: expected letters, digits, '-' and '_'"
                )));
            }
            options.prefix = prefix.clone();
        }
        Ok(options)
    }

    /// The sandbox these flags ask for; the configuration file is among the denied reads.
    fn sandbox_config(&self) -> SandboxConfig {
        let mut deny_read = self.sandbox_deny_read.clone();
        // The host's runtime directory as this process finds it (whichever fallback that is):
        // the sessions kept for reconnection have their sockets there.
        let mut hide = Vec::new();
        if self.sandbox != SandboxArg::Off {
            // Absolute, as the sandbox takes its paths (a cache directory may be given
            // relative).
            let runtime = crate::engine::runtime_dir();
            let runtime = std::path::absolute(&runtime).unwrap_or(runtime);
            // Made now if missing, so that the namespace tier hides it from every command: one
            // made later would not be hidden (only denied).
            let _ = crate::engine::open_private_dir(&runtime);
            hide.push(runtime);
        }
        if let Some(file) = &self.config
            && let Ok(file) = std::path::absolute(file)
        {
            deny_read.push(file);
        }
        SandboxConfig {
            mode: match self.sandbox {
                SandboxArg::Off => SandboxMode::Off,
                SandboxArg::ReadOnly => SandboxMode::ReadOnly,
                SandboxArg::WorkspaceWrite => SandboxMode::WorkspaceWrite,
            },
            network: match self.sandbox_network {
                SandboxNetworkArg::Off => NetworkMode::Off,
                SandboxNetworkArg::Loopback => NetworkMode::Loopback,
                SandboxNetworkArg::On => NetworkMode::On,
            },
            allow_write: self.sandbox_allow_write.clone(),
            allow_net: self.sandbox_allow_net.clone(),
            deny_read,
            hide,
            tier: match self.sandbox_tier {
                SandboxTierArg::Auto => TierPreference::Auto,
                SandboxTierArg::Namespaces => TierPreference::Namespaces,
                SandboxTierArg::Landlock => TierPreference::Landlock,
            },
        }
    }

    /// The component to load (`--component`, else the embedded one) and the default cache.
    pub fn host_options(&self) -> HostOptions {
        let mut options = HostOptions::new();
        if let Some(path) = &self.component {
            options.component = ComponentSource::File(path.clone());
        }
        options
    }

    /// The session cwd, made absolute so that relative workdirs resolve predictably.
    pub fn session_cwd(&self) -> Result<Option<String>, CliError> {
        let Some(dir) = &self.cwd else {
            return Ok(None);
        };
        let abs = std::path::absolute(dir)
            .map_err(|e| CliError::Usage(format!("invalid --cwd {}: {e}", dir.display())))?;
        if !abs.is_dir() {
            return Err(CliError::Usage(format!(
                "invalid --cwd {}: not a directory",
                dir.display()
            )));
        }
        Ok(Some(abs.to_string_lossy().into_owned()))
    }
}

/// How the command line failed: a usage error exits 2, anything else 1.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag's value is unusable (for example `--cwd` names no directory).
    #[error("{0}")]
    Usage(String),
    /// The host could not be built or failed while serving.
    #[error(transparent)]
    Host(#[from] anyhow::Error),
}

impl CliError {
    /// The process exit code for this error: 2 for usage, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Host(_) => 1,
        }
    }
}

/// What [`build_host`] builds.
pub struct BuiltHost {
    /// The tools and their executor.
    pub host: ToolHost,
    /// The local executor behind any policy; `None` with `--executor-command`.
    pub local: Option<Arc<LocalExecutor>>,
    /// Where front ends register who to ask, when `--policy` is in force.
    pub approvals: Option<crate::policy::Approvals>,
}

/// Build the host the flags describe: an executor (local, or the far side of
/// `--executor-command`), behind the permission rules if any, and the component.
pub async fn build_host(common: &CommonArgs) -> Result<BuiltHost, CliError> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (executor, local) = match (&common.executor_command, &common.executor) {
        (Some(command), _) => {
            common.check_no_executor_flags("executor-command")?;
            let remote = RemoteExecutor::connect(command, tx).map_err(anyhow::Error::from)?;
            let executor: Arc<dyn Executor> = remote;
            (executor, None)
        }
        (None, Some(urls)) => {
            common.check_no_executor_flags("executor")?;
            let options = common.pool_options("executor", urls)?;
            let pool = dsh_executor::pool::PoolExecutor::connect(options, tx)
                .map_err(|e| anyhow::anyhow!(e))?;
            let executor: Arc<dyn Executor> = pool;
            (executor, None)
        }
        (None, None) => {
            let local = local_executor(common, tx)?;
            let executor: Arc<dyn Executor> = local.clone();
            (executor, Some(local))
        }
    };
    let (executor, policy) = with_policy(common, executor)?;
    let mut options = common.host_options();
    let approvals = policy.map(|(rules, approvals)| {
        // A policy middleware component (`--component`) asks this host, with these rules.
        options.rules = Some(rules);
        approvals
    });
    let host = ToolHost::new(options, executor, rx).await?;
    Ok(BuiltHost {
        host,
        local,
        approvals,
    })
}

/// The local executor the flags describe; `task_done` gets its task-done events.
fn local_executor(
    common: &CommonArgs,
    task_done: tokio::sync::mpsc::UnboundedSender<dsh_executor::Task>,
) -> Result<Arc<LocalExecutor>, CliError> {
    let local = LocalExecutor::new(common.executor_config(), task_done)
        .map_err(|e| CliError::Usage(format!("--{}: {}", e.setting, e.reason)))?;
    tracing::info!(containment = %local.containment(), "process containment");
    Ok(local)
}

/// `executor` behind the `--policy` rules, if any, with the rules and who they ask.
#[allow(clippy::type_complexity)]
fn with_policy(
    common: &CommonArgs,
    executor: Arc<dyn Executor>,
) -> Result<
    (
        Arc<dyn Executor>,
        Option<(crate::policy::Rules, crate::policy::Approvals)>,
    ),
    CliError,
> {
    if common.policy.is_empty() {
        return Ok((executor, None));
    }
    let (policy, sources) =
        crate::policy::load(&common.policy).map_err(|e| CliError::Usage(e.to_string()))?;
    let (default, source) = policy.default_verdict();
    tracing::info!(
        rules = policy.rule_count(),
        skipped_other_tools = policy.skipped(),
        default = default.name(),
        default_source = source,
        "permission rules"
    );
    let approvals = crate::policy::Approvals::default();
    let timeout = common
        .policy_ask_timeout_ms
        .map_or(crate::policy::ASK_TIMEOUT, |ms| {
            // A day at most: longer is no answer anyway, and any f64 converts.
            Duration::from_secs_f64(ms.min(86_400_000.0) / 1000.0)
        });
    let rules = crate::policy::Rules::new(policy, sources, approvals.clone(), timeout);
    let executor = Arc::new(crate::policy::PolicyExecutor::new(executor, rules.clone()));
    Ok((executor, Some((rules, approvals))))
}

/// `dsh-host executor serve --stdio`: this machine's executor, behind the permission rules if
/// any (nobody can be asked through the protocol, so a rule that asks refuses), served on stdin
/// and stdout until stdin ends (or, with a reconnect grace, until no connection came back within
/// it). A connection whose hello names a session of this machine is relayed to that session.
async fn serve_executor(common: &CommonArgs, grace: Duration) -> Result<i32, CliError> {
    use dsh_executor::service::resume;
    if common.executor_command.is_some() {
        return Err(CliError::Usage(
            "--executor-command: `executor serve` serves this machine's executor; run the \
             other one's command directly"
                .to_string(),
        ));
    }
    // Non-blocking pipes where stdin and stdout are pipes (as a client spawns the server):
    // tokio's own stdin and stdout hand every read and write to a blocking thread, a wake-up
    // each way on every message.
    let (mut input, output) = rmcp::transport::stdio_pipes();
    let dir = session_dir();
    let mut seen = Vec::new();
    let contact = resume::first_contact(
        &mut input,
        &mut seen,
        dir.as_ref().ok().map(|d| d.as_path()),
    )
    .await
    .map_err(anyhow::Error::from)?;
    if let resume::FirstContact::Resume(session) = contact {
        resume::relay(seen, input, output, session)
            .await
            .map_err(anyhow::Error::from)?;
        return Ok(0);
    }
    let session_dir = if grace.is_zero() {
        None
    } else {
        let dir = dir.map_err(|err| {
            CliError::Usage(format!(
                "--reconnect-grace-ms: no directory for the session's socket: {err}"
            ))
        })?;
        // The session outlives its connection: a signal to the connection's process group
        // (an ssh session ending) is not its end.
        let _ = rustix::process::setsid();
        release_standard_streams();
        Some(dir)
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let local = local_executor(common, tx)?;
    let (executor, _policy) = with_policy(common, local)?;
    let options = ServeOptions {
        server: format!("dsh-host {}", env!("CARGO_PKG_VERSION")),
        reconnect_grace: grace,
        session_dir,
    };
    let input = tokio::io::AsyncReadExt::chain(std::io::Cursor::new(seen), input);
    dsh_executor::service::serve(executor, rx, input, output, options)
        .await
        .map_err(anyhow::Error::from)?;
    Ok(0)
}

/// Points stdin and stdout at `/dev/null` where the transport reads and writes pipes through
/// descriptors of its own (it reopens them when both are pipes): the connection's pipes are
/// then closed when the connection is, so a client whose connection another one took over sees
/// its end. Elsewhere they stay, and such a client sees its end when the session ends.
fn release_standard_streams() {
    use rustix::fs::{FileType, Mode, OFlags};
    let pipe = |fd: rustix::fd::BorrowedFd<'_>| {
        rustix::fs::fstat(fd).is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Fifo)
    };
    if !(pipe(rustix::stdio::stdin()) && pipe(rustix::stdio::stdout())) {
        return;
    }
    if let Ok(null) = rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()) {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
    }
}

/// `dsh-host executor serve --nats URL`: this machine's executor as a node of the pool, behind
/// the permission rules if any, until SIGTERM or SIGINT (then its tasks are killed and it
/// leaves the pool) or until it lost its lease (an error: its tasks were killed).
async fn serve_node(
    common: &CommonArgs,
    urls: &str,
    node_id: Option<&str>,
) -> Result<i32, CliError> {
    if common.executor_command.is_some() || common.executor.is_some() {
        return Err(CliError::Usage(
            "--executor: `executor serve` serves this machine's executor".to_string(),
        ));
    }
    let pool = common.pool_options("nats", urls)?;
    let node_id = match node_id {
        Some(id) => id.to_string(),
        None => host_name(),
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let local = local_executor(common, tx)?;
    let (executor, _policy) = with_policy(common, local)?;
    let options = dsh_executor::pool::NodeOptions {
        pool,
        node_id,
        server: format!("dsh-host {}", env!("CARGO_PKG_VERSION")),
    };
    let stop = CancellationToken::new();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(anyhow::Error::from)?;
        let mut interrupt = signal(SignalKind::interrupt()).map_err(anyhow::Error::from)?;
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
            stop.cancel();
        });
    }
    dsh_executor::pool::serve_node(executor, rx, options, stop)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(0)
}

/// This machine's name as a node id: its host name, with what a subject token cannot hold
/// replaced by `-`.
fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() {
        "node".to_string()
    } else {
        name
    }
}

/// Where executor sessions kept for reconnection have their sockets: `$XDG_RUNTIME_DIR/dsh-host`
/// (else the cache directory, else a per-user directory in `/var/tmp` or the system temp dir),
/// then `executor-sessions`. Whichever it is, a sandbox denies reading it.
fn session_dir_path() -> PathBuf {
    crate::engine::runtime_dir().join("executor-sessions")
}

/// [`session_dir_path`], made `0700` if missing, when it is private to this user.
fn session_dir() -> Result<PathBuf, String> {
    let dir = session_dir_path();
    crate::engine::open_private_dir(&dir).map_err(|err| err.to_string())?;
    Ok(dir)
}

/// Cancels `abort` on SIGINT. The handler is in place when this returns, before the call starts:
/// on a single-threaded runtime a spawned task would only install it once the call first waits.
fn abort_on_interrupt(abort: CancellationToken) -> Result<tokio::task::JoinHandle<()>, CliError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt()).map_err(anyhow::Error::from)?;
        Ok(tokio::spawn(async move {
            if interrupt.recv().await.is_some() {
                abort.cancel();
            }
        }))
    }
    #[cfg(not(unix))]
    {
        Ok(tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                abort.cancel();
            }
        }))
    }
}

/// Run the command line; returns the process exit code.
pub async fn run(cli: Cli) -> Result<i32, CliError> {
    if let Command::Executor {
        command:
            ExecutorCommand::Serve {
                nats: Some(urls),
                node_id,
                ..
            },
    } = &cli.command
    {
        return serve_node(&cli.common, urls, node_id.as_deref()).await;
    }
    if let Command::Executor {
        command: ExecutorCommand::Serve {
            reconnect_grace_ms, ..
        },
    } = &cli.command
    {
        let grace = Duration::from_secs_f64(reconnect_grace_ms / 1000.0);
        return serve_executor(&cli.common, grace).await;
    }
    if let (Command::Doctor, Some(urls)) = (&cli.command, &cli.common.executor) {
        return pool_doctor(&cli.common, urls).await;
    }
    let cwd = cli.common.session_cwd()?;
    let BuiltHost {
        host,
        local,
        approvals,
    } = build_host(&cli.common).await?;
    let code = match cli.command {
        Command::Tools { format } => {
            let defs = definitions_json(host.tools(), format)?;
            let text = serde_json::to_string_pretty(&defs).map_err(anyhow::Error::from)?;
            print_out(&format!("{text}\n"));
            0
        }
        Command::Call { tool, args, json } => {
            let session = host.open_session(cwd);
            let abort = CancellationToken::new();
            let watcher = abort_on_interrupt(abort.clone())?;
            let result = host.call(&tool, &args, &session.caller(), abort).await;
            watcher.abort();
            if json {
                let out = serde_json::json!({ "text": result.text, "isError": result.is_error });
                print_out(&format!("{out}\n"));
            } else if result.text.ends_with('\n') {
                print_out(&result.text);
            } else {
                print_out(&format!("{}\n", result.text));
            }
            i32::from(result.is_error)
        }
        Command::Mcp {
            max_calls_in_flight,
            max_calls_total,
            progress_interval_ms,
            http,
        } => {
            let calls_total =
                crate::mcp::CallsTotal::new(max_calls_total).map_err(CliError::Usage)?;
            let options = crate::mcp::McpOptions {
                cwd,
                max_calls_in_flight,
                calls_total,
                progress_interval: Duration::from_secs_f64(progress_interval_ms / 1000.0),
                approvals,
            };
            match http.options(options.clone()) {
                Some(http) => crate::mcp::serve_http(host.clone(), http).await?,
                None => crate::mcp::serve_stdio(host.clone(), options).await?,
            }
            0
        }
        Command::Executor { .. } => unreachable!("served above"),
        Command::Doctor => {
            let mut report = match (&local, &cli.common.executor_command) {
                (Some(local), _) => doctor_report(local, &cli.common.executor_config().env),
                (None, command) => format!(
                    "executor: the executor service {:?} (its containment, sandbox and files are \
                     the far side's: run `dsh-host doctor` there)\n",
                    command.as_deref().unwrap_or_default()
                ),
            };
            report.push_str(&policy_report(&cli.common.policy)?);
            print_out(&report);
            0
        }
    };
    host.shutdown().await;
    Ok(code)
}

/// The doctor's line on the permission rules.
fn policy_report(files: &[PathBuf]) -> Result<String, CliError> {
    if files.is_empty() {
        return Ok("permissions: none (every command runs)\n".to_string());
    }
    let (policy, _) = crate::policy::load(files).map_err(|e| CliError::Usage(e.to_string()))?;
    let (default, source) = policy.default_verdict();
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let mut out = format!(
        "permissions: {} rules from {}; unmatched commands: {} ({source})\n",
        policy.rule_count(),
        names.join(", "),
        default.name()
    );
    if policy.skipped() > 0 {
        out.push_str(&format!(
            "  ({} rules for other tools skipped)\n",
            policy.skipped()
        ));
    }
    Ok(out)
}

/// `dsh-host doctor --executor nats://URL`: the pool's live nodes as their heartbeats show them
/// (read once; nothing is placed), then the permission rules in force here. NATS out of reach,
/// or no live node, is an error naming the servers.
async fn pool_doctor(common: &CommonArgs, urls: &str) -> Result<i32, CliError> {
    common.check_no_executor_flags("executor")?;
    let options = common.pool_options("executor", urls)?;
    let nodes = dsh_executor::pool::survey::live_nodes(&options)
        .await
        .map_err(anyhow::Error::from)?;
    let mut report = pool_report(&options, &nodes);
    report.push_str(&policy_report(&common.policy)?);
    print_out(&report);
    Ok(0)
}

/// The doctor's lines on a pool: its servers and timing, then each live node by id, with its
/// epoch, version, load, sessions, limits and sandbox.
fn pool_report(options: &PoolOptions, nodes: &[dsh_executor::pool::survey::LiveNode]) -> String {
    let mut out = format!(
        "executor: the pool of executor nodes at {}\n  (prefix {}, heartbeat every {} ms, \
         lease {} ms; each node's containment and files are its own: run `dsh-host doctor` on \
         the node)\nlive nodes: {}\n",
        options.urls.join(","),
        options.prefix,
        options.heartbeat.as_millis(),
        options.lease.as_millis(),
        nodes.len()
    );
    for live in nodes {
        let beat = &live.heartbeat;
        let limits = &beat.limits;
        out.push_str(&format!(
            "node {}: epoch {}, {}, load {}, sessions {}, last heartbeat {} ms ago\n  limits: \
             timeout {} ms by default, {} ms at most; {} bytes of each stream kept; grace {} ms\n",
            beat.node,
            beat.epoch,
            beat.server,
            beat.load,
            beat.sessions,
            live.age.as_millis(),
            limits.default_timeout_ms,
            limits.max_timeout_ms,
            limits.max_output_bytes,
            limits.grace_ms
        ));
        match &limits.sandbox {
            None => {
                out.push_str("  sandbox: off (commands have the node's user's full authority)\n")
            }
            Some(sandbox) => {
                let writable = if sandbox.writable.is_empty() {
                    "none".to_string()
                } else {
                    sandbox.writable.join(", ")
                };
                let network = match sandbox.allowed_hosts.is_empty() {
                    true => sandbox.network.to_string(),
                    false => format!(
                        "{} and, through the proxy, {}",
                        sandbox.network,
                        sandbox.allowed_hosts.join(", ")
                    ),
                };
                out.push_str(&format!(
                    "  sandbox: {}, network {network}; writable roots: {writable}; {} denied \
                     reads\n",
                    sandbox.mode,
                    sandbox.denied_reads.len()
                ));
            }
        }
    }
    out
}

fn doctor_report(local: &LocalExecutor, env: &EnvPolicy) -> String {
    let mut out = format!("containment: {}\n", local.containment());
    if let Containment::Subreaper { reason } = local.containment() {
        out.push_str(&format!("  (no cgroup per command: {reason})\n"));
    }
    let spill = local.spill_dir().map_or_else(
        || "(not created yet)".to_string(),
        |p| p.display().to_string(),
    );
    out.push_str(&format!("spill directory: {spill}\n"));
    out.push_str(&sandbox_report(local.sandbox().as_ref()));
    let cache = crate::engine::default_cache_dir()
        .map_or_else(|| "(disabled)".to_string(), |p| p.display().to_string());
    out.push_str(&format!("component cache: {cache}\n"));
    let withheld = env.scrubbed_host_names();
    let withheld = if withheld.is_empty() {
        "none".to_string()
    } else {
        withheld.join(" ")
    };
    out.push_str(&format!("variables withheld from commands: {withheld}\n"));
    out
}

/// The doctor's lines on the sandbox: mode, tier, writable roots, denied reads, network.
fn sandbox_report(sandbox: Option<&Sandbox>) -> String {
    let Some(sandbox) = sandbox else {
        return "sandbox: off (commands have this user's full authority)\n".to_string();
    };
    let list = |paths: &[PathBuf]| {
        if paths.is_empty() {
            "  (none)\n".to_string()
        } else {
            paths
                .iter()
                .map(|p| format!("  {}\n", p.display()))
                .collect()
        }
    };
    let mut out = format!(
        "sandbox: {}\nsandbox tier: {} (Landlock ABI {})\nwritable roots (besides a private \
         TMPDIR per command under {}):\n{}denied reads:\n{}sandbox network: {}\n",
        sandbox.mode,
        sandbox.tier,
        sandbox.landlock_abi,
        sandbox.tmp_base.display(),
        list(&sandbox.writable),
        list(&sandbox.deny_read),
        sandbox.network
    );
    if let Some(port) = sandbox.proxy_port {
        out.push_str(&format!(
            "allowed hosts (through the proxy on each command's 127.0.0.1:{port}):\n"
        ));
        for host in &sandbox.allow_net {
            out.push_str(&format!("  {host}\n"));
        }
        let upstreams = &sandbox.upstreams;
        for (carried, upstream) in [
            ("tunnels", &upstreams.tunnels),
            ("plain-HTTP requests", &upstreams.plain),
        ] {
            if let Some(upstream) = upstream {
                let except = match &upstreams.no_proxy {
                    Some(hosts) => format!(", except to hosts no_proxy names: {hosts}"),
                    None => String::new(),
                };
                out.push_str(&format!(
                    "  ({carried} go through the host's proxy, {}{except})\n",
                    upstream.named
                ));
            }
        }
    }
    out
}

/// Write to stdout; a reader that went away (`| head`) is not an error worth a panic.
fn print_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// The definitions in the shape one agent ecosystem expects, all from the component's
/// definitions. MCP's are exactly the entries of `dsh-host mcp`'s `tools/list`, title and
/// annotations included; OpenAI's and Anthropic's function tools have no place for a title or
/// annotations, so they carry name, description and schema only.
pub fn definitions_json(
    tools: &[ToolDefinition],
    format: Format,
) -> anyhow::Result<serde_json::Value> {
    let entries = match format {
        Format::Mcp => return Ok(serde_json::to_value(crate::mcp::mcp_tools(tools)?)?),
        Format::Openai => tools
            .iter()
            .map(|t| {
                serde_json::json!({
                    "type": "function",
                    "function": { "name": t.name, "description": t.description, "parameters": t.input_schema },
                })
            })
            .collect(),
        Format::Anthropic => tools
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name, "description": t.description, "input_schema": t.input_schema,
                })
            })
            .collect(),
    };
    Ok(serde_json::Value::Array(entries))
}
