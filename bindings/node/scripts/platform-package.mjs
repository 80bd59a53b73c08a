// Writes the package that carries a `dsh-host` binary for one platform:
//
//     node scripts/platform-package.mjs BINARY OUTDIR
//
// OUTDIR (new, or empty) gets package.json, bin/dsh-host (mode 0755) and a README. The package is
// `@dsh-tools/dsh-host-linux-x64` for an x86-64 binary and `@dsh-tools/dsh-host-linux-arm64` for
// an arm64 one (read from the binary's ELF header), with `os` and `cpu` set so that npm installs
// it only there, and the version of dsh-tools (this directory's package.json), which names it as
// an optional peer dependency of that exact version. `npm pack OUTDIR` makes its tarball.
// Installed next to dsh-tools, `new Tools()` serves the executor with that binary when
// `DSH_HOST` is not set, before any `dsh-host` on `PATH`. Prints OUTDIR.

import { chmodSync, copyFileSync, mkdirSync, openSync, readFileSync, readSync, readdirSync, closeSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

function fail(message) {
  process.stderr.write(`platform-package: ${message}\n`);
  process.exit(1);
}

/** Node's `process.arch` name for the machine an ELF executable is built for. */
function architecture(binary) {
  const header = Buffer.alloc(20);
  const fd = openSync(binary, "r");
  const read = readSync(fd, header, 0, header.length, 0);
  closeSync(fd);
  if (read < header.length || header.readUInt32BE(0) !== 0x7f454c46) fail(`${binary} is not an ELF executable`);
  // EI_DATA says the byte order; e_machine is the half-word at offset 18.
  const machine = header[5] === 1 ? header.readUInt16LE(18) : header.readUInt16BE(18);
  const arch = { 0x3e: "x64", 0xb7: "arm64" }[machine];
  if (arch === undefined) fail(`${binary} is built for ELF machine 0x${machine.toString(16)}, which has no package here`);
  return arch;
}

const [binary, outDir] = process.argv.slice(2);
if (binary === undefined || outDir === undefined) fail("usage: node scripts/platform-package.mjs BINARY OUTDIR");

const main = JSON.parse(readFileSync(join(here, "..", "package.json"), "utf8"));
const arch = architecture(binary);
const name = `@dsh-tools/dsh-host-linux-${arch}`;
const out = resolve(outDir);

mkdirSync(out, { recursive: true });
if (readdirSync(out).length > 0) fail(`${out} is not empty`);

const manifest = {
  name,
  version: main.version,
  description: `The dsh-host binary for Linux on ${arch}, which dsh-tools serves its executor with.`,
  license: main.license,
  os: ["linux"],
  cpu: [arch],
  files: ["bin/"],
  preferUnplugged: true,
};
writeFileSync(join(out, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`);

mkdirSync(join(out, "bin"));
copyFileSync(binary, join(out, "bin", "dsh-host"));
chmodSync(join(out, "bin", "dsh-host"), 0o755);

const tarball = `${name.slice(1).replace("/", "-")}-${main.version}.tgz`;
writeFileSync(
  join(out, "README.md"),
  `# ${name}

The \`dsh-host\` binary (version ${main.version}) for Linux on ${arch}, as \`bin/dsh-host\`.
Installed next to dsh-tools ${main.version}, it is the binary \`new Tools()\` runs its commands
through (\`dsh-host executor serve --stdio\`) when \`DSH_HOST\` is not set, before any
\`dsh-host\` on \`PATH\`; \`tools.doctor()\` then says \`binarySource: "package"\`.

\`\`\`sh
npm install ./dsh-tools-${main.version}.tgz ./${tarball}   # the tarballs \`npm pack\` made
\`\`\`
`,
);

process.stdout.write(`${out}\n`);
