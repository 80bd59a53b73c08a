//! The NATS harness (`tests/support/nats.rs`) against real servers, through `async-nats`: a
//! three-server cluster takes a replicated KV bucket and queue-group requests right after it
//! starts, keeps both working for a client of all three when one server is killed, and takes the
//! killed one back on a restart; a single server stopped answers nothing until continued, and
//! keeps its store across a restart.

#[path = "support/nats.rs"]
mod nats;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/provision.rs"]
mod provision;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use async_nats::{Client, ConnectOptions};
use bytes::Bytes;
use futures_util::StreamExt;

use nats::Cluster;

/// How long a failover (a new leader, a client's reconnection) may take.
const FAILOVER: Duration = Duration::from_secs(15);
const SUBJECT: &str = "harness.work";
const QUEUE: &str = "workers";

/// A client of `urls`, trying them in that order; a request waits at most 2 s (its JetStream
/// calls, through [`js`], 5 s).
async fn connect(urls: &[String]) -> Client {
    ConnectOptions::new()
        .retain_servers_order()
        .request_timeout(Some(Duration::from_secs(2)))
        .connect(urls)
        .await
        .unwrap_or_else(|e| panic!("connect to {urls:?}: {e}"))
}

/// JetStream through `client`: its API calls wait up to 5 s (a replicated stream's creation
/// waits for its leader's election, and a loaded machine's disk can be slow).
fn js(client: &Client) -> jetstream::Context {
    jetstream::context::ContextBuilder::new()
        .timeout(Duration::from_secs(5))
        .build(client.clone())
}

/// A member of the queue group `QUEUE` on `SUBJECT`, on its own connection: answers `who:payload`
/// and counts what it handled in `handled`.
async fn responder(urls: &[String], who: &'static str, handled: Arc<AtomicUsize>) -> Client {
    let client = connect(urls).await;
    let mut requests = client
        .queue_subscribe(SUBJECT, QUEUE.into())
        .await
        .expect("queue_subscribe");
    // Written out; the server may still take a moment to register it (a flush waits for no
    // answer), so a test's first request retries (`eventually`).
    client.flush().await.expect("flush the subscription");
    let answering = client.clone();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            handled.fetch_add(1, Ordering::SeqCst);
            if let Some(reply) = request.reply {
                let payload = request.payload;
                let answer = format!("{who}:{}", String::from_utf8_lossy(&payload));
                let _ = answering.publish(reply, answer.into()).await;
            }
        }
    });
    client
}

