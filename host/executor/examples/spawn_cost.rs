use dsh_executor::*;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = 300;
    let mode = std::env::args().nth(1).unwrap_or_default();
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let mut config = Config::default();
    if mode == "subreaper" {
        config.containment = ContainmentPreference::Subreaper;
    }
    let exec = LocalExecutor::new(config, tx).unwrap();
    println!("{}", exec.containment());
    let mut floor = vec![];
    let mut ours = vec![];
    for _ in 0..n {
        let t = Instant::now();
        std::process::Command::new("bash")
            .args(["-c", "true"])
            .status()
            .unwrap();
        floor.push(t.elapsed());
        let spec = Spec {
            command: "true".into(),
            workdir: "/tmp".into(),
            timeout_ms: 10000.0,
            owner: None,
        };
        let t = Instant::now();
        let r = exec.run(spec, CancellationToken::new()).await.unwrap();
        ours.push(t.elapsed());
        assert_eq!(r.exit_code, Some(0));
    }
    let (f, o) = (median(floor), median(ours));
    println!(
        "floor {:?} executor {:?} ratio {:.3}",
        f,
        o,
        o.as_secs_f64() / f.as_secs_f64()
    );
    exec.shutdown().await;
}
