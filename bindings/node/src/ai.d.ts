// Types of dsh-tools/ai (hand-written; test/example.ts type-checks against them).
import type { Tool } from "ai";

import type { Session, Tools } from "./index.js";

/** The tools as a Vercel AI SDK ToolSet; each `execute` resolves to the text the model sees. */
export declare function aiTools(
  tools: Tools,
  session: Session,
): { bash: Tool<Record<string, unknown>, string>; bash_output: Tool<Record<string, unknown>, string>; bash_kill: Tool<Record<string, unknown>, string> };
