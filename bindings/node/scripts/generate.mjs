// Makes generated/ from a tools component: a copy of the component itself and jco's
// transpilation of it (the JavaScript glue and the core modules the package loads).
//
//   node scripts/generate.mjs [COMPONENT.wasm [OUT_DIR]]
//
// The component is, in this order: the argument, $DSH_GUEST_WASM (as for dsh-host's build), or
// the one the workspace build publishes, target/guest-wasm/guest_tools.wasm (so `cargo build`
// first). `npm run build` and `npm pack` (prepack) run this script; generated/ is not committed,
// because the component's bytes depend on the Rust toolchain that built it and the package must
// carry exactly the component dsh-host embeds.

import { existsSync, readFileSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { checkImports } from "../src/component.js";
import { JCO_VERSION, transpileComponent, writeTranspiled } from "../src/transpile.js";

// The pin in package.json (what npm installs) and the one the code names must agree.
const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
for (const field of ["devDependencies", "peerDependencies"]) {
  const pinned = manifest[field]["@bytecodealliance/jco"];
  if (pinned !== JCO_VERSION) {
    process.stderr.write(`package.json ${field} pins @bytecodealliance/jco ${pinned}, src/transpile.js names ${JCO_VERSION}\n`);
    process.exit(1);
  }
}

const published = fileURLToPath(new URL("../../../target/guest-wasm/guest_tools.wasm", import.meta.url));
const [given, outDir = fileURLToPath(new URL("../generated/", import.meta.url))] = process.argv.slice(2);
const componentPath = resolve(given ?? process.env.DSH_GUEST_WASM ?? published);
if (!existsSync(componentPath)) {
  process.stderr.write(`no tools component at ${componentPath}: run \`cargo build\` in the workspace first, or name one\n`);
  process.exit(1);
}
const bytes = readFileSync(componentPath);
const transpiled = await transpileComponent(bytes);
checkImports(transpiled.imports);
rmSync(outDir, { recursive: true, force: true });
writeTranspiled(outDir, bytes, transpiled);
process.stderr.write(`generated ${outDir} from ${componentPath}\n`);
