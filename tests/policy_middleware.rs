//! The policy middleware component decides as the host does: every case of the attacker's
//! corpus (`tests/policy-corpus`), given to the component's exported `bash-executor.run` and
//! `start`, is passed to the imported executor exactly when `dsh-policy` allows it natively, and
//! refused (or asked) with the very refusal and question the host words (`dsh_policy::decide`).
//! The component runs alone here, in wasmtime, in front of a recording executor and an
//! `approval` import that plays the person.
//!
//! Needs `wac` for compose.sh (installed into the checkout on first use; see
//! `support/provision.rs`).

#[path = "policy-corpus/cases.rs"]
mod cases;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/policy_component.rs"]
mod policy_component;
#[path = "support/provision.rs"]
mod provision;

use std::collections::HashMap;

use dsh_policy::decide::{self, Answer, RefusedKind};
use dsh_policy::{Call, Grants, Policy, Verdict};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store};

wasmtime::component::bindgen!({
    path: "../wit",
    world: "dsh:bash/policy-middleware",
    additional_derives: [PartialEq],
});

use dsh::bash::approval;
use dsh::bash::bash_executor as inner;
use exports::dsh::bash::bash_executor as outer;

const MARKERDIR: &str = "/work/case";
const HOME: &str = "/home/user";
const OWNER: &str = "session-a";

/// What the imports saw and how the person answers.
struct Host {
    files: Vec<approval::PolicyFile>,
    grants: Vec<String>,
    answer: approval::Answer,
    asked: Vec<approval::Question>,
    ran: Vec<inner::Spec>,
    started: Vec<inner::Spec>,
    /// What `run` and `start` answer of a move of the session to another node.
    relocated: Option<inner::Relocation>,
}

impl Host {
    fn new(files: Vec<approval::PolicyFile>, answer: approval::Answer) -> Self {
        Self {
            files,
            grants: Vec::new(),
            answer,
            asked: Vec::new(),
            ran: Vec::new(),
            relocated: None,
            started: Vec::new(),
        }
    }
}

fn task(spec: &inner::Spec) -> inner::Task {
    inner::Task {
        id: "bash-1".into(),
        command: spec.command.clone(),
        owner: spec.owner.clone(),
        state: inner::TaskState::Running,
        exit_code: None,
        signal: None,
        relocated: None,
    }
}

fn no_denials() -> inner::Denials {
    inner::Denials {
        first: Vec::new(),
        more: 0,
    }
}

impl inner::Host for Host {
    fn current_limits(&mut self) -> inner::Limits {
        inner::Limits {
            default_timeout_ms: 120_000.0,
            max_timeout_ms: 600_000.0,
            max_output_bytes: 30_000,
            grace_ms: 2_000.0,
            sandbox: None,
        }
    }
    fn resolve(&mut self, req: inner::Request) -> Result<inner::Spec, inner::ExecutorError> {
        Ok(inner::Spec {
            command: req.command,
            workdir: req.workdir.unwrap_or_else(|| MARKERDIR.into()),
            timeout_ms: req.timeout_ms.unwrap_or(120_000.0),
            owner: req.owner,
        })
    }
    fn run(&mut self, spec: inner::Spec) -> Result<inner::RunResult, inner::ExecutorError> {
        self.ran.push(spec);
        let empty = || inner::StreamOutput {
            text: String::new(),
            truncated: false,
            spill_path: None,
            spill_evicted: false,
        };
        Ok(inner::RunResult {
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            aborted: false,
            timeout_ms: 120_000.0,
            stdout: empty(),
            stderr: empty(),
            leftover_processes: 0,
            yielded: None,
            denials: no_denials(),
            relocated: self.relocated.clone(),
        })
    }
    fn start(&mut self, spec: inner::Spec) -> Result<inner::Task, inner::ExecutorError> {
        let t = inner::Task {
            relocated: self.relocated.clone(),
            ..task(&spec)
        };
        self.started.push(spec);
        Ok(t)
    }
    fn read_output(&mut self, id: String) -> Result<inner::Read, inner::ExecutorError> {
        Err(inner::ExecutorError::UnknownTask(id))
    }
    fn kill(&mut self, id: String) -> Result<bool, inner::ExecutorError> {
        Err(inner::ExecutorError::UnknownTask(id))
    }
    fn owner_of(&mut self, _id: String) -> Option<String> {
        None
    }
    fn get(&mut self, id: String) -> Result<inner::Task, inner::ExecutorError> {
        Err(inner::ExecutorError::UnknownTask(id))
    }
    fn list_tasks(&mut self) -> Vec<inner::Task> {
        Vec::new()
    }
}

