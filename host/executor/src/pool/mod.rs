//! A pool of executor nodes on NATS (`docs/pool.md`).
//!
//! A node (`executor serve --nats URL`) serves this machine's executor to the pool: it answers
//! placement requests, runs the calls of the sessions placed on it (the executor protocol's
//! messages, one per NATS request), publishes their task-done events, and heartbeats its
//! liveness and load into a key-value bucket. A front ([`front::PoolExecutor`]) places each
//! session on a node on its first call and sends every later call of that session there.
//!
//! What is shared lives in three key-value buckets: the nodes' heartbeats (a key expires when
//! its node stops beating), the sessions' placements (claimed with create-if-absent, so two
//! fronts racing for one session agree), and the request ids that started a command (claimed
//! before the command starts, so no id runs twice anywhere).

pub mod front;
pub mod node;
mod store;
pub mod survey;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use front::PoolExecutor;
pub use node::{NodeOptions, serve_node};

/// The NATS header naming the session a message belongs to.
pub const SESSION_HEADER: &str = "Dsh-Session";

/// How to reach the pool, and its timing. Every node and front of one pool uses the same
/// prefix, heartbeat and lease.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// NATS server URLs (`nats://host:port`, `tls://…`), tried in turn.
    pub urls: Vec<String>,
    /// A NATS credentials file (JWT and seed), if the servers ask for one.
    pub creds: Option<PathBuf>,
    /// PEM root certificates to trust for the servers' TLS certificates, instead of the
    /// system's roots (`--nats-tls-ca`). Any TLS setting makes TLS required.
    pub tls_ca: Option<PathBuf>,
    /// A PEM client certificate (chain), for servers that verify clients (`--nats-tls-cert`);
    /// it goes with [`PoolOptions::tls_key`].
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of [`PoolOptions::tls_cert`] (`--nats-tls-key`).
    pub tls_key: Option<PathBuf>,
    /// The first token of every subject and the start of every bucket name.
    pub prefix: String,
    /// How often a node writes its heartbeat.
    pub heartbeat: Duration,
    /// How long a node is live after its last heartbeat; past it, it is dead (and a node that
    /// could not renew its own heartbeat for this long kills its tasks).
    pub lease: Duration,
    /// Copies the pool's buckets keep (1, or 3 on a 3-server cluster).
    pub replicas: usize,
    /// How long a node keeps a session no front has shown interest in (a front tells the
    /// nodes every heartbeat which of their sessions it holds); past it, the session's
    /// commands are killed and the session is forgotten.
    pub session_grace: Duration,
    /// How long a front waits for a node's answer to a call that starts no command (and to a
    /// placement) before it asks again.
    pub request_timeout: Duration,
    /// A node that let this many calls in a row go unanswered (each timed out) is dead to the
    /// front that asked, whatever its heartbeat says.
    pub dead_after_timeouts: u32,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            urls: vec!["nats://127.0.0.1:4222".to_string()],
            creds: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            prefix: "dsh".to_string(),
            heartbeat: Duration::from_millis(1000),
            lease: Duration::from_millis(5000),
            replicas: 1,
            session_grace: Duration::from_secs(60),
            request_timeout: Duration::from_secs(5),
            dead_after_timeouts: 3,
        }
    }
}

impl PoolOptions {
    /// Parses `nats://a:4222,nats://b:4222` (a `nats://` URL list, as `--executor` and
    /// `--nats` take it).
    pub fn urls_from(list: &str) -> Vec<String> {
        list.split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(str::to_string)
            .collect()
    }

