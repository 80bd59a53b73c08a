// Prints the definitions in FORMAT exactly as `dsh-host tools --format FORMAT` does (pretty JSON,
// two-space indent, a final newline), for tests/bindings_node.rs to compare byte for byte.
import { Tools } from "dsh-tools";

const tools = new Tools();
process.stdout.write(JSON.stringify(tools.definitions(process.argv[2]), null, 2) + "\n");
