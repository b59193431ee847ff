/** @import { ModelMessage, PrepareStepFunction, ToolSet } from "ai" */
/** @import { CompactorClient } from "./index.js" */
/** @import { Completed, Message } from "./types.js" */
/**
 * @typedef {object} CompactorPrepareStepOptions
 * @property {CompactorClient} client
 * @property {string} sessionId
 * @property {number} contextLimit The model's window, or the budget to keep the context under.
 * @property {string} [model] The session's model, for the service's token count (default "gpt-4o").
 * @property {number} [threshold] Compact when the context is over contextLimit times this (default 1).
 * @property {(completed: Completed) => void} [onCompaction] Called after each compaction.
 */
/**
 * The compactor's messages (OpenAI's chat format) of one AI SDK
 * ModelMessage: a tool message's results become one tool message each.
 * id names the message; a message that becomes several gets id.1, id.2...
 * @param {ModelMessage} m
 * @param {string} id
 * @returns {Message[]}
 */
export function fromModelMessage(m: ModelMessage, id: string): Message[];
/**
 * The AI SDK's ModelMessages of the compactor's context: the summary is a
 * user message, cleared tool outputs keep their placeholders.
 * @param {Message[]} messages
 * @returns {ModelMessage[]}
 */
export function toModelMessages(messages: Message[]): ModelMessage[];
/**
 * A prepareStep that keeps the step's messages in the compactor session
 * sessionId and, when the service's count of its context is over
 * contextLimit (times threshold), asks for a compaction and returns the
 * compacted context as the step's messages. Before any compaction it
 * returns {} and the step runs on its own messages.
 *
 * Each message is stored under an id made of its place in the step's
 * message list (the initial messages, then each step's response), so a
 * repeated call stores nothing twice. Pass the whole conversation to each
 * generateText call of one session (response.messages appended), as the
 * AI SDK expects anyway.
 *
 * options: client (a CompactorClient), sessionId, contextLimit (the
 * model's window, or the budget to keep under), model (the session's
 * model for the service's token count, default "gpt-4o"), threshold
 * (default 1), onCompaction(completed) (called after each compaction).
 * @template {ToolSet} [TOOLS=ToolSet]
 * @param {CompactorPrepareStepOptions} options
 * @returns {PrepareStepFunction<TOOLS>}
 */
export function compactorPrepareStep<TOOLS extends ToolSet = ToolSet>({ client, sessionId, contextLimit, model, threshold, onCompaction }?: CompactorPrepareStepOptions): PrepareStepFunction<TOOLS>;
/**
 * The recall tools for the AI SDK: search_history and expand_history,
 * bound to one session, for generateText's and streamText's tools. A model
 * that needs what the summary left out calls them; each answers what the
 * endpoint answers (hits with snippets, or a page of messages).
 *
 *   tools: { ...myTools, ...recallTools({ client, sessionId: "chat-42" }) }
 * @param {{ client: CompactorClient; sessionId: string }} options
 * @returns {ToolSet}
 */
export function recallTools({ client, sessionId }?: {
    client: CompactorClient;
    sessionId: string;
}): ToolSet;
export type CompactorPrepareStepOptions = {
    client: CompactorClient;
    sessionId: string;
    /**
     * The model's window, or the budget to keep the context under.
     */
    contextLimit: number;
    /**
     * The session's model, for the service's token count (default "gpt-4o").
     */
    model?: string | undefined;
    /**
     * Compact when the context is over contextLimit times this (default 1).
     */
    threshold?: number | undefined;
    /**
     * Called after each compaction.
     */
    onCompaction?: ((completed: Completed) => void) | undefined;
};
import type { ModelMessage } from "ai";
import type { Message } from "./types.js";
import type { ToolSet } from "ai";
import type { PrepareStepFunction } from "ai";
import type { CompactorClient } from "./index.js";
import type { Completed } from "./types.js";
