/** The endpoints' subjects. */
export const Subjects: Readonly<{
    create: "compactor.session.create";
    append: "compactor.session.append";
    upload: "compactor.session.upload";
    context: "compactor.session.context";
    history: "compactor.session.history";
    message: "compactor.session.message";
    delete: "compactor.session.delete";
    breaker: "compactor.breaker.get";
    compact: "compactor.compact";
    result: "compactor.result.get";
    search: "compactor.session.search";
    expand: "compactor.session.expand";
}>;
/** The request triggers and their event types and subject prefixes. */
export const RequestRoutes: Readonly<{
    over_budget: Readonly<{
        type: "ContextOverBudget";
        prefix: "agent.context.over_budget.";
    }>;
    overflow: Readonly<{
        type: "context_overflow";
        prefix: "agent.context.overflow.";
    }>;
    near_budget: Readonly<{
        type: "ContextNearBudget";
        prefix: "agent.context.near_budget.";
    }>;
}>;
/** The result and circuit events' subject prefixes, by event type. */
export const EventSubjects: Readonly<{
    CompactionCompleted: "compaction.completed.";
    CompactionFailed: "compaction.failed.";
    CompactionCircuitOpened: "compaction.circuit_opened.";
    CompactionCircuitClosed: "compaction.circuit_closed.";
}>;
/** An error answer's headers. */
export const ErrorHeaders: Readonly<{
    code: "Nats-Service-Error-Code";
    error: "Nats-Service-Error";
}>;
/** The session-id rule and its error. */
export const SessionIdPattern: RegExp;
export const SessionIdError: "session_id must be 1-200 letters, digits, '-' or '_'";
/** What an upload's part and the parts of one message may be. */
export const Limits: Readonly<{
    maxUploadPartBytes: number;
    maxUploadParts: 128;
}>;
/** The CloudEvents version and the binary mode's attribute header prefix. */
export const CloudEvents: Readonly<{
    specversion: "1.0";
    headerPrefix: "ce-";
}>;
/**
 * The recall tools a model calls to get back what compaction summarised or
 * cleared: search_history and expand_history, with their parameters' JSON
 * Schema (the service's one definition: test/contract.test.js compares).
 */
export const RecallTools: readonly Readonly<{
    name: string;
    description: string;
    parameters: {
        type: string;
        properties: {
            query: {
                type: string;
                description: string;
                minLength: number;
                maxLength: number;
            };
            mode: {
                type: string;
                enum: string[];
                description: string;
            };
            roles: {
                type: string;
                items: {
                    type: string;
                    enum: string[];
                };
                description: string;
            };
            states: {
                type: string;
                items: {
                    type: string;
                    enum: string[];
                };
                description: string;
            };
            from_seq: {
                type: string;
                minimum: number;
                description: string;
            };
            to_seq: {
                type: string;
                minimum: number;
                description: string;
            };
            limit: {
                type: string;
                minimum: number;
                maximum: number;
                description: string;
            };
            all_sessions: {
                type: string;
                description: string;
            };
            session_id?: undefined;
            compaction_id?: undefined;
            tool_call_id?: undefined;
            after?: undefined;
        };
        required: string[];
        additionalProperties: boolean;
    };
} | {
    name: string;
    description: string;
    parameters: {
        type: string;
        properties: {
            session_id: {
                type: string;
                description: string;
            };
            compaction_id: {
                type: string;
                description: string;
            };
            tool_call_id: {
                type: string;
                description: string;
            };
            from_seq: {
                type: string;
                minimum: number;
                description: string;
            };
            to_seq: {
                type: string;
                minimum: number;
                description: string;
            };
            after: {
                type: string;
                minimum: number;
                description: string;
            };
            query?: undefined;
            mode?: undefined;
            roles?: undefined;
            states?: undefined;
            limit?: undefined;
            all_sessions?: undefined;
        };
        additionalProperties: boolean;
        required?: undefined;
    };
}>[];
