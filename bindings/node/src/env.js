// The environment a command gets: the host's, scrubbed of secrets, plus forced settings. The
// same rule as the Rust executor (host/executor/src/env.rs): a name holding KEY, SECRET, TOKEN
// or PASSWORD in any case is withheld, as is one matching an operator's deny pattern (`*` for any
// run of characters, any case), unless the operator allows that exact name.

const SECRET_WORDS = ["KEY", "SECRET", "TOKEN", "PASSWORD"];

/** Set for every command: no colours, no pagers, no prompts that would hang without a terminal. */
export const FORCED = Object.freeze({
  NO_COLOR: "1",
  TERM: "dumb",
  PAGER: "cat",
  GIT_PAGER: "cat",
  GIT_TERMINAL_PROMPT: "0",
});

function isSecret(name) {
  const upper = name.toUpperCase();
  return SECRET_WORDS.some((word) => upper.includes(word));
}

/** Whether `name` matches `pattern`, where `*` matches any run of characters, ignoring ASCII case. */
export function matchesPattern(pattern, name) {
  const escaped = pattern.split("*").map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  // ASCII case only, as the Rust executor: lower-case both sides outside the regex engine.
  const asciiLower = (s) => s.replace(/[A-Z]/g, (c) => c.toLowerCase());
  return new RegExp(`^${escaped.map(asciiLower).join("[\\s\\S]*")}$`).test(asciiLower(name));
}

/** Checks an operator's variable names or patterns, naming the first bad one. */
export function checkNames(setting, names) {
  if (!Array.isArray(names)) throw new TypeError(`${setting}: expected an array of strings, got ${typeof names}`);
  for (const name of names) {
    if (typeof name !== "string" || name === "" || name.includes("=") || name.includes("\0")) {
      throw new TypeError(`${setting}: ${JSON.stringify(name)} is no variable name (empty, or holds '=' or NUL)`);
    }
  }
  return [...names];
}

/** Whether a command does not get the variable `name`. */
export function scrubs(name, { deny = [], allow = [] } = {}) {
  if (allow.includes(name)) return false;
  return isSecret(name) || deny.some((pattern) => matchesPattern(pattern, name));
}

/** The child environment built from `vars` (normally `process.env`). */
export function childEnv(vars, policy) {
  const env = {};
  for (const [name, value] of Object.entries(vars)) {
    if (value !== undefined && !scrubs(name, policy) && !(name in FORCED)) env[name] = value;
  }
  return { ...env, ...FORCED };
}
