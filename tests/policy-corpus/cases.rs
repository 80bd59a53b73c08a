//! The corpus's format, shared by its two runners: `policy/tests/corpus.rs` (the engine) and
//! `tests/policy_corpus.rs` (the `dsh-host` binary), which include this file with `#[path]`.
//!
//! `cases.toml` in this directory describes the keys and the marker convention.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub const CLASSES: [&str; 10] = [
    "composition",
    "nesting",
    "indirection",
    "code-running-flags",
    "environment",
    "lexical",
    "redirects",
    "limits",
    "wrappers",
    "allowed",
];

pub const VERDICTS: [&str; 3] = ["allow", "ask", "deny"];
pub const CAUSES: [&str; 3] = ["rule", "default", "unanalysable"];

/// The fewest cases the corpus holds, and the fewest of each class.
pub const MIN_CASES: usize = 170;
pub const MIN_PER_CLASS: usize = 10;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    case: Vec<Case>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub class: String,
    pub policy: String,
    pub command: String,
    pub verdict: String,
    #[serde(default)]
    pub cause: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
}

impl Case {
    /// The command with the case directory in place of MARKERDIR and the marker in place of
    /// MARKER (MARKERDIR first: MARKER is a prefix of it).
    pub fn command_in(&self, dir: &str) -> String {
        self.command
            .replace("MARKERDIR", dir)
            .replace("MARKER", &format!("{dir}/marker"))
    }

    /// A case SEMANTICS.md, read to the letter, would let through although it does harm.
    pub fn is_gap(&self) -> bool {
        self.note.as_deref().is_some_and(|n| n.starts_with("GAP:"))
    }

    /// A case whose verdict is the strictest of several readings of SEMANTICS.md.
    pub fn is_ambiguous(&self) -> bool {
        self.note
            .as_deref()
            .is_some_and(|n| n.starts_with("AMBIGUOUS:"))
    }

    /// Whether an allowed run must have created MARKER.new (the command really ran).
    pub fn must_create_new_marker(&self) -> bool {
        self.verdict == "allow" && self.command.contains("touch MARKER.new")
    }

    /// One line naming the case for a failure list: class, policy and the command (escaped, and
    /// shortened when long: the limits cases run to thousands of bytes).
    pub fn label(&self) -> String {
        let mut shown = format!("{:?}", self.command);
        if shown.len() > 160 {
            let cut = (0..=120)
                .rev()
                .find(|&i| shown.is_char_boundary(i))
                .unwrap_or(0);
            shown = format!("{}…\" ({} bytes)", &shown[..cut], self.command.len());
        }
        format!("[{} / {}] {shown}", self.class, self.policy)
    }
}

pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/policy-corpus")
}

/// The policy file a case names by its stem: `policies/STEM.toml`, else `policies/STEM.json`.
pub fn policy_path(stem: &str) -> Option<PathBuf> {
    ["toml", "json"]
        .iter()
        .map(|ext| dir().join("policies").join(format!("{stem}.{ext}")))
        .find(|p| p.is_file())
}

/// Reads `cases.toml` and checks its form (not the verdicts): known classes, verdicts and causes,
/// existing policies, no duplicate, enough cases of each class. Panics listing every problem.
pub fn load() -> Vec<Case> {
    let path = dir().join("cases.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let cases = toml::from_str::<File>(&text)
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
        .case;
    let mut problems = Vec::new();
    let mut seen = HashSet::new();
    for (i, c) in cases.iter().enumerate() {
        let at = format!("case {} {}", i + 1, c.label());
        if !CLASSES.contains(&c.class.as_str()) {
            problems.push(format!("{at}: unknown class {:?}", c.class));
        }
        if !VERDICTS.contains(&c.verdict.as_str()) {
            problems.push(format!("{at}: unknown verdict {:?}", c.verdict));
        }
        match c.cause.as_deref() {
            Some(cause) if !CAUSES.contains(&cause) => {
                problems.push(format!("{at}: unknown cause {cause:?}"))
            }
            Some(_) if c.verdict == "allow" => {
                problems.push(format!("{at}: an allow verdict has no cause"))
            }
            _ => {}
        }
        if policy_path(&c.policy).is_none() {
            problems.push(format!(
                "{at}: no policy file policies/{}.toml or .json",
                c.policy
            ));
        }
        if !seen.insert((c.policy.clone(), c.command.clone())) {
            problems.push(format!("{at}: a duplicate"));
        }
    }
    let per_class = count_per_class(&cases, |_| true);
    for class in CLASSES {
        let n = per_class.get(class).copied().unwrap_or(0);
        if n < MIN_PER_CLASS {
            problems.push(format!(
                "class {class}: {n} cases, fewer than {MIN_PER_CLASS}"
            ));
        }
    }
    if cases.len() < MIN_CASES {
        problems.push(format!("{} cases, fewer than {MIN_CASES}", cases.len()));
    }
    assert!(
        problems.is_empty(),
        "{} is malformed:\n  {}",
        path.display(),
        problems.join("\n  ")
    );
    cases
}

/// How many cases of each class satisfy `pred`.
pub fn count_per_class(cases: &[Case], pred: impl Fn(&Case) -> bool) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for c in cases.iter().filter(|c| pred(c)) {
        *counts.entry(c.class.clone()).or_insert(0) += 1;
    }
    counts
}

/// The summary printed with the results: per class, the cases that passed out of all of them.
pub fn summary(cases: &[Case], failed: &HashSet<usize>) -> String {
    let mut lines = Vec::new();
    for class in CLASSES {
        let total = cases.iter().filter(|c| c.class == class).count();
        let bad = cases
            .iter()
            .enumerate()
            .filter(|(i, c)| c.class == class && failed.contains(i))
            .count();
        lines.push(format!(
            "  {class:<20} {:>4} / {total:<4} passed",
            total - bad
        ));
    }
    let gaps = failed.iter().filter(|&&i| cases[i].is_gap()).count();
    let ambiguous = failed.iter().filter(|&&i| cases[i].is_ambiguous()).count();
    lines.push(format!(
        "  {:<20} {:>4} / {:<4} passed",
        "all",
        cases.len() - failed.len(),
        cases.len()
    ));
    lines.push(format!(
        "  of the {} failures, {gaps} are GAP cases (SEMANTICS.md read to the letter lets them \
         through: it needs a decision) and {ambiguous} AMBIGUOUS ones (the strictest of several \
         readings is expected)",
        failed.len()
    ));
    lines.join("\n")
}
