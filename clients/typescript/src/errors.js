// Errors of the compactor client. Every error the client throws is a
// CompactorError; the subclasses say what happened.

/** @import { Failed } from "./types.js" */

/** Any error of the compactor client. */
export class CompactorError extends Error {
  /**
   * @param {string} message
   * @param {ErrorOptions} [options]
   */
  constructor(message, options) {
    super(message, options);
    this.name = "CompactorError";
  }
}

/**
 * An endpoint answered an error (compactor.session.*, compactor.compact).
 * code is HTTP-like: 400 bad input, 404 no such session, 409 a taken id or a
 * moved head, 413 an answer too large, 429 a quota, 503 retry, 500.
 * status says what happened to the request: "not_applied" (nothing was
 * written), "retry" (send the same request again: it is safe) or "failed".
 */
export class EndpointError extends CompactorError {
  /**
   * @param {string} subject the endpoint's subject
   * @param {number} code the answer's code
   * @param {string} message the answer's error text
   * @param {{ status?: string; head_seq?: number; quota?: string; retry_after_ms?: number }} [body] the answer's error body
   */
  constructor(subject, code, message, body = {}) {
    super(`${subject}: ${code} ${message}`);
    this.name = "EndpointError";
    /** @type {string} */
    this.subject = subject;
    /** HTTP-like: 400, 404, 409, 413, 429, 503, 500. @type {number} */
    this.code = code;
    /** "not_applied", "retry" or "failed". @type {string} */
    this.status = body.status ?? "";
    /** @type {number | undefined} */
    this.headSeq = body.head_seq;
    /** @type {string | undefined} */
    this.quota = body.quota;
    /** @type {number | undefined} */
    this.retryAfterMs = body.retry_after_ms;
  }

  /** Whether the same request may succeed when sent again. */
  get retryable() {
    return this.status === "retry" || this.code === 503;
  }
}

/** The session does not exist (an endpoint's 404). */
export class NotFoundError extends EndpointError {
  /** @param {ConstructorParameters<typeof EndpointError>} args */
  constructor(...args) {
    super(...args);
    this.name = "NotFoundError";
  }
}

/**
 * The session exists with other content, or an append's expected head
 * moved (an endpoint's 409; headSeq is the head then).
 */
export class ConflictError extends EndpointError {
  /** @param {ConstructorParameters<typeof EndpointError>} args */
  constructor(...args) {
    super(...args);
    this.name = "ConflictError";
  }
}

/**
 * The store has no room for the write (an endpoint's 507): nothing was
 * written; the same request passes once space is freed.
 */
export class StorageFullError extends EndpointError {
  /** @param {ConstructorParameters<typeof EndpointError>} args */
  constructor(...args) {
    super(...args);
    this.name = "StorageFullError";
  }
}

/** No compactor service answers on the subject. */
export class NoServiceError extends CompactorError {
  /**
   * @param {string} subject
   * @param {ErrorOptions} [options]
   */
  constructor(subject, options) {
    super(`${subject}: no compactor service answers (is \`compactor serve\` running against this NATS server?)`, options);
    this.name = "NoServiceError";
    /** @type {string} */
    this.subject = subject;
  }
}

/**
 * No result arrived before the wait ended. The request is stored and will
 * still be answered: compact again with the same requestId to wait for it.
 */
export class NoResultError extends CompactorError {
  /**
   * @param {string} requestId
   * @param {string} sessionId
   * @param {number} ms how long it waited
   */
  constructor(requestId, sessionId, ms) {
    super(`no result for request ${requestId} of session ${sessionId} within ${ms} ms: it is stored and will still be answered; compact again with the same requestId to wait for it`);
    this.name = "NoResultError";
    /** @type {string} */
    this.requestId = requestId;
    /** @type {string} */
    this.sessionId = sessionId;
  }
}

/**
 * A compaction failed: failed is the CompactionFailed event's data, reason
 * its reason ("summary_failed", "circuit_open", "session_not_found",
 * "quota_exceeded", ...), retryable whether the same request may succeed
 * later.
 */
export class CompactionFailedError extends CompactorError {
  /** @param {Failed} failed the CompactionFailed event's data */
  constructor(failed) {
    super(`compaction of ${failed.session_id} failed: ${failed.reason}: ${failed.error}`);
    this.name = "CompactionFailedError";
    /** @type {Failed} */
    this.failed = failed;
    /** @type {string} */
    this.reason = failed.reason;
    /** @type {boolean} */
    this.retryable = Boolean(failed.retryable);
    /** @type {string} */
    this.sessionId = failed.session_id;
    /** @type {string} */
    this.requestId = failed.request_id;
  }
}
