// Run the golden cases (tests/polyglot/golden/*.json) in the Node host and print the outcomes.
//
// Usage: node golden.mjs COMPONENT GOLDEN_DIR SETTINGS_JSON
//
// Prints one JSON object: {"tools": [...], "cases": {name: [outcome, ...]}}; the Rust test
// tests/polyglot.rs compares it with the expectations and with the other hosts. An outcome is
// {text, isError, errorCode} for a tool call, {notices: [...]} for a notices step, and null for
// the other steps.

import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { LocalExecutor, ToolHost, loadToolHost } from "./dsh-host.mjs";

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
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10); // the event loop runs: background output and task ends arrive meanwhile
  }
}

async function runCase(component, settings, c) {
  const executor = new LocalExecutor({
    defaultTimeoutMs: settings.defaultTimeoutMs,
    maxTimeoutMs: settings.maxTimeoutMs,
    maxOutputBytes: settings.maxOutputBytes,
    graceMs: settings.graceMs,
  });
  const host = new ToolHost(component, executor);
  const caseDir = mkdtempSync(join(tmpdir(), "dsh-golden-"));
  const sessions = new Map();
  const session = (name) => {
    if (!sessions.has(name)) sessions.set(name, host.openSession());
    return sessions.get(name);
  };
  const outcomes = [];
  try {
    for (const raw of stepsOf(c)) {
      const step = substitute(raw, caseDir);
      if (step.tool !== undefined) {
        const caller = { owner: "a", cwd: null, ...substitute(c.caller ?? {}, caseDir), ...(step.caller ?? {}) };
        const owner = caller.owner === null ? undefined : session(caller.owner).owner;
        const r = host.call(step.tool, step.arguments, { owner, cwd: caller.cwd ?? undefined });
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
        await waitUntil(() => executor.get(step.waitForTask).state !== "running", step.waitForTask);
        outcomes.push(null);
      } else if (step.notices !== undefined) {
        const s = session(step.notices);
        const got = [];
        await waitUntil(() => {
          got.push(...s.takeNotices());
          return got.length >= step.texts.length;
        }, `notices for ${step.notices}`);
        outcomes.push({
          notices: got.map((n) =>
            n.source.kind === "plugin" && n.source.plugin === "tool-bash" ? n.text : `BAD SOURCE ${JSON.stringify(n.source)}: ${n.text}`,
          ),
        });
      } else {
        throw new Error(`unknown step ${JSON.stringify(step)}`);
      }
    }
  } finally {
    await host.shutdown();
    rmSync(caseDir, { recursive: true, force: true });
  }
  return { host, outcomes };
}

const [componentPath, goldenDir, settingsPath] = process.argv.slice(2);
const settings = JSON.parse(readFileSync(settingsPath, "utf8"));
// Transpile once; every case gets a fresh host and executor on the same transpiled component.
const component = (await loadToolHost(componentPath, new LocalExecutor())).component;
const report = { tools: null, cases: {} };
for (const name of readdirSync(goldenDir).filter((n) => n.endsWith(".json")).sort()) {
  const c = JSON.parse(readFileSync(join(goldenDir, name), "utf8"));
  const { host, outcomes } = await runCase(component, settings, c);
  report.cases[name.slice(0, -".json".length)] = outcomes;
  report.tools ??= host.tools;
}
process.stdout.write(JSON.stringify(report) + "\n");