impl approval::Host for Host {
    fn policy_files(&mut self) -> Vec<approval::PolicyFile> {
        self.files.clone()
    }
    fn home(&mut self) -> Option<String> {
        Some(HOME.into())
    }
    fn grants(&mut self, _owner: Option<String>) -> Vec<String> {
        self.grants.clone()
    }
    fn ask(&mut self, q: approval::Question) -> approval::Answer {
        self.asked.push(q);
        self.answer
    }
}

struct Middleware {
    engine: Engine,
    pre: PolicyMiddlewarePre<Host>,
}

impl Middleware {
    /// Compiled once per test process: a debug build of wasmtime compiles slowly.
    fn load() -> &'static Self {
        static LOADED: std::sync::OnceLock<Middleware> = std::sync::OnceLock::new();
        LOADED.get_or_init(Self::compile)
    }

    fn compile() -> Self {
        let engine = Engine::default();
        let component = Component::from_file(&engine, policy_component::middleware_file())
            .expect("the middleware component compiles");
        let mut linker = Linker::new(&engine);
        PolicyMiddleware::add_to_linker::<_, HasSelf<Host>>(&mut linker, |h| h).unwrap();
        let pre = PolicyMiddlewarePre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
        Self { engine, pre }
    }

    /// A fresh instance serving `host`.
    fn instance(&self, host: Host) -> (Store<Host>, PolicyMiddleware) {
        let mut store = Store::new(&self.engine, host);
        let instance = self.pre.instantiate(&mut store).unwrap();
        (store, instance)
    }
}

fn spec(command: &str) -> outer::Spec {
    outer::Spec {
        command: command.into(),
        workdir: MARKERDIR.into(),
        timeout_ms: 120_000.0,
        owner: Some(OWNER.into()),
    }
}

fn file(name: &str, text: &str) -> approval::PolicyFile {
    approval::PolicyFile {
        name: name.into(),
        text: text.into(),
    }
}

/// The refusal the host words, as the component's WIT type.
fn expected_refusal(r: decide::Refused, waited_ms: Option<u32>) -> outer::PolicyRefusal {
    outer::PolicyRefusal {
        kind: match r.kind {
            RefusedKind::Denied => outer::RefusalKind::Denied,
            RefusedKind::Declined => outer::RefusalKind::Declined,
            RefusedKind::TimedOut => outer::RefusalKind::TimedOut,
            RefusedKind::CannotAsk => outer::RefusalKind::CannotAsk,
            RefusedKind::NotAnalysable => outer::RefusalKind::NotAnalysable,
        },
        part: r.part,
        rule: r.rule,
        source: r.source,
        message: r.message,
        allow_rule: r.allow_rule,
        waited_ms,
    }
}

fn expected_question(q: decide::Question) -> approval::Question {
    approval::Question {
        owner: Some(OWNER.into()),
        command: q.command,
        cwd: q.cwd,
        parts: q.parts,
        rule: q.rule,
        source: q.source,
        construct: q.construct,
        session_rule: q.session_rule,
    }
}

/// The refusal of a call, or none when it reached the executor; panics on anything else.
fn refusal_of(result: Result<(), outer::ExecutorError>) -> Option<outer::PolicyRefusal> {
    match result {
        Ok(()) => None,
        Err(outer::ExecutorError::Refused(r)) => Some(r),
        Err(other) => panic!("neither passed nor refused: {other:?}"),
    }
}

