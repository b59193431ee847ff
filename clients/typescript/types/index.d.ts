/**
 * A text message; id makes an append of it safe to repeat.
 * @param {string} id
 * @param {Role} role
 * @param {string} content
 * @returns {Message}
 */
export function text(id: string, role: Role, content: string): Message;
/**
 * The messages as a provider's chat API takes them (OpenAI's format): the
 * chat fields alone, without the ids, seqs, token counts and compaction
 * metadata the service keeps.
 * @param {Message[]} messages
 * @returns {ChatMessage[]}
 */
export function toChat(messages: Message[]): ChatMessage[];
/**
 * Reads a CloudEvent from a NATS message, in binary mode (ce- headers) or
 * structured mode (application/cloudevents+json).
 * @param {{ headers?: any; data: Uint8Array }} msg
 * @returns {CloudEvent}
 */
export function decodeEvent(msg: {
    headers?: any;
    data: Uint8Array;
}): CloudEvent;
/**
 * RecallTools in the OpenAI Chat Completions tools format.
 * @returns {{ type: "function"; function: { name: string; description: string; parameters: Record<string, unknown> } }[]}
 */
export function openAITools(): {
    type: "function";
    function: {
        name: string;
        description: string;
        parameters: Record<string, unknown>;
    };
}[];
/**
 * RecallTools in the Anthropic Messages tools format.
 * @returns {{ name: string; description: string; input_schema: Record<string, unknown> }[]}
 */
export function anthropicTools(): {
    name: string;
    description: string;
    input_schema: Record<string, unknown>;
}[];
export * from "./errors.js";
/**
 * The strategies a completed result may name: how it reduced the context
 * (schemas/compaction_completed.json's enum; the tests compare them).
 */
