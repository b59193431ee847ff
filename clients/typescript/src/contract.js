// The compactor's public contract as this package uses it: each fact once,
// the service's own (package contract in Go). test/contract.test.js
// compares every value here with `compactor contract --json`.

/** The endpoints' subjects. */
export const Subjects = Object.freeze({
  create: "compactor.session.create",
  append: "compactor.session.append",
  upload: "compactor.session.upload",
  context: "compactor.session.context",
  history: "compactor.session.history",
  message: "compactor.session.message",
  delete: "compactor.session.delete",
  breaker: "compactor.breaker.get",
  compact: "compactor.compact",
  result: "compactor.result.get",
  search: "compactor.session.search",
  expand: "compactor.session.expand",
});

/** The request triggers and their event types and subject prefixes. */
export const RequestRoutes = Object.freeze({
  over_budget: Object.freeze({ type: "ContextOverBudget", prefix: "agent.context.over_budget." }),
  overflow: Object.freeze({ type: "context_overflow", prefix: "agent.context.overflow." }),
  near_budget: Object.freeze({ type: "ContextNearBudget", prefix: "agent.context.near_budget." }),
});

/** The result and circuit events' subject prefixes, by event type. */
export const EventSubjects = Object.freeze({
  CompactionCompleted: "compaction.completed.",
  CompactionFailed: "compaction.failed.",
  CompactionCircuitOpened: "compaction.circuit_opened.",
  CompactionCircuitClosed: "compaction.circuit_closed.",
});

/** An error answer's headers. */
export const ErrorHeaders = Object.freeze({ code: "Nats-Service-Error-Code", error: "Nats-Service-Error" });

/** The session-id rule and its error. */
export const SessionIdPattern = /^[A-Za-z0-9_-]{1,200}$/;
export const SessionIdError = "session_id must be 1-200 letters, digits, '-' or '_'";

/** What an upload's part and the parts of one message may be. */
export const Limits = Object.freeze({ maxUploadPartBytes: 512 << 10, maxUploadParts: 128 });

/** The CloudEvents version and the binary mode's attribute header prefix. */
export const CloudEvents = Object.freeze({ specversion: "1.0", headerPrefix: "ce-" });

const recallTools = [
  {
    "name": "search_history",
    "description": "Search this conversation's full history, including the earlier part that was compacted into a summary or whose tool output was cleared. Use it when the summary lacks a detail you need: a file, a command, an error, a value, what someone said. Each hit shows the matching message (#seq) with a neighbour each side; a summarised one names the compaction_id that expand_history takes.",
    "parameters": {
      "type": "object",
      "properties": {
        "query": {
          "type": "string",
          "description": "Words, names or identifiers to look for (a file name, an error, an id): ranked by relevance. With mode substring, text as written; with mode regex, an RE2 expression.",
          "minLength": 1,
          "maxLength": 2000
        },
        "mode": {
          "type": "string",
          "enum": [
            "terms",
            "substring",
            "regex"
          ],
          "description": "terms (default): ranked by the query's words; substring or regex: the latest messages that match"
        },
        "roles": {
          "type": "array",
          "items": {
            "type": "string",
            "enum": [
              "system",
              "user",
              "assistant",
              "tool"
            ]
          },
          "description": "only messages of these roles"
        },
        "states": {
          "type": "array",
          "items": {
            "type": "string",
            "enum": [
              "raw",
              "cleared",
              "summarised"
            ]
          },
          "description": "only messages the context shows as they were (raw), as a placeholder (cleared), or only through the summary (summarised)"
        },
        "from_seq": {
          "type": "integer",
          "minimum": 0,
          "description": "only messages from this #seq"
        },
        "to_seq": {
          "type": "integer",
          "minimum": 0,
          "description": "only messages up to this #seq"
        },
        "limit": {
          "type": "integer",
          "minimum": 1,
          "maximum": 50,
          "description": "how many hits (default 10)"
        },
        "all_sessions": {
          "type": "boolean",
          "description": "also search the other recent conversations of this project (mode terms); a hit from one names its session_id"
        }
      },
      "required": [
        "query"
      ],
      "additionalProperties": false
    }
  },
  {
    "name": "expand_history",
    "description": "Read back, word for word, messages of this conversation that compaction summarised or cleared: every message a compaction's summary stands for (compaction_id), a tool call and its results (tool_call_id, as a cleared placeholder names it), or a #seq range. Long answers come in pages: call again with after set to the last #seq shown.",
    "parameters": {
      "type": "object",
      "properties": {
        "session_id": {
          "type": "string",
          "description": "another conversation a search_history hit named (default: this one)"
        },
        "compaction_id": {
          "type": "string",
          "description": "the compaction whose originals to read (search_history and the summary's header name it)"
        },
        "tool_call_id": {
          "type": "string",
          "description": "the tool call whose call and results to read"
        },
        "from_seq": {
          "type": "integer",
          "minimum": 0,
          "description": "the first #seq of a range"
        },
        "to_seq": {
          "type": "integer",
          "minimum": 0,
          "description": "the last #seq of a range"
        },
        "after": {
          "type": "integer",
          "minimum": 0,
          "description": "go on after this #seq (the last one the previous page showed)"
        }
      },
      "additionalProperties": false
    }
  }
];

/**
 * The recall tools a model calls to get back what compaction summarised or
 * cleared: search_history and expand_history, with their parameters' JSON
 * Schema (the service's one definition: test/contract.test.js compares).
 */
export const RecallTools = Object.freeze(recallTools.map((t) => Object.freeze(t)));

