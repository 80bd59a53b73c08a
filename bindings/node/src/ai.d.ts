// Types of dsh-tools/ai (hand-written; test/example.ts type-checks against them).
import type { Tool } from "ai";

import type { Session, Tools } from "./index.js";

/** What one call gives the model: the result's text and the completion notices riding on it. */
export interface AiToolOutput {
  text: string;
  /** Texts of the session's completion notices not carried yet, oldest first. */
  notices: string[];
}

/** A result the component marks as an error; the SDK shows the model `message` as an error. */
export declare class ToolCallError extends Error {
  constructor(text: string);
}

/**
 * The tools as a Vercel AI SDK ToolSet. Each `execute` resolves to an `AiToolOutput` (the model
 * reads the text, then each notice as one more text part) or throws a `ToolCallError`.
 */
export declare function aiTools(
  tools: Tools,
  session: Session,
): {
  bash: Tool<Record<string, unknown>, AiToolOutput>;
  bash_output: Tool<Record<string, unknown>, AiToolOutput>;
  bash_kill: Tool<Record<string, unknown>, AiToolOutput>;
};
