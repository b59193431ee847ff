import type { Strategies } from "./index.js";
export type Role = "system" | "user" | "assistant" | "tool";
/** A content part in OpenAI's format (text, image_url, input_audio, file). */
export type ContentPart = {
    type: "text";
    text: string;
} | {
    type: "image_url";
    image_url: {
        url: string;
        detail?: "low" | "high" | "auto";
    };
} | {
    type: string;
    [key: string]: unknown;
};
export interface ToolCall {
    id: string;
    type: "function";
    function: {
        name: string;
        arguments: string;
    };
}
/** A message the service keeps beside a compaction message: what it covers. */
export interface Compaction {
    summary_text: string;
    from_seq: number;
    to_seq: number;
    from_id: string;
    to_id: string;
    tail_start_id?: string;
    tail_start_seq: number;
    previous_compaction_id?: string;
    messages_summarised: number;
    tokens_before: number;
    tokens_after: number;
    summary_tokens: number;
    summary_model: string;
    idempotency_key: string;
    request_id?: string;
    incremental: boolean;
    chunks: number;
    llm_calls: number;
    pinned_seqs?: number[];
    created_at: string;
    /** "summarise" or "clear_tool_results". */
    step?: string;
    summary_from_seq?: number;
    summary_to_seq?: number;
    cleared?: {
        seq: number;
        id: string;
        kind: string;
        tool?: string;
        tokens: number;
    }[];
    cleared_now?: number;
    cleared_tokens?: number;
    ledger?: Record<string, unknown>;
    ledger_bullets?: string[];
    prefix_kept_tokens?: number;
}
/**
 * A chat message in OpenAI's format with what the service keeps beside it
 * (id, seq, tokens; on a compaction message its metadata).
 */
