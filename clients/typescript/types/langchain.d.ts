/**
 * The compactor's message (OpenAI's chat format) of a LangChain message.
 * @param {BaseMessage} m
 * @returns {Message}
 */
export function fromLangChain(m: BaseMessage): Message;
/**
 * The LangChain messages of the compactor's context; the summary is marked.
 * @param {Message[]} messages
 * @returns {BaseMessage[]}
 */
export function toLangChain(messages: Message[]): BaseMessage[];
/**
 * An agent middleware for createAgent, a drop-in for
 * summarizationMiddleware backed by the compactor.
 *
 * options:
 * - client: a CompactorClient;
 * - sessionId: the session (a string, or a function of the agent's
 *   runtime, e.g. (runtime) => runtime.configurable?.thread_id);
 * - contextLimit: the model's window (the service compacts under it);
 * - trigger: as summarizationMiddleware's ({tokens}, {messages},
 *   {fraction} of contextLimit, or a list of such; default {tokens:
 *   contextLimit}), judged on the service's count of the context, or on
 *   tokenCounter(messages) when given;
 * - model: the session's model, for the service's token count (default
 *   "gpt-4o");
 * - onCompaction(completed): called after each compaction.
 * summarizationMiddleware's keep and summary prompt have no place here:
 * the service keeps the recent turns its configuration says and writes
 * its own summary (with the ledger of files, commands and errors).
 * @param {CompactorMiddlewareOptions} options
 * @returns {AgentMiddleware}
 */
export function compactorMiddleware({ client, sessionId, contextLimit, trigger, model, tokenCounter, onCompaction }?: CompactorMiddlewareOptions): AgentMiddleware;
/**
 * The recall tools for LangChain.js: search_history and expand_history,
 * bound to one session, for createAgent's tools; each answers what the
 * endpoint answers, as JSON.
 * @param {{ client: CompactorClient; sessionId: string }} options
 * @returns {StructuredToolInterface[]}
 */
export function recallTools({ client, sessionId }?: {
    client: CompactorClient;
    sessionId: string;
}): StructuredToolInterface[];
/**
 * A trigger condition, as summarizationMiddleware reads it: all that are
 * given must hold.
 */
export type ContextSize = {
    tokens?: number | undefined;
    messages?: number | undefined;
    /**
     * A share of contextLimit.
     */
    fraction?: number | undefined;
};
export type CompactorMiddlewareOptions = {
    client: CompactorClient;
    /**
     * The session: a string, or a function of the agent's runtime (e.g. its thread id).
     */
    sessionId: string | ((runtime: unknown) => string);
    /**
     * The model's window: the service compacts under it.
     */
    contextLimit: number;
    /**
     * One condition, or a list of which any must hold (default {tokens: contextLimit}).
     */
    trigger?: ContextSize | ContextSize[] | undefined;
    /**
     * The session's model, for the service's token count (default "gpt-4o").
     */
    model?: string | undefined;
    /**
     * Counts the agent's messages for the trigger instead of the service's count.
     */
    tokenCounter?: ((messages: BaseMessage[]) => number | Promise<number>) | undefined;
    /**
     * Called after each compaction.
     */
    onCompaction?: ((completed: Completed) => void) | undefined;
};
import type { BaseMessage } from "@langchain/core/messages";
import type { Message } from "./types.js";
import type { AgentMiddleware } from "langchain";
import type { CompactorClient } from "./index.js";
import type { StructuredToolInterface } from "@langchain/core/tools";
import type { Completed } from "./types.js";