#[test]
fn the_middleware_decides_every_corpus_case_as_the_host_does() {
    let middleware = Middleware::load();
    let cases = cases::load();
    let mut policies: HashMap<String, (approval::PolicyFile, Policy)> = HashMap::new();
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let (policy_file, policy) = policies.entry(case.policy.clone()).or_insert_with(|| {
            let path = cases::policy_path(&case.policy).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            let policy = Policy::from_sources(&[(name.clone(), text.clone())]).unwrap();
            (file(&name, &text), policy)
        });
        let command = case.command_in(MARKERDIR);
        let call = Call {
            command: &command,
            cwd: MARKERDIR,
            home: Some(HOME),
        };
        let native = policy.evaluate(&call, &Grants::default());
        // Odd cases go through `start`, even ones through `run`: both are checked.
        let through_start = i % 2 == 1;
        let (mut store, instance) = middleware.instance(Host::new(
            vec![policy_file.clone()],
            approval::Answer::CannotAsk,
        ));
        let ex = instance.dsh_bash_bash_executor();
        let result = if through_start {
            ex.call_start(&mut store, &spec(&command))
                .unwrap()
                .map(drop)
        } else {
            ex.call_run(&mut store, &spec(&command)).unwrap().map(drop)
        };
        let host = store.data();
        let passed = host.ran.len() + host.started.len();
        let (want_refusal, want_question) = match native {
            Verdict::Allow => (None, None),
            Verdict::Deny(f) => (Some(expected_refusal(decide::refusal(f, None), None)), None),
            Verdict::Ask(f) => (
                Some(expected_refusal(
                    decide::refusal(f.clone(), Some(Answer::CannotAsk)),
                    None,
                )),
                Some(expected_question(decide::question(&f, &command, MARKERDIR))),
            ),
        };
        let got_refusal = refusal_of(result);
        let ok = got_refusal == want_refusal
            && host.asked.first() == want_question.as_ref()
            && host.asked.len() <= 1
            && passed == usize::from(want_refusal.is_none());
        if !ok {
            failures.push(format!(
                "{}\n    native: refusal {want_refusal:?}, question {want_question:?}\n    component: refusal {got_refusal:?}, asked {:?}, reached the executor {passed} times",
                case.label(),
                host.asked
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    eprintln!("{} corpus cases decided alike", cases.len());
}

const ASKING: &str = r#"
[permissions]
allow = ["Bash(echo *)"]
ask = ["Bash(git push *)"]
deny = ["Bash(rm *)"]
default = "deny"
"#;

#[test]
fn an_approved_command_runs_once_and_other_answers_refuse_as_the_host_words_them() {
    let middleware = Middleware::load();
    let policy_file = file("p.toml", ASKING);
    let command = "git push origin main";
    let native = Policy::from_sources(&[("p.toml".into(), ASKING.into())]).unwrap();
    let Verdict::Ask(finding) = native.evaluate(
        &Call {
            command,
            cwd: MARKERDIR,
            home: Some(HOME),
        },
        &Grants::default(),
    ) else {
        panic!("the policy asks about {command}");
    };
    let cases = [
        (approval::Answer::Once, None),
        (approval::Answer::Session, None),
        (
            approval::Answer::Declined,
            Some(expected_refusal(
                decide::refusal(finding.clone(), Some(Answer::Declined)),
                None,
            )),
        ),
        (
            approval::Answer::TimedOut(1234),
            Some(expected_refusal(
                decide::refusal(finding.clone(), Some(Answer::TimedOut)),
                Some(1234),
            )),
        ),
    ];
    for (answer, want) in cases {
        let (mut store, instance) =
            middleware.instance(Host::new(vec![policy_file.clone()], answer));
        let result = instance
            .dsh_bash_bash_executor()
            .call_run(&mut store, &spec(command))
            .unwrap()
            .map(drop);
        assert_eq!(refusal_of(result), want, "answer {answer:?}");
        let host = store.data();
        assert_eq!(host.asked.len(), 1, "answer {answer:?}: asked once");
        assert_eq!(
            host.ran.len(),
            usize::from(want.is_none()),
            "answer {answer:?}"
        );
        if let Some(r) = host.ran.first() {
            assert_eq!(
                r.command, command,
                "the command reaches the executor unchanged"
            );
        }
    }

    // A session grant the host recorded lets a command the default would ask about through
    // without a question (an ask rule asks whatever was granted).
    let lenient = "[permissions]\ndeny = [\"Bash(rm *)\"]\ndefault = \"ask\"\n";
    let native = Policy::from_sources(&[("l.toml".into(), lenient.into())]).unwrap();
    let Verdict::Ask(finding) = native.evaluate(
        &Call {
            command: "make test",
            cwd: MARKERDIR,
            home: Some(HOME),
        },
        &Grants::default(),
    ) else {
        panic!("the default asks");
    };
    let mut host = Host::new(vec![file("l.toml", lenient)], approval::Answer::Declined);
    host.grants = vec![finding.session_rule.clone().expect("a session rule")];
    let (mut store, instance) = middleware.instance(host);
    let result = instance
        .dsh_bash_bash_executor()
        .call_run(&mut store, &spec("make   test -j4"))
        .unwrap()
        .map(drop);
    assert_eq!(refusal_of(result), None);
    assert!(store.data().asked.is_empty());
    // A grant never lifts a deny.
    let mut host = Host::new(vec![file("l.toml", lenient)], approval::Answer::Once);
    host.grants = vec!["Bash(rm *)".into()];
    let (mut store, instance) = middleware.instance(host);
    let result = instance
        .dsh_bash_bash_executor()
        .call_run(&mut store, &spec("rm -rf /work/case"))
        .unwrap()
        .map(drop);
    assert_eq!(
        refusal_of(result).map(|r| r.kind),
        Some(outer::RefusalKind::Denied)
    );
    assert!(store.data().ran.is_empty() && store.data().asked.is_empty());
}

#[test]
fn files_that_do_not_load_refuse_every_command_and_fail_the_check() {
    let middleware = Middleware::load();
    let bad = file(
        "bad.toml",
        "[permissions]\nallow = [\"Bash(echo *)\"]\nbogus = 1\n",
    );
    let (mut store, instance) =
        middleware.instance(Host::new(vec![bad.clone()], approval::Answer::Once));
    let result = instance
        .dsh_bash_bash_executor()
        .call_run(&mut store, &spec("echo hi"))
        .unwrap();
    match result {
        Err(outer::ExecutorError::Internal(m)) => {
            assert!(
                m.starts_with("the policy files do not load: bad.toml:3: "),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(store.data().ran.is_empty());
    let checked = instance
        .dsh_bash_policy_check()
        .call_check(&mut store, &[bad])
        .unwrap();
    assert!(
        checked
            .as_ref()
            .is_err_and(|e| e.starts_with("bad.toml:3: ")),
        "{checked:?}"
    );
    let good = instance
        .dsh_bash_policy_check()
        .call_check(&mut store, &[file("p.toml", ASKING)])
        .unwrap();
    assert_eq!(good, Ok(3));
}

/// The operations that start nothing pass through to the imported executor.
#[test]
fn the_other_operations_pass_through() {
    let middleware = Middleware::load();
    let (mut store, instance) = middleware.instance(Host::new(
        vec![file("p.toml", ASKING)],
        approval::Answer::Once,
    ));
    let ex = instance.dsh_bash_bash_executor();
    let limits = ex.call_current_limits(&mut store).unwrap();
    assert_eq!(limits.max_timeout_ms, 600_000.0);
    let resolved = ex
        .call_resolve(
            &mut store,
            &outer::Request {
                command: "rm -rf /".into(),
                workdir: None,
                timeout_ms: None,
                owner: Some(OWNER.into()),
            },
        )
        .unwrap()
        .unwrap();
    assert_eq!(resolved.workdir, MARKERDIR);
    assert!(matches!(
        ex.call_read_output(&mut store, "bash-7").unwrap(),
        Err(outer::ExecutorError::UnknownTask(id)) if id == "bash-7"
    ));
    assert_eq!(ex.call_owner_of(&mut store, "bash-7").unwrap(), None);
    assert!(ex.call_list_tasks(&mut store).unwrap().is_empty());
    assert!(store.data().asked.is_empty() && store.data().ran.is_empty());
}

#[test]
fn a_move_of_the_session_passes_through_run_and_start() {
    let middleware = Middleware::load();
    let mut host = Host::new(vec![file("p.toml", ASKING)], approval::Answer::Once);
    host.relocated = Some(inner::Relocation {
        from_node: "n0".into(),
        to_node: "n1".into(),
        reason: inner::RelocationReason::NodeRestarted,
    });
    let (mut store, instance) = middleware.instance(host);
    let ex = instance.dsh_bash_bash_executor();
    let moved = Some(outer::Relocation {
        from_node: "n0".into(),
        to_node: "n1".into(),
        reason: outer::RelocationReason::NodeRestarted,
    });
    let ran = ex.call_run(&mut store, &spec("echo hi")).unwrap().unwrap();
    assert_eq!(ran.relocated, moved);
    let started = ex
        .call_start(&mut store, &spec("echo hi"))
        .unwrap()
        .unwrap();
    assert_eq!(started.relocated, moved);
}
