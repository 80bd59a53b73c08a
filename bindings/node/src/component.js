// A tools component ready to instantiate: jco's glue module plus its compiled core modules. The
// bundled one is generated/ (made from the component dsh-host embeds, see scripts/generate.mjs);
// another component is transpiled on first use into a cache directory keyed by its hash.

import { createHash, randomBytes } from "node:crypto";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { COMPONENT_FILE, JCO_VERSION, transpileComponent, writeTranspiled } from "./transpile.js";

const BUNDLED_DIR = fileURLToPath(new URL("../generated/", import.meta.url));

/**
 * The interfaces a tools component may import: the host links these and nothing else.
 * `approval` is imported only by a component composed with the policy middleware
 * (policy/middleware/compose.sh); the host serves it from `new Tools({ policy, approve })`.
 */
export const LINKED = Object.freeze(["dsh:bash/bash-executor", "dsh:bash/agent", "dsh:bash/approval"]);

/** The interface a component imports when permission rules are enforced inside it. */
export const APPROVAL = "dsh:bash/approval";

/** The WIT package version whose interfaces the host supplies. */
export const WIT_VERSION = "0.9.0";

/** Refuses a component that imports anything but the `dsh:bash` interfaces above, naming it. */
export function checkImports(imports) {
  const extra = imports.filter((name) => !LINKED.includes(name.split("@")[0]));
  if (extra.length > 0) {
    const linked = LINKED.map((n) => `${n}@${WIT_VERSION}`);
    throw new Error(
      `the component imports ${extra.join(", ")}, which this host does not provide ` +
        `(it links only ${linked.slice(0, -1).join(", ")} and ${linked.at(-1)})`,
    );
  }
}

/** A transpiled directory loaded: the component's bytes, imports and an instantiate function. */
export class PreparedComponent {
  /** `inMemory`: read every file now, so that the directory may go (a private temporary one). */
  constructor(dir, glue, { inMemory = false } = {}) {
    this.dir = dir;
    this.imports = JSON.parse(readFileSync(join(dir, "imports.json"), "utf8"));
    checkImports(this.imports);
    this.modules = new Map();
    this.glue = glue;
    this.componentBytes = null;
    if (inMemory) {
      this.componentBytes = readFileSync(join(dir, COMPONENT_FILE));
      for (const name of readdirSync(dir)) {
        if (name.endsWith(".wasm") && name !== COMPONENT_FILE) {
          this.modules.set(name, new WebAssembly.Module(readFileSync(join(dir, name))));
        }
      }
    }
  }

  /** Whether it imports `dsh:bash/approval`, so enforces permission rules the host gives it. */
  get importsApproval() {
    return this.imports.some((name) => name.split("@")[0] === APPROVAL);
  }

  /** The component's own bytes (what `dsh-host` embeds, for the bundled one). */
  bytes() {
    return this.componentBytes ?? readFileSync(join(this.dir, COMPONENT_FILE));
  }

  /** A fresh instance linked to `imports` (keyed by interface name); returns its exports. */
  instantiate(imports) {
    const getCoreModule = (path) => {
      if (!this.modules.has(path)) this.modules.set(path, new WebAssembly.Module(readFileSync(join(this.dir, path))));
      return this.modules.get(path);
    };
    return this.glue.instantiate(getCoreModule, imports);
  }
}

async function loadDir(dir, options) {
  const glue = await import(pathToFileURL(join(dir, "tools.js")).href);
  return new PreparedComponent(dir, glue, options);
}

/** The component that comes with the package. */
export async function bundledComponent() {
  if (!existsSync(join(BUNDLED_DIR, "tools.js"))) {
    throw new Error(
      `the bundled component is not built (${BUNDLED_DIR} has no tools.js): ` +
        "run `npm run build` in bindings/node after `cargo build`",
    );
  }
  return loadDir(BUNDLED_DIR);
}

/**
 * Where transpiled components are kept: `$XDG_CACHE_HOME/dsh-tools/jco` (else `~/.cache/…`), a
 * directory only this user may write, since its JavaScript is imported. When it is not ours
 * alone, `null`: the component is transpiled anew into a private temporary directory, removed
 * once loaded.
 */
function cacheRoot() {
  const base = process.env.XDG_CACHE_HOME || join(homedir(), ".cache");
  const root = join(base, "dsh-tools", "jco");
  try {
    mkdirSync(root, { recursive: true, mode: 0o700 });
    const st = lstatSync(root);
    if (st.isDirectory() && st.uid === process.getuid() && (st.mode & 0o022) === 0) return root;
  } catch {
    // An unwritable home: a private directory instead.
  }
  return null;
}

/**
 * Loads another tools component (a path or its bytes), transpiling it with jco (an optional peer
 * dependency) on first use. Refuses one that imports anything but the `dsh:bash` interfaces of
 * `LINKED`.
 */
export async function loadComponent(source) {
  let bytes;
  if (typeof source === "string") {
    try {
      bytes = readFileSync(source);
    } catch (e) {
      throw new Error(`cannot read the component ${JSON.stringify(source)}: ${e.message}`);
    }
  } else if (source instanceof Uint8Array) {
    bytes = source;
  } else {
    throw new TypeError(`component: expected a file path or a Uint8Array, got ${source === null ? "null" : typeof source}`);
  }
  const root = cacheRoot();
  if (root === null) {
    const transpiled = await transpileComponent(bytes);
    checkImports(transpiled.imports);
    const dir = mkdtempSync(join(tmpdir(), "dsh-tools-jco-"));
    try {
      writeTranspiled(dir, bytes, transpiled);
      return await loadDir(dir, { inMemory: true });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const hash = createHash("sha256").update(bytes).update(JCO_VERSION).digest("hex").slice(0, 24);
  const dir = join(root, hash);
  if (!existsSync(join(dir, "done"))) {
    const transpiled = await transpileComponent(bytes);
    checkImports(transpiled.imports);
    // Written aside and renamed, so that a concurrent process never loads a partial directory.
    const tmp = `${dir}.${process.pid}.${randomBytes(4).toString("hex")}`;
    writeTranspiled(tmp, bytes, transpiled);
    writeFileSync(join(tmp, "done"), "");
    try {
      renameSync(tmp, dir);
    } catch {
      rmSync(tmp, { recursive: true, force: true }); // another process made it first
    }
  }
  return loadDir(dir);
}
