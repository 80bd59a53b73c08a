//! The executor pool's security: TLS with a CA and client certificates made at test time, and
//! a NATS server in operator mode whose users (`.creds` files with JWTs made here) have the
//! permissions docs/pool.md recommends for nodes and fronts. Real `nats-server`s
//! (`support/nats.rs`), real nodes (`dsh-host executor serve --nats`), fronts as
//! `dsh-host call --executor …` and `dsh-host doctor --executor …`.
//!
//! Ground truth comes from a marker file each command appends to: a refused front leaves no
//! line, a permitted one a line per call.

#[path = "support/nats.rs"]
mod nats;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/provision.rs"]
mod provision;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures_util::StreamExt;
use serde_json::{Value, json};

use nats::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_dsh-host");
const HEARTBEAT_MS: u64 = 200;
const LEASE_MS: u64 = 1500;
/// Generous bound for anything that should be "prompt".
const PROMPT: Duration = Duration::from_secs(20);

fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A front's call that must have succeeded; the failure shows its output and the nodes' logs.
fn assert_succeeded(out: &Output, nodes: &Nodes) {
    assert!(
        out.status.success(),
        "{}\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr),
        nodes.logs()
    );
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The pool's timing flags, the same for nodes and fronts.
fn timing() -> [String; 2] {
    [
        format!("--nats-heartbeat-ms={HEARTBEAT_MS}"),
        format!("--nats-lease-ms={LEASE_MS}"),
    ]
}

/// Nodes, killed when the test ends however it ends; their logs for failures.
struct Nodes {
    dir: PathBuf,
    children: Vec<Child>,
}

impl Nodes {
    fn new(dir: &Path) -> Nodes {
        Nodes {
            dir: dir.to_path_buf(),
            children: Vec::new(),
        }
    }

    /// Node `id` of the pool at `url`, with `extra` flags (TLS, credentials).
    fn spawn(&mut self, url: &str, id: &str, extra: &[&str]) {
        let home = self.dir.join(id);
        std::fs::create_dir_all(&home).unwrap();
        let log = std::fs::File::create(self.dir.join(format!("{id}.log"))).unwrap();
        let child = Command::new(BIN)
            .args(["executor", "serve", "--nats", url, "--node-id", id])
            .args(timing())
            .arg("--grace-ms=200")
            .args(extra)
            .current_dir(&home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.push(child);
    }

    fn logs(&self) -> String {
        let mut all = String::new();
        for entry in std::fs::read_dir(&self.dir).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                all.push_str(&format!(
                    "--- {}:\n{}\n",
                    path.display(),
                    std::fs::read_to_string(&path).unwrap_or_default()
                ));
            }
        }
        all
    }

    /// Whether every node still runs.
    fn all_run(&mut self) -> bool {
        self.children
            .iter_mut()
            .all(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `dsh-host doctor --executor url` with `extra` flags.
fn doctor(url: &str, extra: &[&str]) -> Output {
    Command::new(BIN)
        .args(["doctor", "--executor", url])
        .args(timing())
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `dsh-host call bash` of `command` through the pool at `url`, with `extra` flags.
fn call(url: &str, extra: &[&str], command: &str) -> Output {
    let args = json!({"command": command, "description": "Mark the file"}).to_string();
    Command::new(BIN)
        .args(["--executor", url])
        .args(timing())
        .args(extra)
        .args(["call", "bash", &args])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Waits until the doctor (with `extra` flags) sees `want` live nodes.
fn wait_for_nodes(url: &str, extra: &[&str], want: usize, nodes: &Nodes) {
    let deadline = Instant::now() + PROMPT;
    loop {
        let out = doctor(url, extra);
        if out.status.success() && text(&out.stdout).contains(&format!("\nlive nodes: {want}\n")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not in time: {want} live nodes\n{}\n{}\n{}",
            text(&out.stdout),
            text(&out.stderr),
            nodes.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------------
// TLS

/// A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate, as PEM
/// files in `dir`.
struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    /// A CA that signed nothing here.
    other_ca: PathBuf,
}

fn ca(name: &str) -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap()
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        let write = |name: &str, pem: String| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        let issuer = ca("dsh pool test CA");
        let leaf = |names: Vec<String>, usage: rcgen::ExtendedKeyUsagePurpose, cn: &str| {
            let mut params = rcgen::CertificateParams::new(names).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
            params.extended_key_usages = vec![usage];
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            "nats-server",
        );
        let (client_cert, client_key) = leaf(
            vec!["node".into()],
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            "dsh node",
        );
        Pki {
            ca: write("ca.pem", issuer.pem()),
            server_cert: write("server.pem", server_cert),
            server_key: write("server-key.pem", server_key),
            client_cert: write("client.pem", client_cert),
            client_key: write("client-key.pem", client_key),
            other_ca: write("other-ca.pem", ca("another CA").pem()),
        }
    }

    /// The server's `tls {}` block; with `verify`, clients must show a certificate of the CA.
    fn server_block(&self, verify: bool) -> String {
        let mut block = format!(
            "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n",
            self.server_cert.display(),
            self.server_key.display()
        );
        if verify {
            block.push_str(&format!(
                "  ca_file: \"{}\"\n  verify: true\n",
                self.ca.display()
            ));
        }
        block.push_str("}\n");
        block
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A command that appends `what` to the marker file `marks` (the ground truth that it ran)
/// and prints where it ran.
fn mark_command(marks: &Path, what: &str) -> String {
    format!(
        "echo {what} >> {}; pwd",
        quoted(&marks.display().to_string())
    )
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn over_tls_a_node_and_a_front_given_the_ca_run_a_command_and_a_front_without_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let cluster = Cluster::start_configured(1, &pki.server_block(false));
    let url = format!("tls://127.0.0.1:{}", cluster.port(0));
    let plain = format!("nats://127.0.0.1:{}", cluster.port(0));
    let trust = ["--nats-tls-ca", path_str(&pki.ca)];
    let marks = dir.path().join("marks");
    let mark = |what: &str| mark_command(&marks, what);

    let mut nodes = Nodes::new(&dir.path().join("nodes"));
    nodes.spawn(&url, "n0", &trust);
    wait_for_nodes(&url, &trust, 1, &nodes);

    // Without the CA: the system's roots do not trust the server, over tls:// or nats://
    // (the server asks for TLS). Refused at connect, naming the flag; nothing ran.
    for (which, extra) in [
        (&url, &[][..]),
        (&plain, &[][..]),
        (&url, &["--nats-tls-ca", path_str(&pki.other_ca)][..]),
    ] {
        let started = Instant::now();
        let out = call(which, extra, &mark("untrusted"));
        let err = text(&out.stderr);
        eprintln!("{which} {extra:?}: {err}");
        assert_ne!(out.status.code(), Some(0), "{}", text(&out.stdout));
        assert!(
            err.contains("refused the connection")
                && err.contains("certificate")
                && err.contains("--nats-tls-ca"),
            "{which} {extra:?}: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "refused only after {:?}",
            started.elapsed()
        );
        assert!(lines(&marks).is_empty(), "a refused front ran a command");
    }
    let out = doctor(&url, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("refused the connection"),
        "{}",
        text(&out.stderr)
    );

    // With it: the command runs on the node, once.
    let out = call(&url, &trust, &mark("trusted"));
    assert_succeeded(&out, &nodes);
    assert_eq!(
        text(&out.stdout).trim(),
        dir.path().join("nodes/n0").display().to_string()
    );
    assert_eq!(lines(&marks), ["trusted"]);
    assert!(nodes.all_run(), "{}", nodes.logs());
}

#[test]
fn a_server_that_verifies_clients_takes_a_node_and_a_front_with_a_client_certificate_only() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let cluster = Cluster::start_configured(1, &pki.server_block(true));
    let url = format!("tls://127.0.0.1:{}", cluster.port(0));
    let with_cert = [
        "--nats-tls-ca",
        path_str(&pki.ca),
        "--nats-tls-cert",
        path_str(&pki.client_cert),
        "--nats-tls-key",
        path_str(&pki.client_key),
    ];
    let marks = dir.path().join("marks");
    let mark = |what: &str| mark_command(&marks, what);

    let mut nodes = Nodes::new(&dir.path().join("nodes"));
    nodes.spawn(&url, "n0", &with_cert);
    wait_for_nodes(&url, &with_cert, 1, &nodes);

    // The CA alone: the server trusts no certificate-less client.
    let out = call(&url, &with_cert[..2], &mark("no-cert"));
    let err = text(&out.stderr);
    eprintln!("a front without a client certificate: {err}");
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(
        err.contains("refused the connection") && err.contains("--nats-tls-cert"),
        "{err}"
    );
    assert!(lines(&marks).is_empty(), "a refused front ran a command");

    let out = call(&url, &with_cert, &mark("with-cert"));
    assert_succeeded(&out, &nodes);
    assert_eq!(lines(&marks), ["with-cert"]);
}

#[test]
fn bad_tls_flags_are_named_and_nothing_connects() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let missing = dir.path().join("missing.pem");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    // Nothing listens there: every refusal below comes before any connection.
    let url = "tls://127.0.0.1:1";
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--nats-tls-ca", path_str(&missing)],
            vec!["--nats-tls-ca", "missing.pem", "cannot read it"],
        ),
        (
            vec!["--nats-tls-ca", path_str(&garbage)],
            vec!["--nats-tls-ca", "holds no PEM certificate"],
        ),
        (
            // A key is no certificate.
            vec!["--nats-tls-ca", path_str(&pki.client_key)],
            vec!["--nats-tls-ca", "holds no PEM certificate"],
        ),
        (
            vec!["--nats-tls-cert", path_str(&pki.client_cert)],
            vec!["--nats-tls-key"],
        ),
        (
            vec!["--nats-tls-key", path_str(&pki.client_key)],
            vec!["--nats-tls-cert"],
        ),
        (
            vec![
                "--nats-tls-cert",
                path_str(&pki.client_cert),
                "--nats-tls-key",
                path_str(&pki.client_cert),
            ],
            vec!["--nats-tls-key", "holds no PEM private key"],
        ),
        (
            vec![
                "--nats-tls-cert",
                path_str(&missing),
                "--nats-tls-key",
                path_str(&pki.client_key),
            ],
            vec!["--nats-tls-cert", "cannot read it"],
        ),
    ];
    for (flags, wanted) in &cases {
        let outputs = [
            Command::new(BIN)
                .args(["executor", "serve", "--nats", url, "--node-id", "n0"])
                .args(flags)
                .stdin(Stdio::null())
                .output()
                .unwrap(),
            call(url, flags, "echo never"),
            doctor(url, flags),
        ];
        for out in outputs {
            let err = text(&out.stderr);
            assert_ne!(
                out.status.code(),
                Some(0),
                "{flags:?}: {}",
                text(&out.stdout)
            );
            assert!(
                wanted.iter().all(|w| err.contains(w)),
                "{flags:?}: wanted {wanted:?} in: {err}"
            );
            assert!(!err.contains("panicked"), "{flags:?}: {err}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Credentials and permissions: a server in operator mode

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A NATS JWT: `claims` issued by `issuer` about `subject`, signed with the issuer's nkey.
fn jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let mut claims = json!({
        "iat": now(),
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    // The claims' id: any unique string (nats-io/jwt uses a hash of the claims).
    claims["jti"] = json!(format!("{}{}", subject, now()).to_uppercase());
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signed = format!("{header}.{payload}");
    let signature = URL_SAFE_NO_PAD.encode(issuer.sign(signed.as_bytes()).unwrap());
    format!("{signed}.{signature}")
}

/// An operator, a system account and the pool's account (with JetStream), and the users made
/// in it as `.creds` files.
struct Operator {
    dir: PathBuf,
    operator: nkeys::KeyPair,
    system: nkeys::KeyPair,
    account: nkeys::KeyPair,
}

impl Operator {
    fn new(dir: &Path) -> Operator {
        Operator {
            dir: dir.to_path_buf(),
            operator: nkeys::KeyPair::new_operator(),
            system: nkeys::KeyPair::new_account(),
            account: nkeys::KeyPair::new_account(),
        }
    }

    /// The server's config: the operator, its accounts preloaded.
    fn server_block(&self) -> String {
        let op = self.operator.public_key();
        let operator = jwt(
            &self.operator,
            &op,
            "test-operator",
            json!({"type": "operator", "version": 2, "system_account": self.system.public_key()}),
        );
        let limits = |jetstream: bool| {
            let mut limits = json!({
                "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                "wildcards": true, "conn": -1, "leaf": -1,
            });
            if jetstream {
                for key in ["mem_storage", "disk_storage", "streams", "consumer"] {
                    limits[key] = json!(-1);
                }
            }
            limits
        };
        let system = jwt(
            &self.operator,
            &self.system.public_key(),
            "SYS",
            json!({"type": "account", "version": 2, "limits": limits(false)}),
        );
        let account = jwt(
            &self.operator,
            &self.account.public_key(),
            "POOL",
            json!({"type": "account", "version": 2, "limits": limits(true),
                   "default_permissions": {"pub": {}, "sub": {}}}),
        );
        format!(
            "operator: \"{operator}\"\nsystem_account: \"{sys}\"\nresolver: MEMORY\n\
             resolver_preload: {{\n  {sys}: \"{system}\"\n  {acc}: \"{account}\"\n}}\n",
            sys = self.system.public_key(),
            acc = self.account.public_key(),
        )
    }

    /// A user of the pool's account allowed to publish `publish` and subscribe `subscribe`
    /// (an empty list: nothing), as a `.creds` file.
    fn user(&self, name: &str, publish: &[&str], subscribe: &[&str]) -> PathBuf {
        let user = nkeys::KeyPair::new_user();
        let permission = |subjects: &[&str]| {
            if subjects.is_empty() {
                json!({"deny": [">"]})
            } else {
                json!({"allow": subjects})
            }
        };
        let token = jwt(
            &self.account,
            &user.public_key(),
            name,
            json!({
                "type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1,
                "pub": permission(publish), "sub": permission(subscribe),
            }),
        );
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n",
            seed = user.seed().unwrap()
        );
        let path = self.dir.join(format!("{name}.creds"));
        std::fs::write(&path, creds).unwrap();
        path
    }
}

/// What a node `id` publishes and subscribes, as docs/pool.md recommends (prefix `dsh`).
fn node_permissions(id: &str) -> (Vec<String>, Vec<String>) {
    let publish = [
        "$JS.API.>".to_string(),
        "$JS.FC.>".to_string(),
        format!("$KV.dsh-nodes.{id}"),
        "$KV.dsh-sessions.>".to_string(),
        "$KV.dsh-requests.>".to_string(),
        format!("dsh.node.{id}.>"),
        "$SRV.>".to_string(),
        "_INBOX.>".to_string(),
    ];
    let subscribe = [
        "dsh.place".to_string(),
        format!("dsh.node.{id}.>"),
        "$SRV.>".to_string(),
        "_INBOX.>".to_string(),
    ];
    (publish.to_vec(), subscribe.to_vec())
}

/// What a front reads of the pool's buckets (the nodes' heartbeats), as docs/pool.md
/// recommends: no writes.
const FRONT_READS: &[&str] = &[
    "$JS.API.STREAM.INFO.KV_dsh-nodes",
    "$JS.API.STREAM.INFO.KV_dsh-sessions",
    "$JS.API.STREAM.INFO.KV_dsh-requests",
    "$JS.API.CONSUMER.CREATE.KV_dsh-nodes",
    "$JS.API.CONSUMER.CREATE.KV_dsh-nodes.>",
    "$JS.API.CONSUMER.DELETE.KV_dsh-nodes.>",
    "$JS.API.DIRECT.GET.KV_dsh-nodes.>",
    "$JS.API.STREAM.MSG.GET.KV_dsh-nodes",
    "$JS.FC.>",
];
/// What a front publishes to the nodes.
const FRONT_CALLS: &[&str] = &["dsh.place", "dsh.node.*.*.place", "dsh.node.*.*.rpc"];
/// What a front subscribes.
const FRONT_SUBSCRIBES: &[&str] = &["_INBOX.>", "dsh.node.*.*.events.>"];

/// A server in operator mode, users for a node `n0`, a front, a front denied `dsh.>`, a
/// subscribe-only client, and node `n0` running with its credentials.
struct Secured {
    _cluster: Cluster,
    url: String,
    dir: tempfile::TempDir,
    nodes: Nodes,
    node: PathBuf,
    front: PathBuf,
    denied: PathBuf,
    /// May place sessions but not call the nodes.
    placing: PathBuf,
    listener: PathBuf,
    marks: PathBuf,
}

impl Secured {
    fn start() -> Secured {
        let dir = tempfile::tempdir().unwrap();
        let operator = Operator::new(dir.path());
        let cluster = Cluster::start_configured(1, &operator.server_block());
        let url = cluster.url(0);
        let (publish, subscribe) = node_permissions("n0");
        let node = operator.user("node-n0", &strs(&publish), &strs(&subscribe));
        let front_publish: Vec<&str> = FRONT_CALLS.iter().chain(FRONT_READS).copied().collect();
        let front = operator.user("front", &front_publish, FRONT_SUBSCRIBES);
        // Connects and reads the heartbeats as a front does, may not publish on `dsh.>`.
        let denied = operator.user("front-denied", FRONT_READS, FRONT_SUBSCRIBES);
        let placing_publish: Vec<&str> = FRONT_CALLS[..2]
            .iter()
            .chain(FRONT_READS)
            .copied()
            .collect();
        let placing = operator.user("front-placing", &placing_publish, FRONT_SUBSCRIBES);
        let listener = operator.user("listener", &[], &[">"]);
        account_ready(&url, &node);
        let mut nodes = Nodes::new(&dir.path().join("nodes"));
        nodes.spawn(&url, "n0", &["--nats-creds", path_str(&node)]);
        let marks = dir.path().join("marks");
        let secured = Secured {
            _cluster: cluster,
            url,
            nodes,
            node,
            front,
            denied,
            placing,
            listener,
            marks,
            dir,
        };
        wait_for_nodes(
            &secured.url,
            &["--nats-creds", path_str(&secured.front)],
            1,
            &secured.nodes,
        );
        secured
    }

    fn mark(&self, what: &str) -> String {
        mark_command(&self.marks, what)
    }

    /// A call as `creds` that must succeed, on node n0.
    fn call_ok(&self, creds: &Path, what: &str) {
        let out = call(
            &self.url,
            &["--nats-creds", path_str(creds)],
            &self.mark(what),
        );
        assert_succeeded(&out, &self.nodes);
        assert_eq!(
            text(&out.stdout).trim(),
            self.dir.path().join("nodes/n0").display().to_string()
        );
        // The recommended permissions are enough: neither the front nor the node was refused
        // anything on the way.
        assert!(
            !text(&out.stderr).contains("Permissions Violation"),
            "{}",
            text(&out.stderr)
        );
        let node_log = std::fs::read_to_string(self.dir.path().join("nodes/n0.log")).unwrap();
        assert!(!node_log.contains("Permissions Violation"), "{node_log}");
    }
}

/// Waits until JetStream answers for the account of `creds`: the server sets an account up
/// when its first user connects, and a stream created before that fails (nats-server 2.15
/// cannot create the account's store directory).
fn account_ready(url: &str, creds: &Path) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = async_nats::ConnectOptions::new()
            .credentials_file(creds)
            .await
            .unwrap()
            .connect(url)
            .await
            .unwrap();
        let js = async_nats::jetstream::new(client);
        let deadline = Instant::now() + PROMPT;
        loop {
            match js.query_account().await {
                Ok(_) => return,
                Err(err) => assert!(Instant::now() < deadline, "no JetStream: {err}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// A client of `creds` that records the errors the server sends it (permissions violations).
async fn client_of(url: &str, creds: &Path) -> (async_nats::Client, Arc<Mutex<Vec<String>>>) {
    let errors = Arc::new(Mutex::new(Vec::new()));
    let seen = errors.clone();
    let client = async_nats::ConnectOptions::new()
        .event_callback(move |event| {
            let seen = seen.clone();
            async move {
                if let async_nats::Event::ServerError(err) = event {
                    seen.lock().unwrap().push(err.to_string());
                }
            }
        })
        .credentials_file(creds)
        .await
        .unwrap()
        .connect(url)
        .await
        .unwrap();
    (client, errors)
}

/// Waits until the server sent an error containing each of `wanted`.
async fn wait_for_errors(errors: &Mutex<Vec<String>>, wanted: &[&str]) {
    let deadline = Instant::now() + PROMPT;
    for wanted in wanted {
        while !errors.lock().unwrap().iter().any(|e| e.contains(wanted)) {
            assert!(
                Instant::now() < deadline,
                "no error {wanted:?} in {:?}",
                errors.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_may_only_subscribe_or_a_front_cannot_impersonate_a_node() {
    let pool = tokio::task::spawn_blocking(Secured::start).await.unwrap();
    let url = pool.url.clone();

    // A subscribe-only client sees the placement requests (which is why only nodes should be
    // allowed to subscribe there) but its answers never leave it.
    let (listener, listener_errors) = client_of(&url, &pool.listener).await;
    let mut place = listener
        .queue_subscribe("dsh.place", "dsh-nodes".to_string())
        .await
        .unwrap();
    let mut rpc = listener.subscribe("dsh.node.>").await.unwrap();
    listener.flush().await.unwrap();
    let forged =
        json!({"jsonrpc": "2.0", "id": 1, "result": {"ok": {"node": "evil", "epoch": "e"}}});
    let answering = tokio::spawn({
        let listener = listener.clone();
        async move {
            let mut answered = 0;
            loop {
                tokio::select! {
                    Some(message) = place.next() => {
                        if let Some(reply) = message.reply {
                            let _ = listener.publish(reply, forged.to_string().into()).await;
                            answered += 1;
                        }
                    }
                    Some(message) = rpc.next() => {
                        if let Some(reply) = message.reply {
                            let _ = listener.publish(reply, forged.to_string().into()).await;
                            answered += 1;
                        }
                    }
                    else => break,
                }
                let _ = listener.flush().await;
                if answered > 0 && answered % 100 == 0 {
                    break;
                }
            }
            answered
        }
    });
    // It forges a heartbeat of a node `evil`.
    listener
        .publish("$KV.dsh-nodes.evil", b"{}".as_ref().into())
        .await
        .unwrap();
    listener.flush().await.unwrap();
    wait_for_errors(
        &listener_errors,
        &["Permissions Violation for Publish to \"$KV.dsh-nodes.evil\""],
    )
    .await;

    // A front may call nodes but not listen as one, nor write the pool's state.
    let (front, front_errors) = client_of(&url, &pool.front).await;
    let _as_node = front
        .queue_subscribe("dsh.place", "dsh-nodes".to_string())
        .await
        .unwrap();
    let _eavesdrop = front.subscribe("dsh.node.*.*.rpc").await.unwrap();
    front.flush().await.unwrap();
    wait_for_errors(
        &front_errors,
        &[
            "Permissions Violation for Subscription to \"dsh.place\"",
            "Permissions Violation for Subscription to \"dsh.node.*.*.rpc\"",
        ],
    )
    .await;
    front
        .publish("$KV.dsh-nodes.evil", b"{}".as_ref().into())
        .await
        .unwrap();
    front
        .publish("$KV.dsh-sessions.stolen", b"{}".as_ref().into())
        .await
        .unwrap();
    let _ = front
        .send_request(
            "$JS.API.STREAM.DELETE.KV_dsh-nodes",
            async_nats::Request::new().timeout(Some(Duration::from_millis(500))),
        )
        .await;
    front.flush().await.unwrap();
    wait_for_errors(
        &front_errors,
        &[
            "Permissions Violation for Publish to \"$KV.dsh-nodes.evil\"",
            "Permissions Violation for Publish to \"$KV.dsh-sessions.stolen\"",
            "Permissions Violation for Publish to \"$JS.API.STREAM.DELETE.KV_dsh-nodes\"",
        ],
    )
    .await;

    // Ground truth: the real front's sessions all land on n0 and run once each; the pool
    // knows n0 only; the bucket is still there.
    let pool = tokio::task::spawn_blocking(move || {
        for i in 0..4 {
            pool.call_ok(&pool.front, &format!("call-{i}"));
        }
        pool
    })
    .await
    .unwrap();
    assert_eq!(lines(&pool.marks), ["call-0", "call-1", "call-2", "call-3"]);
    let out = doctor(&url, &["--nats-creds", path_str(&pool.front)]);
    let report = text(&out.stdout);
    assert!(out.status.success(), "{report}\n{}", text(&out.stderr));
    assert!(
        report.contains("\nlive nodes: 1\n") && report.contains("\nnode n0: "),
        "{report}"
    );
    assert!(!report.contains("evil"), "{report}");
    // Node n0's credentials do not make another node: n1 can neither listen on its subjects
    // nor write its heartbeat, so it never joins.
    let mut pool = pool;
    let n0_creds = pool.node.clone();
    pool.nodes
        .spawn(&url, "n1", &["--nats-creds", path_str(&n0_creds)]);
    let deadline = Instant::now() + PROMPT;
    let status = loop {
        if let Some(status) = pool.nodes.children[1].try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the impostor n1 still runs\n{}",
            pool.nodes.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let said = std::fs::read_to_string(pool.dir.path().join("nodes/n1.log")).unwrap();
    eprintln!("the impostor n1: {said}");
    assert!(!status.success(), "{}", pool.nodes.logs());
    assert!(
        said.contains("dsh-host: ")
            && said.contains("the NATS server refused: ")
            && said.contains("Permissions Violation"),
        "{said}"
    );
    let out = doctor(&url, &["--nats-creds", path_str(&pool.front)]);
    let report = text(&out.stdout);
    assert!(
        report.contains("\nlive nodes: 1\n") && !report.contains("node n1"),
        "{report}"
    );
    // The listener saw the calls (subscribing is reading: give it only to nodes) and every
    // answer it made was refused.
    answering.abort();
    let refused = listener_errors.lock().unwrap().clone();
    assert!(
        refused
            .iter()
            .any(|e| e.contains("Permissions Violation for Publish to \"_INBOX.")),
        "{refused:?}"
    );
}

#[test]
fn credentials_let_a_node_and_a_front_work_and_a_front_denied_the_subjects_starts_nothing() {
    let mut pool = Secured::start();
    // Permitted: the command runs on the node.
    pool.call_ok(&pool.front, "permitted-1");
    assert_eq!(lines(&pool.marks), ["permitted-1"]);

    // Connects and sees the node, may not publish on dsh.>; or may place a session but not
    // call its node. The server refuses the publish, so the call reached nobody: the front says
    // so at once (it does not wait for an answer that cannot come, and then call the command's
    // fate unknown), naming what was refused, and nothing ran.
    for (creds, refused) in [
        (&pool.denied, "\"dsh.place\""),
        (&pool.placing, "\"dsh.node.n0."),
    ] {
        let out = call(
            &pool.url,
            &["--nats-creds", path_str(creds)],
            &pool.mark("refused"),
        );
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(
            said.contains("the executor pool was not reached")
                && said.contains(&format!("Permissions Violation for Publish to {refused}")),
            "{said}"
        );
        assert_eq!(
            lines(&pool.marks),
            ["permitted-1"],
            "a refused front ran a command"
        );
    }

    // No credentials at all: refused at connect, naming the flag.
    // Nor are a stranger's: a user of an account the server does not know.
    let strangers = pool.dir.path().join("strangers");
    std::fs::create_dir(&strangers).unwrap();
    let stranger = Operator::new(&strangers).user("stranger", &[">"], &[">"]);
    for extra in [vec![], vec!["--nats-creds", path_str(&stranger)]] {
        let out = call(&pool.url, &extra, &pool.mark("anonymous"));
        let err = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{}", text(&out.stdout));
        assert!(
            err.contains("refused the connection")
                && err.contains("authorization violation")
                && err.contains("--nats-creds"),
            "{err}"
        );
    }
    let out = doctor(&pool.url, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("authorization violation"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(lines(&pool.marks), ["permitted-1"]);

    // The node serves a permitted front as before.
    pool.call_ok(&pool.front, "permitted-2");
    assert_eq!(lines(&pool.marks), ["permitted-1", "permitted-2"]);
    assert!(pool.nodes.all_run(), "{}", pool.nodes.logs());
}
