//! Times the engine on the benchmark's workload (`host/benches/workloads.rs`, `policy_overhead`):
//! a 10 KB command against a 200-rule policy, the median of 200 evaluations.
//!
//! `cargo run --release -p dsh-policy --example timing` prints the median; with the argument
//! `once` it evaluates once and prints nothing (for a profiler: `valgrind --tool=callgrind`).
use std::time::{Duration, Instant};

/// The benchmark's policy file (a copy of its `policy_file`).
fn policy_file() -> String {
    let mut deny = Vec::new();
    let mut ask = Vec::new();
    let mut allow = Vec::new();
    for i in 0..66 {
        deny.push(format!("\"Bash(tool{i} --dangerous *)\""));
        ask.push(format!("\"Bash(deploy{i} *)\""));
        allow.push(format!("\"Bash(build{i} --target * --release)\""));
    }
    deny.push("\"Write(~/.bashrc)\"".to_string());
    allow.push("\"Bash(true)\"".to_string());
    format!(
        "[permissions]\ndefault = \"ask\"\ndeny = [{}]\nask = [{}]\nallow = [{}]\n",
        deny.join(", "),
        ask.join(", "),
        allow.join(", ")
    )
}

fn main() {
    let policy = dsh_policy::Policy::from_sources(&[("bench.toml".into(), policy_file())]).unwrap();
    assert_eq!(policy.rule_count(), 200);
    let unit = "cd src && build3 --target x86_64 --release | grep -v 'warning: unused' > /dev/null; \
                echo \"$(git rev-parse HEAD)\" && ls -la \"dir with spaces\" || true\n";
    let mut command = String::new();
    while command.len() < 10 * 1024 {
        command.push_str(unit);
    }
    let call = dsh_policy::Call {
        command: &command,
        cwd: "/work",
        home: Some("/home/user"),
    };
    let grants = dsh_policy::Grants::default();
    if std::env::args().nth(1).as_deref() == Some("once") {
        let verdict = policy.evaluate(&call, &grants);
        assert!(matches!(verdict, dsh_policy::Verdict::Ask(_)));
        return;
    }
    let mut times: Vec<Duration> = (0..200)
        .map(|_| {
            let t = Instant::now();
            let verdict = policy.evaluate(&call, &grants);
            let elapsed = t.elapsed();
            assert!(
                matches!(verdict, dsh_policy::Verdict::Ask(_)),
                "{verdict:?}"
            );
            elapsed
        })
        .collect();
    times.sort();
    let t = Instant::now();
    for _ in 0..20 {
        dsh_policy::command_names(&command);
    }
    println!(
        "{} KB command against {} rules: median evaluation {:.3} ms (segments alone: {:.3} ms)",
        command.len() / 1024,
        policy.rule_count(),
        times[times.len() / 2].as_secs_f64() * 1e3,
        (t.elapsed() / 20).as_secs_f64() * 1e3,
    );
}