export const Strategies: readonly ["cleared", "single", "chunked", "incremental", "prepared", "prepared_topup", "resumed", "existing", "redelivered"];
/** The CloudEvents source of requests when the client is given none. */
export const DEFAULT_SOURCE: "urn:compactor:client";
/** The compactor's client over a NATS connection the caller owns. */
export class CompactorClient {
    /**
     * @param {NatsConnection} nc a connected NATS connection (@nats-io/transport-node)
     * @param {{ source?: string; timeoutMs?: number }} [options] source: the
     *   CloudEvents source of the requests (a URI-reference naming the
     *   runtime); timeoutMs: bounds each endpoint request (default 30 s)
     */
    constructor(nc: NatsConnection, { source, timeoutMs }?: {
        source?: string;
        timeoutMs?: number;
    });
    /**
     * Stores a new session under sessionId ("" or undefined: the service
     * makes a UUID, which the answer names). The same create again answers
     * the session; another content on a taken id throws ConflictError.
     * @param {string | undefined} sessionId
     * @param {NewSession} [session]
     * @returns {Promise<Created>}
     */
    create(sessionId: string | undefined, { model, contextLimit, messages }?: NewSession): Promise<Created>;
    /**
     * Adds messages to a session. A message whose id is stored already is
     * not written again (status "already_applied"): an append is safe to
     * repeat. Messages too large for one request are uploaded in parts
     * first and appended with the others at once. expectedHeadSeq applies
     * the append only if the session's last seq is that (else ConflictError
     * with headSeq).
     * @param {string} sessionId
     * @param {Message[]} messages
     * @param {{ expectedHeadSeq?: number }} [options]
     * @returns {Promise<Appended>}
     */
    append(sessionId: string, messages: Message[], { expectedHeadSeq }?: {
        expectedHeadSeq?: number;
    }): Promise<Appended>;
    /**
     * What to send to the model now: the system prompt and pinned messages,
     * the summary, then the messages after it. An answer over one NATS
     * message is read in parts.
     * @param {string} sessionId
     * @returns {Promise<ContextView>}
     */
    context(sessionId: string): Promise<ContextView>;
    /**
     * The session's record, every message, every compaction and its prepared one.
     * @param {string} sessionId
     * @returns {Promise<History>}
     */
    history(sessionId: string): Promise<History>;
    /**
     * One stored message by its seq, summarised or not: the original of what
     * a compaction replaced. A message too large for one answer is read in
     * parts.
     * @param {string} sessionId
     * @param {number} seq
     * @returns {Promise<Message>}
     */
    message(sessionId: string, seq: number): Promise<Message>;
    /**
     * Finds the session's stored messages that match query, whatever
     * compaction did with them (raw, cleared or summarised): ranked by its
     * words and identifiers (mode "terms", the default), or the latest that
     * hold it as written ("substring") or match it ("regex"); each hit with a
     * snippet (it and a neighbour each side, within 300 tokens). With
     * allSessions, the tenant's other recent sessions too, each hit naming its
     * session_id.
     * @param {string} sessionId
     * @param {string} query
     * @param {SearchOptions} [options]
     * @returns {Promise<SearchAnswer>}
     */
    search(sessionId: string, query: string, { mode, roles, states, fromSeq, toSeq, limit, allSessions }?: SearchOptions): Promise<SearchAnswer>;
    /**
     * One page of the originals behind a compaction ({ compactionId }), a
     * tool call and its results ({ toolCallId }) or a seq range ({ fromSeq,
     * toSeq }), each with its state; the next page starts after the answer's
     * next ({ after: page.next }).
     * @param {string} sessionId
     * @param {ExpandOptions} options
     * @returns {Promise<Expanded>}
     */
    expand(sessionId: string, { compactionId, toolCallId, fromSeq, toSeq, after, limit }?: ExpandOptions): Promise<Expanded>;
    /**
     * Runs a recall tool call (RecallTools: search_history or
     * expand_history) a model made in session sessionId, with its arguments
     * as the model wrote them; answers what the endpoint answers.
     * @param {string} sessionId
     * @param {string} name
     * @param {Record<string, unknown> | string} [args]
     * @returns {Promise<SearchAnswer | Expanded>}
     */
    runTool(sessionId: string, name: string, args?: Record<string, unknown> | string): Promise<SearchAnswer | Expanded>;
    /**
     * Removes a session; deleting one that does not exist answers the same.
     * @param {string} sessionId
     * @returns {Promise<Deleted>}
     */
    delete(sessionId: string): Promise<Deleted>;
    /**
     * The session's circuit breaker.
     * @param {string} sessionId
     * @returns {Promise<Breaker>}
     */
    breaker(sessionId: string): Promise<Breaker>;
    /**
     * Asks for a compaction of the session with a request event
     * (ContextOverBudget, or context_overflow with trigger "overflow") and
     * waits for its one result: the CompactionCompleted data, or a thrown
     * CompactionFailedError with the CompactionFailed data. It subscribes
     * before publishing, so the result cannot be missed. After timeoutMs
     * (default 2 min) it throws NoResultError: the request is stored and
     * will still be answered; the same requestId waits for the same result.
     *
     * options: requestId (default a new UUID), trigger ("over_budget" or
     * "overflow"), model, contextLimit, requestedTokens, messageCount,
     * provider, errorCode, errorMessage (an overflow's), summaryModel,
     * summaryContextLimit, focus, cache ({lastRequestTime, ttlSeconds}),
     * traceparent, tracestate, timeoutMs, signal.
     * @param {string} sessionId
     * @param {CompactOptions} [options]
     * @returns {Promise<Completed>}
     */
    compact(sessionId: string, options?: CompactOptions): Promise<Completed>;
    /**
     * Asks for a compaction through the compactor.compact endpoint and
     * returns its result: the same result, and the same result event
     * published, as compact ("manual" is a trigger here too). A failed
     * compaction throws CompactionFailedError; any other error means no
     * result (send the same requestId again).
     * @param {string} sessionId
     * @param {CompactOptions} [options]
     * @returns {Promise<Completed>}
     */
    compactSync(sessionId: string, options?: CompactOptions): Promise<Completed>;
    /**
     * Tells the service the session's context nears its budget (a
     * ContextNearBudget event): it prepares the compaction the coming
     * request will need, so that request does not wait for a summary model.
     * No event answers it; it returns once the event is stored.
     * @param {string} sessionId
     * @param {CompactOptions} [options]
     * @returns {Promise<void>}
     */
    nearBudget(sessionId: string, options?: CompactOptions): Promise<void>;
    /**
     * The session's result events as they are published, as an async
     * iterator of {type, id, data} (type "CompactionCompleted" or
     * "CompactionFailed"); it ends with return(), break, or the signal.
     * @param {string} sessionId
     * @param {{ signal?: AbortSignal }} [options]
     * @returns {AsyncIterableIterator<ResultEvent> & { return(): Promise<IteratorResult<ResultEvent>> }}
     */
    results(sessionId: string, { signal }?: {
        signal?: AbortSignal;
    }): AsyncIterableIterator<ResultEvent> & {
        return(): Promise<IteratorResult<ResultEvent>>;
    };
    /**
     * Calls handler with each circuit event of a session (every session's
     * for "" or undefined): {type: "CompactionCircuitOpened" |
     * "CompactionCircuitClosed", sessionId, data}. Returns a subscription:
     * unsubscribe() stops at once, drain() once the events received are
     * handled.
     * @param {string | undefined} sessionId
     * @param {(event: CircuitEvent) => void} handler
     * @returns {CircuitSubscription}
     */
    subscribeCircuit(sessionId: string | undefined, handler: (event: CircuitEvent) => void): CircuitSubscription;
    #private;
}
export type Role = import("./types.js").Role;
export type ContentPart = import("./types.js").ContentPart;
export type ToolCall = import("./types.js").ToolCall;
export type Compaction = import("./types.js").Compaction;
export type Message = import("./types.js").Message;
export type ChatMessage = import("./types.js").ChatMessage;
export type Created = import("./types.js").Created;
export type Appended = import("./types.js").Appended;
export type ContextView = import("./types.js").ContextView;
export type SessionRecord = import("./types.js").SessionRecord;
export type Prepared = import("./types.js").Prepared;
export type History = import("./types.js").History;
export type Deleted = import("./types.js").Deleted;
export type Breaker = import("./types.js").Breaker;
export type Completed = import("./types.js").Completed;
export type Failed = import("./types.js").Failed;
export type ResultEvent = import("./types.js").ResultEvent;
export type CircuitEvent = import("./types.js").CircuitEvent;
export type CircuitSubscription = import("./types.js").CircuitSubscription;
export type CompactOptions = import("./types.js").CompactOptions;
export type NewSession = import("./types.js").NewSession;
export type Strategy = import("./types.js").Strategy;
export type ToolDef = import("./types.js").ToolDef;
export type MessageState = import("./types.js").MessageState;
export type SearchOptions = import("./types.js").SearchOptions;
export type SnippetPart = import("./types.js").SnippetPart;
export type SearchHit = import("./types.js").SearchHit;
export type SearchAnswer = import("./types.js").SearchAnswer;
export type ExpandOptions = import("./types.js").ExpandOptions;
export type Expanded = import("./types.js").Expanded;
export type CloudEvent<T = unknown> = import("./types.js").CloudEvent<T>;
import type { NatsConnection } from "@nats-io/transport-node";
export { Subjects, EventSubjects, RequestRoutes, ErrorHeaders, SessionIdPattern, SessionIdError, Limits, RecallTools } from "./contract.js";
