import type { StructuredToolInterface } from "@langchain/core/tools";
import type { BaseMessage } from "@langchain/core/messages";
import type { AgentMiddleware } from "langchain";
import type { CompactorClient, Completed, Message } from "./index.js";

/** A trigger condition, as summarizationMiddleware reads it: all that are given must hold. */
export interface ContextSize {
  tokens?: number;
  messages?: number;
  /** A share of contextLimit. */
  fraction?: number;
}

export interface CompactorMiddlewareOptions {
  client: CompactorClient;
  /** The session: a string, or a function of the agent's runtime (e.g. its thread id). */
  sessionId: string | ((runtime: unknown) => string);
  /** The model's window: the service compacts under it. */
  contextLimit: number;
  /** One condition, or a list of which any must hold (default {tokens: contextLimit}). */
  trigger?: ContextSize | ContextSize[];
  /** The session's model, for the service's token count (default "gpt-4o"). */
  model?: string;
  /** Counts the agent's messages for the trigger instead of the service's count. */
  tokenCounter?: (messages: BaseMessage[]) => number | Promise<number>;
  onCompaction?: (completed: Completed) => void;
}

/** The compactor's message of a LangChain message. */
export declare function fromLangChain(message: BaseMessage): Message;
/** The LangChain messages of the compactor's context; the summary is marked. */
export declare function toLangChain(messages: Message[]): BaseMessage[];
/** An agent middleware for createAgent, a drop-in for summarizationMiddleware backed by the compactor. */
export declare function compactorMiddleware(options: CompactorMiddlewareOptions): AgentMiddleware;

/** search_history and expand_history as LangChain tools, bound to one session. */
export declare function recallTools(options: { client: CompactorClient; sessionId: string }): StructuredToolInterface[];
