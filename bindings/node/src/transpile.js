// jco's transpilation of a tools component: the JavaScript glue plus the core module(s), in the
// "sync" instantiation mode (the host instantiates a fresh instance per call from compiled
// modules it keeps). Used by scripts/generate.mjs for the bundled component and at run time for
// a component given to `new Tools({ component })`; jco is needed only for the latter.

import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

/** The jco release the committed output is made with; the peer dependency names the same. */
export const JCO_VERSION = "1.35.0";

/** File name of the component inside a transpiled directory. */
export const COMPONENT_FILE = "guest_tools.wasm";

async function loadJco() {
  try {
    return await import("@bytecodealliance/jco");
  } catch (e) {
    throw new Error(
      `loading a component other than the bundled one needs @bytecodealliance/jco ${JCO_VERSION}: ` +
        `npm install @bytecodealliance/jco@${JCO_VERSION} (${e.message})`,
    );
  }
}

/** Transpiles component bytes; returns {files: {name: bytes}, imports: [versioned names]}. */
export async function transpileComponent(bytes) {
  const jco = await loadJco();
  const { files, imports } = await jco.transpile(bytes, {
    name: "tools",
    instantiation: "sync",
    noTypescript: true,
    quiet: true,
  });
  return { files, imports };
}

/** Writes the component, jco's files and the import list into `dir`. */
export function writeTranspiled(dir, componentBytes, { files, imports }) {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, COMPONENT_FILE), componentBytes);
  for (const [name, data] of Object.entries(files)) {
    // jco's declarations name the versioned imports its glue does not read; the package ships
    // its own (src/*.d.ts).
    if (name.endsWith(".d.ts")) continue;
    mkdirSync(dirname(join(dir, name)), { recursive: true });
    writeFileSync(join(dir, name), data);
  }
  writeFileSync(join(dir, "imports.json"), JSON.stringify(imports, null, 2) + "\n");
}
