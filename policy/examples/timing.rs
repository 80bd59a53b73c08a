//! Times the engine's phases on a 10 KB command: `cargo run --release -p dsh-policy --example timing`.
use std::time::Instant;
fn main() {
    let unit = "cd src && build3 --target x86_64 --release | grep -v 'warning: unused' > /dev/null; echo \"$(git rev-parse HEAD)\" && ls -la \"dir with spaces\" || true\n";
    let mut command = String::new();
    while command.len() < 10 * 1024 {
        command.push_str(unit);
    }
    let t = Instant::now();
    for _ in 0..20 {
        let mut p = brush_parser::Parser::new(command.as_bytes(), &Default::default());
        p.parse_program().unwrap();
    }
    println!("parse: {:?}", t.elapsed() / 20);
    let t = Instant::now();
    for _ in 0..20 {
        dsh_policy::command_names(&command);
    }
    println!("segments: {:?}", t.elapsed() / 20);
    let mut rules = Vec::new();
    for i in 0..66 {
        rules.push(format!("deny = \"Bash(tool{i} --dangerous *)\""));
    }
    let mut text = String::from("[permissions]\ndefault = \"ask\"\ndeny = [");
    text.push_str(
        &(0..66)
            .map(|i| format!("\"Bash(tool{i} --dangerous *)\""))
            .collect::<Vec<_>>()
            .join(", "),
    );
    text.push_str("]\nask = [");
    text.push_str(
        &(0..66)
            .map(|i| format!("\"Bash(deploy{i} *)\""))
            .collect::<Vec<_>>()
            .join(", "),
    );
    text.push_str("]\nallow = [");
    text.push_str(
        &(0..67)
            .map(|i| format!("\"Bash(build{i} --target * --release)\""))
            .collect::<Vec<_>>()
            .join(", "),
    );
    text.push_str(", \"Write(~/.bashrc)\"]\n");
    let policy = dsh_policy::Policy::from_sources(&[("b.toml".into(), text)]).unwrap();
    let call = dsh_policy::Call {
        command: &command,
        cwd: "/w",
        home: Some("/h"),
    };
    let t = Instant::now();
    for _ in 0..20 {
        policy.evaluate(&call, &Default::default());
    }
    println!(
        "evaluate ({} rules): {:?}",
        policy.rule_count(),
        t.elapsed() / 20
    );
}