    fn bucket(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// The shared placement subject (a queue group of every node answers it).
    fn place_any(&self) -> String {
        format!("{}.place", self.prefix)
    }

    /// The subjects of one node's epoch start with this.
    fn node_base(&self, node: &str, epoch: &str) -> String {
        format!("{}.node.{node}.{epoch}", self.prefix)
    }

    /// Whether the TLS files make sense: each readable PEM holding what it should, and a
    /// client certificate with its key. The error names the flag.
    pub fn check_tls(&self) -> Result<(), String> {
        use async_nats::rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
        let certificates = |flag: &str, path: &PathBuf| -> Result<(), String> {
            std::fs::metadata(path)
                .map_err(|err| format!("--{flag} {}: cannot read it: {err}", path.display()))?;
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|err| format!("--{flag} {}: not a PEM file: {err}", path.display()))?;
            if certs.is_empty() {
                return Err(format!(
                    "--{flag} {}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                    path.display()
                ));
            }
            Ok(())
        };
        if let Some(ca) = &self.tls_ca {
            certificates("nats-tls-ca", ca)?;
        }
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(
                    "--nats-tls-cert: a client certificate needs its private key (--nats-tls-key)"
                        .to_string(),
                );
            }
            (None, Some(_)) => {
                return Err(
                    "--nats-tls-key: a private key needs its client certificate (--nats-tls-cert)"
                        .to_string(),
                );
            }
            (Some(cert), Some(key)) => {
                certificates("nats-tls-cert", cert)?;
                std::fs::metadata(key).map_err(|err| {
                    format!("--nats-tls-key {}: cannot read it: {err}", key.display())
                })?;
                PrivateKeyDer::from_pem_file(key).map_err(|err| {
                    format!(
                        "--nats-tls-key {}: holds no PEM private key: {err}",
                        key.display()
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Whether any TLS setting is given (then TLS is required, whatever the URLs' scheme).
    fn tls(&self) -> bool {
        self.tls_ca.is_some() || self.tls_cert.is_some() || self.tls_key.is_some()
    }

    /// The client's settings: name, credentials, TLS; the server's errors (permissions
    /// violations) and the client's (re)connections go to `server_events`.
    async fn connect_options(
        &self,
        name: &str,
        server_events: &ServerEvents,
    ) -> Result<async_nats::ConnectOptions, String> {
        let server_events = server_events.clone();
        let mut options = async_nats::ConnectOptions::new()
            .name(name)
            .event_callback(move |event| {
                let server_events = server_events.clone();
                async move {
                    match event {
                        async_nats::Event::ServerError(err) => {
                            tracing::warn!(%err, "the NATS server refused");
                            server_events.record(err.to_string());
                        }
                        async_nats::Event::Connected => server_events.connected(),
                        _ => {}
                    }
                }
            })
            .connection_timeout(Duration::from_secs(5))
            // The first URL is the preferred server; the others (and those the cluster
            // announces) are where it fails over.
            .retain_servers_order();
        if let Some(creds) = &self.creds {
            options = options.credentials_file(creds).await.map_err(|err| {
                format!(
                    "--nats-creds {}: cannot read the NATS credentials file: {err}",
                    creds.display()
                )
            })?;
        }
        if self.tls() {
            options = options.require_tls(true);
        }
        if let Some(ca) = &self.tls_ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        Ok(options)
    }

    /// Connects to the servers (with the credentials and TLS settings, if any). A server that
    /// answers and refuses the client (its TLS certificate is not trusted, or it does not trust
    /// the client's, or the credentials are wrong or missing) is an error naming why; servers
    /// that do not answer yet are waited for in the background, as they come up.
    async fn connect(&self, name: &str) -> Result<(async_nats::Client, ServerEvents), String> {
        self.check_tls()?;
        let urls = self.urls.join(",");
        let server_events = ServerEvents::default();
        match self
            .connect_options(name, &server_events)
            .await?
            .connect(self.urls.clone())
            .await
        {
            Ok(client) => {
                let info = client.server_info();
                if let Err(why) = supported_server(&info.version) {
                    return Err(format!("NATS at {urls}: {why}"));
                }
                return Ok((client, server_events));
            }
            Err(err) => {
                if let Some(hint) = refusal(&err) {
                    return Err(format!(
                        "NATS at {urls} refused the connection: {err} ({hint})"
                    ));
                }
            }
        }
        let client = self
            .connect_options(name, &server_events)
            .await?
            .retry_on_initial_connect()
            .connect(self.urls.clone())
            .await
            .map_err(|err| format!("cannot connect to NATS at {urls}: {err}"))?;
        Ok((client, server_events))
    }
}

/// The oldest NATS server the pool works with: the client's JetStream calls read fields older
/// servers do not send (an account's reserved storage, since 2.10).
const OLDEST_SERVER: (u64, u64) = (2, 10);

/// Whether a server of `version` (as its INFO says it) can serve the pool; why not otherwise.
fn supported_server(version: &str) -> Result<(), String> {
    let mut parts = version.split(['.', '-']).map(|part| part.parse::<u64>());
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        // Not a version this check understands: the server is taken at its word.
        return Ok(());
    };
    if (major, minor) < OLDEST_SERVER {
        let (want_major, want_minor) = OLDEST_SERVER;
        return Err(format!(
            "nats-server {version} is older than {want_major}.{want_minor}, the oldest the \
             executor pool works with (its key-value buckets); run nats-server \
             {want_major}.{want_minor} or later"
        ));
    }
    Ok(())
}

/// What a client's NATS connection told of itself: the errors the server sent it (permissions
/// violations: a publish or subscription its user may not make), which a request that went
/// unanswered because of one can name, and when it last (re)connected.
#[derive(Clone)]
pub(crate) struct ServerEvents(std::sync::Arc<ServerEventLog>);

pub(crate) struct ServerEventLog {
    last: std::sync::Mutex<Option<String>>,
    /// When the client last (re)connected.
    connected_at: std::sync::Mutex<std::time::Instant>,
    /// Every refusal, to the calls waiting for theirs (a burst of them reaches each).
    told: tokio::sync::broadcast::Sender<String>,
}

impl Default for ServerEvents {
    fn default() -> Self {
        ServerEvents(std::sync::Arc::new(ServerEventLog {
            last: std::sync::Mutex::new(None),
            connected_at: std::sync::Mutex::new(std::time::Instant::now()),
            told: tokio::sync::broadcast::channel(256).0,
        }))
    }
}

impl ServerEvents {
    fn record(&self, refusal: String) {
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(refusal.clone());
        let _ = self.0.told.send(refusal);
    }

    fn connected(&self) {
        *self
            .0
            .connected_at
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = std::time::Instant::now();
    }

    /// When the client last (re)connected to a server.
    pub(crate) fn connected_at(&self) -> std::time::Instant {
        *self
            .0
            .connected_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The last refusal, if any.
    pub(crate) fn last(&self) -> Option<String> {
        self.0
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Resolves, with the server's words, once the server refuses a publish to `subject` made
    /// from now on (that message reached nobody), or this client's subscription to its reply
    /// inboxes (no answer can reach it). A server says nothing else of a refused publish: a
    /// request would wait for its answer until it timed out.
    pub(crate) fn refused(
        &self,
        subject: &str,
    ) -> impl std::future::Future<Output = String> + Send + 'static {
        let mut told = self.0.told.subscribe();
        let publish = format!("Publish to \"{subject}\"");
        async move {
            loop {
                match told.recv().await {
                    Ok(refused)
                        if refused.contains(&publish)
                            || refused.contains("Subscription to \"_INBOX.") =>
                    {
                        return refused;
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }
}

/// Whether a failed connection is a refusal that trying again cannot mend, with what to check:
/// TLS (a certificate not trusted either way: rustls errors come as invalid data) or
/// authentication.
fn refusal(err: &async_nats::ConnectError) -> Option<&'static str> {
    use async_nats::ConnectErrorKind;
    const TLS: &str = "check --nats-tls-ca (the CA of the servers' certificates) and \
                       --nats-tls-cert/--nats-tls-key (a client certificate they trust)";
    const AUTH: &str = "check --nats-creds: the servers do not accept these credentials";
    match err.kind() {
        ConnectErrorKind::Tls => Some(TLS),
        ConnectErrorKind::Authentication | ConnectErrorKind::AuthorizationViolation => Some(AUTH),
        ConnectErrorKind::Io => {
            let io = std::error::Error::source(err)?.downcast_ref::<std::io::Error>()?;
            (io.kind() == std::io::ErrorKind::InvalidData).then_some(TLS)
        }
        _ => None,
    }
}

/// A node's heartbeat: the value of its key in the nodes bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The node's id.
    pub node: String,
    /// The node's epoch: random, new at every start.
    pub epoch: String,
    /// Its name and version (`dsh-host 0.9.0`).
    pub server: String,
    /// Background tasks running and foreground runs in flight.
    pub load: usize,
    /// Sessions placed on it.
    pub sessions: usize,
    /// Its executor's limits.
    pub limits: crate::Limits,
    /// What its executor resolves requests with, when that is all it takes: fronts then
    /// resolve its sessions' requests themselves rather than ask it.
    #[serde(default)]
    pub resolution: Option<crate::Resolution>,
}

/// A session's placement: the value of its key in the sessions bucket, and the answer to a
/// placement request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Placement {
    /// The node holding the session.
    pub node: String,
    /// That node's epoch when it took the session.
    pub epoch: String,
}

/// The `keepalive` notification's parameters: the sessions a front holds on the node.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Keepalive {
    sessions: Vec<String>,
}

/// A placement request's parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PlaceRequest {
    session: String,
    /// Nodes (with their epochs) the asking front found dead (nobody answered on their
    /// subjects), although their heartbeats may not have expired yet: a session held by one of
    /// them is taken over.
    #[serde(default)]
    dead: Vec<Placement>,
}

/// A name usable as one subject token and one key: letters, digits, `-` and `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::supported_server;

    #[test]
    fn servers_older_than_2_10_are_refused_saying_why() {
        for old in ["2.9.10", "2.2.0", "1.4.1"] {
            let why = supported_server(old).unwrap_err();
            assert!(
                why.contains(old) && why.contains("older than 2.10"),
                "{why}"
            );
        }
        for fine in [
            "2.10.0",
            "2.10.22",
            "2.15.1",
            "3.0.0",
            "2.11.0-beta.1",
            "",
            "dev",
        ] {
            assert_eq!(supported_server(fine), Ok(()), "{fine}");
        }
    }
}
