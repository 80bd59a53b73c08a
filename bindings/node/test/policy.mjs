// Permission rules and the approval callback of dsh-tools, with a tools component composed with
// the policy middleware. Each case checks what happened on disk (a marker file a command would
// create), not only the text; the refusals that dsh-host can show (denied, cannot ask) are compared
// with its output byte for byte. Run by tests/policy_node.rs; by hand:
//
//   DSH_POLICY_COMPONENT=composed.wasm DSH_TOOLS_COMPONENT=target/guest-wasm/guest_tools.wasm \
//     DSH_HOST=target/debug/dsh-host node test/policy.mjs
//
// from bindings/node (where `dsh-tools` resolves to this package and jco is installed).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";

import { LocalExecutor, Tools, loadComponent } from "dsh-tools";

/** A path from the environment; the tests fail rather than skip without it. */
function required(name, what) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: it must name ${what}`);
  return value;
}

const composedPath = required("DSH_POLICY_COMPONENT", "the tools component composed with policy/middleware/compose.sh");
const plainPath = required("DSH_TOOLS_COMPONENT", "a tools component that does not import dsh:bash/approval");
const dshHost = required("DSH_HOST", "the dsh-host binary whose texts the package must match");

const composed = await loadComponent(composedPath);
const plain = await loadComponent(plainPath);

// Line numbers matter: refusals cite them.
const POLICY = [
  "[permissions]",
  'allow = ["Bash(echo *)", "Bash(touch allowed)"]',
  'ask = ["Bash(touch asked-*)"]',
  'deny = ["Bash(rm *)", "Bash(touch denied)"]',
  'default = "ask"',
  "",
].join("\n");
const policy = [{ name: "p.toml", text: POLICY }];

const dirs = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function tmp() {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), "dsh-policy-node-")));
  dirs.push(dir);
  return dir;
}

/** Tools over the composed component, with a session in a fresh directory. */
function setup(options = {}) {
  const tools = new Tools({ component: composed, executor: new LocalExecutor({ graceMs: 200 }), policy, ...options });
  const dir = tmp();
  return { tools, dir, session: tools.session({ cwd: dir }) };
}

const bash = (session, command, extra = {}) => session.call("bash", { command, description: "Test a rule", ...extra });

/** What dsh-host shows for `command` under the same policy file (named the same way), or none. */
function dshHostText(command, { withPolicy = true } = {}) {
  const dir = tmp();
  writeFileSync(join(dir, "p.toml"), POLICY);
  const policyArgs = withPolicy ? ["--policy", "p.toml"] : [];
  const args = ["--component", composedPath, ...policyArgs, "call", "bash", JSON.stringify({ command, description: "Test a rule" }), "--json"];
  const out = spawnSync(dshHost, args, { cwd: dir, encoding: "utf8" });
  // An error result exits 1; anything else means dsh-host itself failed.
  assert.ok(out.status === 0 || out.status === 1, `dsh-host ${args.join(" ")}: ${out.status} ${out.stderr}`);
  return JSON.parse(out.stdout).text;
}

/** A callback that records its questions and answers with `answer(q)`. */
function recorder(answer) {
  const questions = [];
  const approve = (q) => {
    questions.push(q);
    return answer(q);
  };
  return { approve, questions };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test("an allowed command runs without asking", async () => {
  const { approve, questions } = recorder(() => "decline");
  const { tools, dir, session } = setup({ approve });
  const r = await bash(session, "touch allowed");
  assert.deepEqual(r, { text: "(no output)", isError: false, errorCode: null });
  assert.ok(existsSync(join(dir, "allowed")), "the allowed command did not run");
  assert.equal(questions.length, 0);
  await tools.close();
});

test("a denied command is refused, nothing runs, and the text is dsh-host's", async () => {
  const { approve, questions } = recorder(() => "once");
  const { tools, dir, session } = setup({ approve });
  const r = await bash(session, "touch denied");
  assert.deepEqual(r, {
    text: "[policy: denied — `touch denied` matches deny rule Bash(touch denied) (p.toml:4). The command did not run; do not retry it in another form.]",
    isError: true,
    errorCode: "POLICY_REFUSED",
  });
  assert.equal(r.text, dshHostText("touch denied"));
  assert.ok(!existsSync(join(dir, "denied")), "the denied command ran");
  assert.equal(questions.length, 0, "a denied command was put to the person");
  // In the background too.
  const b = await bash(session, "touch denied", { run_in_background: true });
  assert.equal(b.text, r.text);
  await sleep(200);
  assert.ok(!existsSync(join(dir, "denied")), "the denied background command ran");
  await tools.close();
});

test('"once" runs the command, and the next one is asked again', async () => {
  const { approve, questions } = recorder(() => "once");
  const { tools, dir, session } = setup({ approve });
  assert.equal((await bash(session, "touch asked-1")).text, "(no output)");
  assert.ok(existsSync(join(dir, "asked-1")));
  assert.deepEqual(questions, [
    {
      owner: session.owner,
      command: "touch asked-1",
      cwd: dir,
      parts: ["touch asked-1"],
      rule: "Bash(touch asked-*)",
      source: "p.toml:3",
      construct: null,
      sessionRule: null,
    },
  ]);
  assert.equal((await bash(session, "touch asked-2")).text, "(no output)");
  assert.ok(existsSync(join(dir, "asked-2")));
  assert.equal(questions.length, 2);
  assert.deepEqual(session.grants(), []);
  await tools.close();
});

test('"session" grants the session rule until the session closes', async () => {
  const { approve, questions } = recorder(() => "session");
  const { tools, dir, session } = setup({ approve });
  assert.equal((await bash(session, "touch granted-1")).text, "(no output)");
  assert.equal(questions.length, 1);
  assert.equal(questions[0].sessionRule, "Bash(touch granted-1 *)");
  assert.equal(questions[0].rule, null, "the default asked, not a rule");
  assert.equal(questions[0].source, "p.toml:5");
  assert.deepEqual(session.grants(), ["Bash(touch granted-1 *)"]);
  // Granted: runs without a question.
  assert.equal((await bash(session, "touch granted-1 granted-2")).text, "(no output)");
  assert.ok(existsSync(join(dir, "granted-1")) && existsSync(join(dir, "granted-2")));
  assert.equal(questions.length, 1, "a granted command was asked again");
  // A grant never lifts a deny rule.
  assert.match((await bash(session, "touch granted-1 && touch denied")).text, /^\[policy: denied/);
  assert.ok(!existsSync(join(dir, "denied")));
  // Another session has no grant.
  const other = tools.session({ cwd: dir });
  assert.equal((await bash(other, "touch other-1")).text, "(no output)");
  assert.equal(questions.length, 2);
  assert.equal(questions[1].owner, other.owner);
  await other.close();

  await session.close();
  assert.deepEqual(session.grants(), []);
  const next = tools.session({ cwd: dir });
  assert.equal((await bash(next, "touch granted-1 granted-3")).text, "(no output)");
  assert.ok(existsSync(join(dir, "granted-3")));
  assert.equal(questions.length, 3, "a grant outlived its session");
  await tools.close();
});

test('"decline", a throw, a rejection and an unknown answer decline', async () => {
  const declined = (command, source) =>
    `[policy: declined by the user — \`${command}\` (${source}). The command did not run; do not retry it in another form.]`;
  const cases = [
    () => "decline",
    () => {
      throw new Error("the person's window crashed");
    },
    async () => {
      throw new Error("rejected");
    },
    () => "yes",
    () => undefined,
  ];
  for (const [i, approve] of cases.entries()) {
    const { tools, dir, session } = setup({ approve });
    const r = await bash(session, `touch asked-${i}`);
    assert.deepEqual(
      r,
      { text: declined(`touch asked-${i}`, "ask rule Bash(touch asked-*), p.toml:3"), isError: true, errorCode: "POLICY_REFUSED" },
      `case ${i}`,
    );
    assert.ok(!existsSync(join(dir, `asked-${i}`)), `case ${i}: a declined command ran`);
    assert.equal((await bash(session, "touch other")).text, declined("touch other", "the default verdict, p.toml:5"));
    assert.deepEqual(session.grants(), []);
    await tools.close();
  }
});

