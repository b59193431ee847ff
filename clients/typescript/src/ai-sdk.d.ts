import type { ModelMessage, PrepareStepFunction, ToolSet } from "ai";
import type { CompactorClient, Completed, Message } from "./index.js";

/** The compactor's messages of one ModelMessage (a tool message's results become one message each). */
export declare function fromModelMessage(message: ModelMessage, id: string): Message[];
/** The ModelMessages of the compactor's context. */
export declare function toModelMessages(messages: Message[]): ModelMessage[];

export interface CompactorPrepareStepOptions {
  client: CompactorClient;
  sessionId: string;
  /** The model's window, or the budget to keep the context under. */
  contextLimit: number;
  /** The session's model, for the service's token count (default "gpt-4o"). */
  model?: string;
  /** Compact when the context is over contextLimit times this (default 1). */
  threshold?: number;
  onCompaction?: (completed: Completed) => void;
}

/** A prepareStep that keeps the step's messages in the compactor and returns the compacted context. */
export declare function compactorPrepareStep<TOOLS extends ToolSet = ToolSet>(options: CompactorPrepareStepOptions): PrepareStepFunction<TOOLS>;

/** search_history and expand_history for generateText's and streamText's tools, bound to one session. */
export declare function recallTools(options: { client: CompactorClient; sessionId: string }): ToolSet;
