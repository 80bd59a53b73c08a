// A tool call with an asynchronous foreground run. jco calls imports synchronously, but a
// foreground command takes as long as it takes, and holding the event loop that long would stop
// everything else in the process (background output, notices, the application itself). The
// component imports nothing but the executor and the agent (no clock, no randomness, no WASI),
// and a call gets a fresh instance: the same arguments and the same import results give the
// same import calls in the same order. So a call runs as passes over a journal of import
// results: a pass replays the journal, performs the next import calls for real and appends
// their results, until it reaches an import whose result is a promise (the executor's `run`).
// That pass is abandoned (its instance discarded); the promise is awaited on the event loop, its
// result appended, and the next pass replays up to it and goes on. The last pass's result is
// the call's.

import { ExecutorError } from "./executor.js";

/** Thrown through the component to abandon a pass; never seen outside this module. */
class Abandoned extends Error {}

function ok(val) {
  return { tag: "ok", val };
}

/** An executor error as jco's `result` lowering wants it; anything else is a bug and traps. */
function err(e) {
  if (!(e instanceof ExecutorError)) throw e;
  return { tag: "err", val: e.tag === "aborted" ? { tag: "aborted" } : { tag: e.tag, val: e.detail ?? "" } };
}

/** A `result`-typed executor call: its result object, or a promise of one. */
export function asResult(op) {
  let value;
  try {
    value = op();
  } catch (e) {
    return err(e);
  }
  return typeof value?.then === "function" ? Promise.resolve(value).then(ok, err) : ok(value);
}

/** One pass over the journal. */
class Pass {
  constructor(journal) {
    this.journal = journal;
    this.next = 0;
    /** The awaited import's entry, once this pass reached it. */
    this.pending = null;
  }

  /** The result of the pass's next import call `op`: replayed, or performed now. */
  step(op, perform) {
    if (this.pending) throw new Abandoned();
    const i = this.next++;
    if (i < this.journal.length) {
      const entry = this.journal[i];
      if (entry.op !== op) throw new Error(`the component's calls diverged on replay: ${op} where ${entry.op} was journaled`);
      return entry.value;
    }
    const value = perform();
    if (typeof value?.then === "function") {
      this.pending = value.then((v) => ({ op, value: v }));
      throw new Abandoned();
    }
    this.journal.push({ op, value });
    return value;
  }
}

/**
 * Runs a call to its end, awaiting asynchronous imports between passes. `call(step)` is one
 * pass: a call into a fresh instance whose executor calls all go through `step(opName,
 * perform)`.
 */
export async function callWithReplay(call) {
  const journal = [];
  for (;;) {
    const pass = new Pass(journal);
    let result;
    try {
      result = call((op, perform) => pass.step(op, perform));
    } catch (e) {
      if (!pass.pending) throw e;
    }
    if (!pass.pending) return result;
    journal.push(await pass.pending);
  }
}