test("no answer within approveTimeoutMs times out, and a late answer changes nothing", async () => {
  let late = null;
  const approve = (q) =>
    new Promise((resolve) => {
      late = sleep(1000).then(() => resolve("session"));
    });
  const { tools, dir, session } = setup({ approve, approveTimeoutMs: 300 });
  const started = performance.now();
  const r = await bash(session, "touch asked-slow");
  const waited = performance.now() - started;
  assert.deepEqual(r, {
    text: "[policy: not approved in time — `touch asked-slow` (ask rule Bash(touch asked-*), p.toml:3) got no answer within 0.3 s. The command did not run.]",
    isError: true,
    errorCode: "POLICY_REFUSED",
  });
  assert.ok(waited >= 290 && waited < 900, `waited ${waited} ms`);
  await late;
  await sleep(50);
  assert.ok(!existsSync(join(dir, "asked-slow")), "a timed-out command ran");
  assert.deepEqual(session.grants(), [], "a late answer granted a rule");
  await tools.close();
});

test("without a callback nobody can be asked: refused naming the allow rule, as dsh-host", async () => {
  const { tools, dir, session } = setup();
  const r = await bash(session, "touch unasked");
  assert.deepEqual(r, {
    text:
      "[policy: needs approval — `touch unasked` matches no allow rule and the default verdict is ask (p.toml:5), " +
      "and this client cannot ask the user. The command did not run. An operator can allow it with the rule Bash(touch unasked).]",
    isError: true,
    errorCode: "POLICY_REFUSED",
  });
  assert.equal(r.text, dshHostText("touch unasked"));
  assert.ok(!existsSync(join(dir, "unasked")));
  assert.equal((await bash(session, "echo still allowed")).text, "still allowed\n");
  await tools.close();
});

