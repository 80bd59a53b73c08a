//! The attacker's corpus (`tests/policy-corpus`) against the engine: every case's verdict and
//! cause, and the policy files that must load or must fail naming their file and line.
//!
//! The cases run with a fixed fake case directory (nothing is executed here): MARKERDIR is
//! `/work/case`, MARKER `/work/case/marker`, the home `/home/user`. `tests/policy_corpus.rs` runs
//! the same cases through the `dsh-host` binary and checks what they did.

#[path = "../../tests/policy-corpus/cases.rs"]
mod cases;

use std::collections::{HashMap, HashSet};
use std::panic::{self, AssertUnwindSafe};

use cases::Case;
use dsh_policy::{Call, Cause, Grants, Policy, Verdict};

const MARKERDIR: &str = "/work/case";
const HOME: &str = "/home/user";

/// Each malformed file and the line its error must name (`bad-rule.toml:6`): the line of the
/// offending key, value or rule, not of the table or array around it.
const BAD_FILES: &[(&str, u32)] = &[
    ("bad-syntax.toml", 3),
    ("bad-unknown-key.toml", 3),
    ("bad-verdict.toml", 3),
    ("bad-unanalysable.toml", 4),
    ("bad-rule.toml", 6),
    ("bad-syntax.json", 3),
    ("bad-unknown-key.json", 3),
    ("bad-mode.json", 4),
    ("bad-rule.json", 5),
];

/// The files the cases use; each must load on its own.
const GOOD_FILES: &[&str] = &[
    "denylist.toml",
    "allowlist.toml",
    "strict.toml",
    "settings.json",
];

fn read_policy_file(name: &str) -> String {
    let path = cases::dir().join("policies").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn load(name: &str) -> Result<Policy, dsh_policy::LoadError> {
    Policy::from_sources(&[(name.to_string(), read_policy_file(name))])
}

fn cause_kind(cause: &Cause) -> &'static str {
    #[allow(unreachable_patterns)]
    match cause {
        Cause::Rule { .. } => "rule",
        Cause::Default { .. } => "default",
        Cause::Unanalysable { .. } => "unanalysable",
        _ => "(unknown cause)",
    }
}

fn describe_cause(cause: &Cause) -> String {
    #[allow(unreachable_patterns)]
    match cause {
        Cause::Rule {
            rule,
            source,
            message,
        } => match message {
            Some(m) => format!("rule {rule} ({source}): {m}"),
            None => format!("rule {rule} ({source})"),
        },
        Cause::Default { source } => format!("the default ({source})"),
        Cause::Unanalysable { construct } => format!("unanalysable: {construct}"),
        _ => "(unknown cause)".to_string(),
    }
}

/// The verdict's name, its cause's kind and a description for the failure list.
fn describe(verdict: &Verdict) -> (&'static str, Option<&'static str>, String) {
    #[allow(unreachable_patterns)]
    match verdict {
        Verdict::Allow => ("allow", None, "allow".to_string()),
        Verdict::Ask(f) | Verdict::Deny(f) => {
            let name = if matches!(verdict, Verdict::Ask(_)) {
                "ask"
            } else {
                "deny"
            };
            let mut text = format!("{name}: part {:?}, {}", f.part, describe_cause(&f.cause));
            if let Some(rule) = &f.allow_rule {
                text.push_str(&format!(", allow rule {rule}"));
            }
            (name, Some(cause_kind(&f.cause)), text)
        }
        _ => ("(unknown verdict)", None, "(unknown verdict)".to_string()),
    }
}

/// What the case expects, as its failure line shows it.
fn expected(case: &Case) -> String {
    match &case.cause {
        Some(cause) => format!("{} ({cause})", case.verdict),
        None => case.verdict.clone(),
    }
}

#[test]
fn corpus_is_well_formed() {
    let cases = cases::load();
    let per_class = cases::count_per_class(&cases, |_| true);
    eprintln!("{} cases: {per_class:?}", cases.len());
}

#[test]
fn every_case_gets_the_verdict_semantics_md_implies() {
    let cases = cases::load();
    let mut policies: HashMap<String, Result<Policy, String>> = HashMap::new();
    let mut failures = Vec::new();
    let mut failed = HashSet::new();
    for (i, case) in cases.iter().enumerate() {
        let policy = policies.entry(case.policy.clone()).or_insert_with(|| {
            let path = cases::policy_path(&case.policy).expect("checked by cases::load");
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            load(&name).map_err(|e| format!("policy {name} does not load: {e}"))
        });
        let policy = match policy {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("{}\n      {e}", case.label()));
                failed.insert(i);
                continue;
            }
        };
        let command = case.command_in(MARKERDIR);
        let call = Call {
            command: &command,
            cwd: MARKERDIR,
            home: Some(HOME),
        };
        // One panicking case must not hide the others.
        let got = panic::catch_unwind(AssertUnwindSafe(|| {
            policy.evaluate(&call, &Grants::default())
        }));
        let problem = match got {
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                Some(format!("evaluate panicked: {msg}"))
            }
            Ok(verdict) => {
                let (name, cause, text) = describe(&verdict);
                let cause_ok = case.cause.is_none() || case.cause.as_deref() == cause;
                (name != case.verdict || !cause_ok).then_some(text)
            }
        };
        if let Some(got) = problem {
            let note = case
                .note
                .as_deref()
                .map(|n| format!("\n      note: {n}"))
                .unwrap_or_default();
            failures.push(format!(
                "{}\n      expected {}, got {got}{note}",
                case.label(),
                expected(case)
            ));
            failed.insert(i);
        }
    }
    let summary = cases::summary(&cases, &failed);
    if failures.is_empty() {
        eprintln!("engine corpus:\n{summary}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus cases got another verdict than SEMANTICS.md implies:\n  {}\n\n{summary}",
        failures.len(),
        cases.len(),
        failures.join("\n  ")
    );
}

#[test]
fn bad_policy_files_fail_naming_the_file_and_line() {
    let on_disk: HashSet<String> = std::fs::read_dir(cases::dir().join("policies"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("bad-"))
        .collect();
    let listed: HashSet<String> = BAD_FILES.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(
        on_disk, listed,
        "every bad-* file in policies/ needs its expected line in BAD_FILES, and only those"
    );
    let mut failures = Vec::new();
    for &(name, line) in BAD_FILES {
        match load(name) {
            Ok(_) => failures.push(format!("{name}: loaded, but it is malformed")),
            Err(e) => {
                let msg = e.to_string();
                let at = format!("{name}:{line}");
                // `bad-x.toml:3` or `bad-x.toml:3:15`, not `bad-x.toml:30`.
                let named = msg
                    .match_indices(&at)
                    .any(|(i, _)| !msg[i + at.len()..].starts_with(|c: char| c.is_ascii_digit()));
                if !named {
                    failures.push(format!("{name}: the error does not name {at}: {msg}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_corpus_policies_load() {
    let mut failures = Vec::new();
    for name in GOOD_FILES {
        if let Err(e) = load(name) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
