// dsh-tools: the bash, bash_output and bash_kill tools (a WebAssembly component) for Node.
export { Tools, Session, defaultExecutor } from "./tools.js";
export { LocalExecutor, ExecutorError, DEFAULTS } from "./executor.js";
export { ServedExecutor, PROTOCOL_VERSION, findDshHost, locateDshHost, packagedDshHost, platformPackage } from "./served.js";
export { loadComponent, LINKED, PreparedComponent, WIT_VERSION } from "./component.js";
export { FORMATS } from "./definitions.js";