test("an asynchronous callback is awaited while other calls go on", async () => {
  // The person answers only once another session's command has run: were the event loop held
  // while asking, that command could not run and the question would time out.
  let otherRan;
  const otherDone = new Promise((resolve) => (otherRan = resolve));
  const { approve, questions } = recorder(async () => {
    await otherDone;
    return "once";
  });
  const { tools, dir, session } = setup({ approve, approveTimeoutMs: 20_000 });
  const asked = bash(session, "touch asked-async && echo done");
  while (questions.length === 0) await sleep(5);
  const other = tools.session({ cwd: dir });
  assert.equal((await bash(other, "echo meanwhile")).text, "meanwhile\n");
  otherRan();
  assert.equal((await asked).text, "done\n");
  assert.ok(existsSync(join(dir, "asked-async")));
  assert.equal(questions.length, 1, "the replay asked the person again");
  await tools.close();
});

test("aborting a call while the person is asked declines it", async () => {
  const { tools, dir, session } = setup({ approve: () => new Promise(() => {}) });
  const abort = new AbortController();
  setTimeout(() => abort.abort(), 100);
  const r = await session.call("bash", { command: "touch asked-aborted", description: "Test a rule" }, { signal: abort.signal });
  assert.match(r.text, /^\[policy: declined by the user — `touch asked-aborted`/);
  assert.ok(!existsSync(join(dir, "asked-aborted")));
  await tools.close();
});

test("a call without a session is asked with no owner, and keeps no grant", async () => {
  const { approve, questions } = recorder(() => "session");
  const tools = new Tools({ component: composed, policy, approve });
  const dir = tmp();
  assert.equal((await tools.call("bash", { command: "touch nobody", workdir: dir, description: "Test a rule" })).text, "(no output)");
  assert.ok(existsSync(join(dir, "nobody")));
  assert.equal(questions[0].owner, null);
  await tools.call("bash", { command: "touch nobody-2", workdir: dir, description: "Test a rule" });
  assert.equal(questions.length, 2, "a call without a session kept a grant");
  await tools.close();
});

test("the model gets no tool to approve with", () => {
  const { tools } = setup({ approve: () => "once" });
  assert.deepEqual(
    tools.definitions().map((d) => d.name),
    ["bash", "bash_output", "bash_kill"],
  );
});

test("policy files that do not load stop construction, naming the file and line", () => {
  assert.throws(
    () => new Tools({ component: composed, policy: [...policy, { name: "bad.toml", text: '[permissions]\nallow = ["Bash(echo *)"]\nalow = []\n' }] }),
    { message: "policy: bad.toml:3: unknown field `alow`, expected one of `default`, `unanalysable`, `allow`, `ask`, `deny`" },
  );
  // A path is cited as given.
  const dir = tmp();
  const path = join(dir, "rules.toml");
  writeFileSync(path, '[permissions]\ndeny = ["Bash(rm *"]\n');
  assert.throws(() => new Tools({ component: composed, policy: [path] }), (e) => e.message.startsWith(`policy: ${path}:2: `));
  const missing = join(dir, "missing.toml");
  assert.throws(() => new Tools({ component: composed, policy: [missing] }), {
    message: `policy: cannot read the policy file ${JSON.stringify(missing)}: ENOENT: no such file or directory, open '${missing}'`,
  });
  assert.throws(() => new Tools({ component: composed, policy: "p.toml" }), TypeError);
  assert.throws(() => new Tools({ component: composed, policy, approve: "once" }), { message: "approve: expected a function, got string" });
  assert.throws(() => new Tools({ component: composed, policy, approveTimeoutMs: 0 }), RangeError);
});

test("permission options with a component that does not import approval are refused", () => {
  assert.ok(!plain.imports.some((name) => name.startsWith("dsh:bash/approval")));
  for (const options of [{ policy }, { approve: () => "once" }, { policy: [], approveTimeoutMs: 1000 }]) {
    assert.throws(() => new Tools({ component: plain, ...options }), (e) => {
      assert.match(e.message, /the component does not import dsh:bash\/approval@0\.9\.0/);
      assert.match(e.message, /policy\/middleware\/compose\.sh/);
      assert.ok(e.message.startsWith(Object.keys(options).join(", ")), e.message);
      return true;
    });
  }
});

test("the composed component without a policy gets no files: the built-in default, as dsh-host", async () => {
  const tools = new Tools({ component: composed });
  const dir = tmp();
  const session = tools.session({ cwd: dir });
  assert.equal((await bash(session, "echo free")).text, "free\n");
  const r = await bash(session, "touch free");
  assert.match(r.text, /the default verdict is ask \(the built-in default\), and this client cannot ask the user/);
  assert.equal(r.text, dshHostText("touch free", { withPolicy: false }));
  assert.ok(!existsSync(join(dir, "free")));
  await tools.close();
});
