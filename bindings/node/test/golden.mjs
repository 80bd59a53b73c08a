// Runs the golden cases (tests/polyglot/golden/*.json) through the installed dsh-tools package
// and prints the outcomes; tests/polyglot.rs compares them with the expectations and the Rust
// host's. Run from a project that has dsh-tools installed.
//
// Usage: node golden.mjs GOLDEN_DIR SETTINGS_JSON [DSH_HOST]
//
// With DSH_HOST, each case runs against `DSH_HOST executor serve --stdio` (a ServedExecutor with
// the same settings as flags) instead of the package's LocalExecutor.
//
// Prints one JSON object: {"tools": [...], "cases": {name: [outcome, ...]}}. An outcome is
// {text, isError, errorCode} for a tool call, {notices: [...]} for a notices step, and null for
// the other steps. Notices arrive through each session's onNotice callback.

import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { LocalExecutor, ServedExecutor, Tools } from "dsh-tools";

const WAIT_MS = 10_000;
const SETTLE_MS = 500;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function substitute(value, caseDir) {
  if (typeof value === "string") return value.replaceAll("$CASE_DIR", caseDir);
  if (Array.isArray(value)) return value.map((v) => substitute(v, caseDir));
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substitute(v, caseDir)]));
  }
  return value;
}

function stepsOf(c) {
  if (c.steps) return c.steps;
  const { about, caller, ...step } = c;
  return [step];
}

async function waitUntil(predicate, what) {
  const deadline = Date.now() + WAIT_MS;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10); // the event loop runs: background output and task ends arrive meanwhile
  }
}

/** The MCP definitions without the annotations' title, in the shape the Rust test compares. */
function toolsReport(tools) {
  return tools.definitions("mcp").map(({ annotations: { title, ...hints }, ...rest }) => ({ ...rest, annotations: hints }));
}

/** The executor a case runs against: local, or served by `dshHost` with the same settings. */
async function executorFor(settings, dshHost) {
  if (dshHost === undefined) return new LocalExecutor(settings);
  const flags = {
    defaultTimeoutMs: "--timeout-ms",
    maxTimeoutMs: "--max-timeout-ms",
    maxOutputBytes: "--max-output-bytes",
    graceMs: "--grace-ms",
  };
  const args = Object.entries(settings).flatMap(([key, value]) => {
    if (!(key in flags)) throw new Error(`no executor flag for the setting ${key}`);
    return [flags[key], String(value)];
  });
  return ServedExecutor.start({ command: [dshHost, "executor", "serve", "--stdio", ...args] });
}

async function runCase(settings, c, dshHost) {
  const executor = await executorFor(settings, dshHost);
  const tools = new Tools({ executor });
  const caseDir = mkdtempSync(join(tmpdir(), "dsh-golden-"));
  // One session per name, created with the case's cwd for that caller; notices collected per name.
  const sessions = new Map();
  const notices = new Map();
  const session = (name, cwd) => {
    const key = `${name}\0${cwd ?? ""}`;
    if (!sessions.has(key)) {
      if (!notices.has(name)) notices.set(name, []);
      sessions.set(key, tools.session({ cwd, onNotice: (n) => notices.get(name).push(n) }));
    }
    return sessions.get(key);
  };
  const outcomes = [];
  try {
    for (const raw of stepsOf(c)) {
      const step = substitute(raw, caseDir);
      if (step.tool !== undefined) {
        const caller = { owner: "a", cwd: null, ...substitute(c.caller ?? {}, caseDir), ...(step.caller ?? {}) };
        const s = caller.owner === null ? undefined : session(caller.owner, caller.cwd ?? undefined);
        if (caller.owner === null && caller.cwd !== null) throw new Error("a caller without an owner has no session cwd");
        const r = await tools.call(step.tool, step.arguments, s);
        outcomes.push({ text: r.text, isError: r.isError, errorCode: r.errorCode });
      } else if (step.waitForFile !== undefined) {
        const path = join(caseDir, step.waitForFile);
        await waitUntil(() => existsSync(path), path);
        await sleep(SETTLE_MS);
        outcomes.push(null);
      } else if (step.createFile !== undefined) {
        writeFileSync(join(caseDir, step.createFile), "");
        outcomes.push(null);
      } else if (step.waitForTask !== undefined) {
        await waitUntil(async () => (await executor.get(step.waitForTask)).state !== "running", step.waitForTask);
        outcomes.push(null);
      } else if (step.notices !== undefined) {
        if (!notices.has(step.notices)) notices.set(step.notices, []);
        const got = notices.get(step.notices);
        await waitUntil(() => got.length >= step.texts.length, `notices for ${step.notices}`);
        outcomes.push({
          notices: got.splice(0).map((n) =>
            n.source.kind === "plugin" && n.source.plugin === "tool-bash" ? n.text : `BAD SOURCE ${JSON.stringify(n.source)}: ${n.text}`,
          ),
        });
      } else {
        throw new Error(`unknown step ${JSON.stringify(step)}`);
      }
    }
  } finally {
    await tools.close();
    rmSync(caseDir, { recursive: true, force: true });
  }
  return { tools, outcomes };
}

const [goldenDir, settingsPath, dshHost] = process.argv.slice(2);
const { about, ...settings } = JSON.parse(readFileSync(settingsPath, "utf8"));
const report = { tools: null, cases: {} };
for (const name of readdirSync(goldenDir).filter((n) => n.endsWith(".json")).sort()) {
  const c = JSON.parse(readFileSync(join(goldenDir, name), "utf8"));
  const { tools, outcomes } = await runCase(settings, c, dshHost);
  report.cases[name.slice(0, -".json".length)] = outcomes;
  report.tools ??= toolsReport(tools);
}
process.stdout.write(JSON.stringify(report) + "\n");