/// Retries `attempt` until it succeeds or `within` has passed; the last error fails the test.
async fn eventually<T, E: std::fmt::Debug, F: Future<Output = Result<T, E>>>(
    what: &str,
    within: Duration,
    mut attempt: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(e) if Instant::now() >= deadline => panic!("{what}: still failing: {e:?}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// A request on `SUBJECT` answered by a member of the group; its answer.
async fn request(client: &Client, payload: &str) -> Result<String, async_nats::RequestError> {
    let answer = client.request(SUBJECT, payload.to_string().into()).await?;
    Ok(String::from_utf8_lossy(&answer.payload).into_owned())
}

fn answered_by_a_member(answer: &str, payload: &str) -> bool {
    answer == format!("a:{payload}") || answer == format!("b:{payload}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_server_cluster_keeps_kv_and_requests_across_a_killed_server() {
    let mut cluster = Cluster::start(3);
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);

    // The client connects to server 0 first, so that killing it moves the client.
    let client = connect(&urls).await;
    assert_eq!(client.server_info().port, port_of(&cluster.url(0)));

    // A replicated bucket right after the start: the cluster has its meta leader.
    let bucket = js(&client)
        .create_key_value(kv::Config {
            bucket: "harness".into(),
            num_replicas: 3,
            history: 1,
            ..Default::default()
        })
        .await
        .expect("create a KV bucket with 3 replicas");
    // The stream's interest in its subjects reaches the other servers over the routes a moment
    // after the creation's answer: until then a write through them finds no responders (503).
    eventually("a first write to the new bucket", FAILOVER, || {
        bucket.put("ready", Bytes::from_static(b"yes"))
    })
    .await;
    bucket
        .create("job", Bytes::from_static(b"one"))
        .await
        .expect("create a new key");
    let again = bucket
        .create("job", Bytes::from_static(b"two"))
        .await
        .expect_err("a second create of the same key");
    assert_eq!(again.kind(), kv::CreateErrorKind::AlreadyExists, "{again}");
    let value = bucket.get("job").await.expect("get").expect("the key");
    assert_eq!(value, Bytes::from_static(b"one"));

    // Two members of one queue group, one on server 0 and one on server 2.
    let handled = Arc::new(AtomicUsize::new(0));
    let reversed: Vec<String> = urls.iter().rev().cloned().collect();
    let _a = responder(&urls, "a", handled.clone()).await;
    let _b = responder(&reversed, "b", handled.clone()).await;
    // The group's interest reaches the other servers over the routes.
    eventually("a first request", FAILOVER, || request(&client, "0")).await;
    let before = handled.load(Ordering::SeqCst);
    for i in 1..=10 {
        let payload = i.to_string();
        let answer = request(&client, &payload).await.expect("request");
        assert!(answered_by_a_member(&answer, &payload), "{answer}");
    }
    // A queue group: each request went to one member, not to both.
    assert_eq!(handled.load(Ordering::SeqCst) - before, 10);

    // Server 0 dies: the client moves to another, requests and KV writes go on.
    cluster.kill(0);
    let answer = eventually("a request after the kill", FAILOVER, || {
        request(&client, "after")
    })
    .await;
    assert!(answered_by_a_member(&answer, "after"), "{answer}");
    assert_ne!(client.server_info().port, port_of(&cluster.url(0)));
    eventually("a KV put after the kill", FAILOVER, || {
        bucket.put("job", Bytes::from_static(b"three"))
    })
    .await;

    // Server 0 comes back on its ports and store and catches up: a client of it alone reads
    // the write it missed and reaches the responders.
    cluster.restart(0);
    let only_0 = connect(&[cluster.url(0)]).await;
    assert_eq!(only_0.server_info().server_name, "n0");
    let via_0 = js(&only_0)
        .get_key_value("harness")
        .await
        .expect("the bucket through server 0");
    let value = eventually("a KV get through server 0", FAILOVER, || via_0.get("job")).await;
    assert_eq!(value, Some(Bytes::from_static(b"three")));
    let answer = eventually("a request through server 0", FAILOVER, || {
        request(&only_0, "rejoined")
    })
    .await;
    assert!(answered_by_a_member(&answer, "rejoined"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_stopped_answers_nothing_and_keeps_its_store_across_a_restart() {
    let mut cluster = Cluster::start(1);
    let urls = cluster.urls();
    let client = connect(&urls).await;
    let bucket = js(&client)
        .create_key_value(kv::Config {
            bucket: "single".into(),
            ..Default::default()
        })
        .await
        .expect("create a KV bucket");
    bucket
        .put("job", Bytes::from_static(b"kept"))
        .await
        .expect("put");
    let handled = Arc::new(AtomicUsize::new(0));
    let _a = responder(&urls, "a", handled.clone()).await;
    let answer = eventually("a first request", FAILOVER, || request(&client, "up")).await;
    assert_eq!(answer, "a:up");

    // Stopped, the server holds the connections and answers nothing.
    cluster.stop(0);
    let started = Instant::now();
    let stalled = request(&client, "stopped").await;
    assert!(stalled.is_err(), "a stopped server answered: {stalled:?}");
    assert!(started.elapsed() >= Duration::from_secs(1));
    cluster.cont(0);
    let answer = eventually("a request after SIGCONT", FAILOVER, || {
        request(&client, "continued")
    })
    .await;
    assert_eq!(answer, "a:continued");

    // Killed and started again on its store: the bucket and its key are still there.
    cluster.kill(0);
    cluster.restart(0);
    let value = eventually("a KV get after the restart", FAILOVER, || bucket.get("job")).await;
    assert_eq!(value, Some(Bytes::from_static(b"kept")));
}

/// The port of a `nats://127.0.0.1:PORT` URL.
fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}