export interface Message {
    /** The client's id: an append repeated with the same id is applied once. */
    id?: string;
    seq?: number;
    role: Role;
    content: string | ContentPart[] | null;
    name?: string;
    tool_calls?: ToolCall[];
    tool_call_id?: string;
    tokens?: number;
    is_compaction?: boolean;
    compaction?: Compaction;
    summarised_by?: string;
}
/** A message as a chat API takes it: the chat fields alone. */
export interface ChatMessage {
    role: Role;
    content: string | ContentPart[] | null;
    name?: string;
    tool_calls?: ToolCall[];
    tool_call_id?: string;
}
export interface Created {
    session_id: string;
    model: string;
    context_limit: number;
    messages: number;
    head_seq: number;
    tokens: number;
}
export interface Appended {
    session_id: string;
    /** "applied", or "already_applied" when every message was stored already. */
    status: "applied" | "already_applied";
    head_seq: number;
    messages: {
        id: string;
        seq: number;
        applied: boolean;
    }[];
    ids: string[];
    first_seq: number;
    last_seq: number;
    bytes: number;
}
/** What to send to the model now. */
export interface ContextView {
    session_id: string;
    model: string;
    context_limit: number;
    head_seq: number;
    tokens: number;
    compaction_id?: string;
    messages: Message[];
}
export interface SessionRecord {
    session_id: string;
    model?: string;
    context_limit?: number;
    head_seq: number;
    pinned_seqs?: number[];
    tail_start_id?: string;
    tail_start_seq?: number;
    compaction_id?: string;
    compactions?: number;
    created_at: string;
    updated_at: string;
}
export interface Prepared {
    session_id: string;
    /** "preparing", "ready" or "failed". */
    state: string;
    base_compaction_id: string;
    head_seq: number;
    from_seq?: number;
    to_seq?: number;
    budget?: number;
    compaction?: Message;
    started_at: string;
    ready_at?: string;
    trigger?: string;
    error?: string;
    /** Whether a request would commit it now. */
    usable: boolean;
}
export interface History {
    record: SessionRecord;
    messages: Message[];
    compactions: Message[];
    prepared: Prepared[];
}
export interface Deleted {
    session_id: string;
    deleted: boolean;
}
export interface Breaker {
    session_id: string;
    state: "closed" | "open";
    failures: number;
    last_error?: string;
    opened_at?: string;
    updated_at?: string;
}
/** The data of a CompactionCompleted event. */
export interface Completed {
    session_id: string;
    request_id: string;
    trigger: string;
    /** "compacted", "noop", "already_compacted" or "nothing_to_compact". */
    outcome: string;
    decision?: string;
    idempotency_key?: string;
    compaction_message_id?: string;
    tail_start_id?: string;
    messages_summarised: number;
    tokens_before: number;
    tokens_after: number;
    context_limit?: number;
    summary_tokens: number;
    incremental: boolean;
    chunks: number;
    llm_calls: number;
    summary_input_tokens: number;
    summary_output_tokens: number;
    summary_model?: string;
    /** How it reduced the context: one of Strategies. */
    strategy?: Strategy;
    prefix_kept_tokens: number;
    cache_write_tokens: number;
    cache_state?: "warm" | "cold";
    tool_results_cleared: number;
    cleared_tokens: number;
    prepared_age_ms?: number;
    instructions_dropped?: number;
    duration_ms: number;
}
/** The data of a CompactionFailed event. */
export interface Failed {
    session_id: string;
    request_id: string;
    trigger: string;
    reason: string;
    error: string;
    failures: number;
    retryable: boolean;
    quota?: string;
    retry_after_ms?: number;
    llm_calls: number;
    summary_input_tokens: number;
    summary_output_tokens: number;
    duration_ms: number;
}
/** A CloudEvent read from NATS. */
export interface CloudEvent<T = unknown> {
    id: string;
    type: string;
    source: string;
    subject: string;
    time?: string;
    extensions: Record<string, string>;
    data: T;
}
export interface ResultEvent extends CloudEvent<Completed | Failed> {
    type: "CompactionCompleted" | "CompactionFailed";
}
export interface CircuitEvent {
    type: "CompactionCircuitOpened" | "CompactionCircuitClosed";
    sessionId: string;
    data: {
        session_id: string;
        failures: number;
        last_error?: string;
        opened_at?: string;
        closed_at?: string;
        by?: string;
    };
}
export interface CircuitSubscription {
    /** Stops at once. */
    unsubscribe(): void;
    /** Stops taking events once those received are handled. */
    drain(): Promise<void>;
    closed: Promise<void>;
}
export interface CompactOptions {
    /** Identifies the request (default a new UUID): the same id is answered once. */
    requestId?: string;
    trigger?: "over_budget" | "overflow" | "manual";
    model?: string;
    contextLimit?: number;
    requestedTokens?: number;
    messageCount?: number;
    provider?: string;
    errorCode?: string;
    errorMessage?: string;
    summaryModel?: string;
    summaryContextLimit?: number;
    focus?: string;
    /** The runtime's prompt cache: when it last sent the context, and the provider's TTL. */
    cache?: {
        lastRequestTime: Date | string | number;
        ttlSeconds: number;
    };
    traceparent?: string;
    tracestate?: string;
    /** How long to wait for the result (default 2 min). */
    timeoutMs?: number;
    signal?: AbortSignal;
}
export interface NewSession {
    model?: string;
    contextLimit?: number;
    messages?: Message[];
}
/** How a completed result reduced the context: one of Strategies. */
export type Strategy = (typeof Strategies)[number];
export interface ToolDef {
    name: "search_history" | "expand_history";
    description: string;
    parameters: Record<string, unknown>;
}
export type MessageState = "raw" | "cleared" | "summarised";
export interface SearchOptions {
    mode?: "terms" | "substring" | "regex";
    roles?: Role[];
    states?: MessageState[];
    fromSeq?: number;
    toSeq?: number;
    limit?: number;
    /** The tenant's other recent sessions too (mode terms). */
    allSessions?: boolean;
}
export interface SnippetPart {
    seq: number;
    id: string;
    role: Role;
    name?: string;
    state: MessageState;
    text: string;
    /** The text is part of the message: expand its seq for the rest. */
    cut?: boolean;
}
export interface SearchHit {
    /** The hit's session (a search with allSessions). */
    session_id?: string;
    seq: number;
    id: string;
    role: Role;
    state: MessageState;
    /** On a summarised message: the compaction expand takes. */
    compaction_id?: string;
    score?: number;
    snippet: SnippetPart[];
}
export interface SearchAnswer {
    session_id: string;
    query: string;
    mode: string;
    head_seq: number;
    hits: SearchHit[];
}
export interface ExpandOptions {
    compactionId?: string;
    toolCallId?: string;
    fromSeq?: number;
    toSeq?: number;
    after?: number;
    limit?: number;
}
export interface Expanded {
    session_id: string;
    messages: Message[];
    states: MessageState[];
    /** The after of the next page; absent on the last. */
    next?: number;
    /** Messages over one answer: read each with message(). */
    omitted?: number[];
}
