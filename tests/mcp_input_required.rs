//! Permission questions to clients of MCP revision 2026-07-28 (no server-to-client requests):
//! a call that needs approval is answered with an input-required result and runs only when the
//! client calls again with the person's answer and the sealed request state. Raw JSON-RPC over
//! the real binary's stdio, so that every field a client controls can be altered; each case
//! checks on disk what ran (a line appended to a counter file per run).

#[allow(dead_code)]
#[path = "support/mcp_child.rs"]
mod mcp_child;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

/// The first answer waits for the component to load (and, on a cold cache, to compile).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(180);

const KEY: &str = "dsh-permission";

/// A scratch directory holding the policy (`default = "ask"`, `ls` allowed).
struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("policy.toml"),
            "[permissions]\ndefault = \"ask\"\nallow = [\"Bash(ls *)\"]\n",
        )
        .unwrap();
        World { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A server on this world, with `extra` flags.
    fn server(&self, extra: &[&str]) -> Server {
        let policy = self.path().join("policy.toml");
        let cwd = self.path().to_str().unwrap().to_string();
        let mut args = vec![
            "--policy".to_string(),
            policy.to_str().unwrap().to_string(),
            "--cwd".to_string(),
            cwd,
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache");
        Server(mcp_child::spawn(args, &cache))
    }

    /// How many times the command `run(name)` ran.
    fn runs(&self, name: &str) -> usize {
        std::fs::read_to_string(self.path().join(name))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }
}

/// A command that leaves one line in `name` each time it runs (no rule allows it: asked).
fn run(name: &str) -> Value {
    json!({ "command": format!("echo ran >> {name}"), "description": "Record a run" })
}

/// The `_meta` of a 2026-07-28 request, from a client that can ask (`elicitation`) or not.
fn meta(elicitation: bool) -> Value {
    let capabilities = match elicitation {
        true => json!({ "elicitation": { "form": {} } }),
        false => json!({}),
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// The person's answer, as a client puts it under the question's key.
fn answer(action: &str, decision: Option<&str>) -> Value {
    let mut result = json!({ "action": action });
    if let Some(decision) = decision {
        result["content"] = json!({ "decision": decision });
    }
    json!({ KEY: result })
}

struct Server(mcp_child::McpChild);

impl Server {
    /// The whole response to a `tools/call` of `bash` with `arguments` and `extra` params.
    fn call(&mut self, arguments: &Value, extra: Value) -> Value {
        let mut params = json!({ "name": "bash", "arguments": arguments, "_meta": meta(true) });
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        let id = self.0.request("tools/call", params).unwrap();
        self.0.response(id, STARTUP_TIMEOUT).unwrap()
    }

    /// The request state of the input-required result of a first call with `arguments`.
    fn asked(&mut self, arguments: &Value) -> String {
        let response = self.call(arguments, json!({}));
        let result = &response["result"];
        assert_eq!(result["resultType"], "input_required", "{response}");
        result["requestState"].as_str().unwrap().to_string()
    }

    /// The retry of `arguments` with `state` and `responses`.
    fn retry(&mut self, arguments: &Value, state: &str, responses: Value) -> Value {
        self.call(
            arguments,
            json!({ "requestState": state, "inputResponses": responses }),
        )
    }
}

/// The text of a complete tool result, and whether it is an error.
fn text(response: &Value) -> (String, bool) {
    let result = &response["result"];
    assert_eq!(result["resultType"], "complete", "{response}");
    (
        result["content"][0]["text"].as_str().unwrap().to_string(),
        result["isError"].as_bool().unwrap(),
    )
}

/// The message of an error response: invalid params.
fn refused(response: &Value) -> String {
    assert_eq!(response["error"]["code"], -32602, "{response}");
    response["error"]["message"].as_str().unwrap().to_string()
}

/// The question is the same form an older client gets as `elicitation/create`, nothing runs
/// before the answer, and "allow once" runs the command once.
#[test]
fn a_call_is_asked_through_its_result_and_runs_once_on_the_answer() {
    let world = World::new();
    let mut server = world.server(&[]);
    let response = server.call(&run("once"), json!({}));
    let result = &response["result"];
    assert_eq!(result["resultType"], "input_required", "{response}");
    let request = &result["inputRequests"][KEY];
    assert_eq!(request["method"], "elicitation/create", "{response}");
    let message = request["params"]["message"].as_str().unwrap();
    assert!(message.contains("    echo ran >> once\n"), "{message}");
    assert!(
        message.contains(&format!("Working directory: {}", world.path().display())),
        "{message}"
    );
    let choices = &request["params"]["requestedSchema"]["properties"]["decision"]["oneOf"];
    assert_eq!(choices[0]["const"], "allow_once", "{response}");
    assert_eq!(world.runs("once"), 0, "nothing runs before the answer");

    let state = result["requestState"].as_str().unwrap();
    let done = server.retry(&run("once"), state, answer("accept", Some("allow_once")));
    assert_eq!(text(&done), ("(no output)".to_string(), false));
    assert_eq!(world.runs("once"), 1);

    // Once means once: the same command is asked again.
    server.asked(&run("once"));
    assert_eq!(world.runs("once"), 1);
}

/// "For this session" runs the command and lets later matches run unasked in this session.
#[test]
fn an_answer_for_the_session_grants_its_rule() {
    let world = World::new();
    let mut server = world.server(&[]);
    let touch = |name: &str| json!({ "command": format!("touch ./{name}"), "description": "d" });
    let response = server.call(&touch("s1"), json!({}));
    let choices = &response["result"]["inputRequests"][KEY]["params"]["requestedSchema"]["properties"]
        ["decision"]["oneOf"];
    assert_eq!(choices[1]["const"], "allow_for_session", "{response}");
    assert_eq!(
        choices[1]["title"], "Allow Bash(touch *) for the rest of this session",
        "{response}"
    );
    let state = response["result"]["requestState"].as_str().unwrap();
    let done = server.retry(
        &touch("s1"),
        state,
        answer("accept", Some("allow_for_session")),
    );
    assert!(!text(&done).1, "{done}");
    let unasked = server.call(&touch("s2"), json!({}));
    assert!(!text(&unasked).1, "{unasked}");
    assert!(world.path().join("s1").exists() && world.path().join("s2").exists());
    // Another session is asked.
    let mut other = world.server(&[]);
    other.asked(&touch("s3"));
    assert!(!world.path().join("s3").exists());
}

/// Declining, cancelling and an answer that is not among the choices refuse the command with
/// the tools' words for a declined question; nothing runs.
#[test]
fn a_declined_question_refuses_the_command() {
    let world = World::new();
    let mut server = world.server(&[]);
    for reply in [
        answer("decline", None),
        answer("cancel", None),
        answer("accept", Some("allow_always")),
        answer("accept", Some("deny")),
    ] {
        let state = server.asked(&run("declined"));
        let done = server.retry(&run("declined"), &state, reply.clone());
        let (text, is_error) = text(&done);
        assert!(is_error, "{reply}: {text}");
        assert!(text.starts_with("[policy: declined"), "{reply}: {text}");
    }
    assert_eq!(world.runs("declined"), 0);
}

/// A client that did not declare elicitation is refused as one that cannot ask, at once.
#[test]
fn a_client_without_elicitation_cannot_be_asked() {
    let world = World::new();
    let mut server = world.server(&[]);
    let response = server.call(&run("noask"), json!({ "_meta": meta(false) }));
    let (text, is_error) = text(&response);
    assert!(is_error);
    assert!(
        text.contains("this client cannot ask the user")
            && text.contains("An operator can allow it with the rule"),
        "{text}"
    );
    assert_eq!(world.runs("noask"), 0);
}

/// The state is good for one call of these arguments in this session, before its expiry: a
/// replayed, changed, tampered or foreign state is refused and runs nothing; so are answers
/// without a state, a state without an answer, and an answer that is no elicitation result.
#[test]
fn a_request_state_is_sealed_bound_and_single_use() {
    let world = World::new();
    let mut server = world.server(&[]);
    let yes = || answer("accept", Some("allow_once"));

    // Replayed after its use.
    let state = server.asked(&run("replay"));
    assert!(!text(&server.retry(&run("replay"), &state, yes())).1);
    let again = refused(&server.retry(&run("replay"), &state, yes()));
    assert!(
        again.starts_with("the requestState was already used"),
        "{again}"
    );
    assert_eq!(world.runs("replay"), 1, "a replay runs nothing");

    // Presented with other arguments: the approved command was `… >> asked`.
    let state = server.asked(&run("asked"));
    let changed = refused(&server.retry(&run("changed"), &state, yes()));
    assert!(
        changed.starts_with("the requestState does not verify"),
        "{changed}"
    );
    let description = json!({ "command": "echo ran >> asked", "description": "Other" });
    refused(&server.retry(&description, &state, yes()));
    // Still pending, and still good for its own arguments.
    assert!(!text(&server.retry(&run("asked"), &state, yes())).1);
    assert_eq!((world.runs("changed"), world.runs("asked")), (0, 1));

    // Tampered with: each part of it altered in turn.
    let state = server.asked(&run("tampered"));
    for at in [4, state.len() / 2, state.len() - 2] {
        let mut bytes = state.clone().into_bytes();
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(bytes).unwrap();
        refused(&server.retry(&run("tampered"), &altered, yes()));
    }
    refused(&server.retry(&run("tampered"), "rs1.forged.state", yes()));

    // Without the answer, an answer without the state, an answer that is not one.
    let missing = refused(&server.retry(&run("tampered"), &state, json!({})));
    assert!(missing.contains("holds no answer"), "{missing}");
    let not_result = refused(&server.retry(&run("tampered"), &state, json!({ KEY: 7 })));
    assert!(
        not_result.contains("not an elicitation result"),
        "{not_result}"
    );
    let stateless = server.call(&run("tampered"), json!({ "inputResponses": yes() }));
    assert!(refused(&stateless).starts_with("inputResponses without the requestState"));
    assert_eq!(world.runs("tampered"), 0);

    // Another session (another server process) cannot use it.
    let mut other = world.server(&[]);
    let foreign = refused(&other.retry(&run("tampered"), &state, yes()));
    assert!(
        foreign.starts_with("the requestState does not verify"),
        "{foreign}"
    );
    assert_eq!(world.runs("tampered"), 0);
    // Where the answer was not used up by the errors above, it still runs here, once.
    assert!(!text(&server.retry(&run("tampered"), &state, yes())).1);
    assert_eq!(world.runs("tampered"), 1);
}

/// An answer that comes back after the ask timeout refuses the command as timed out.
#[test]
fn an_answer_after_the_timeout_refuses_the_command_as_timed_out() {
    let world = World::new();
    let mut server = world.server(&["--policy-ask-timeout-ms", "400"]);
    let state = server.asked(&run("late"));
    std::thread::sleep(Duration::from_millis(900));
    let done = server.retry(&run("late"), &state, answer("accept", Some("allow_once")));
    let (text, is_error) = text(&done);
    assert!(is_error, "{text}");
    assert!(text.starts_with("[policy: not approved in time"), "{text}");
    assert!(text.contains("got no answer within 0.4 s"), "{text}");
    assert_eq!(world.runs("late"), 0);
}
