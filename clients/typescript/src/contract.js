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
