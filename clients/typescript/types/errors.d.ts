/** @import { Failed } from "./types.js" */
/** Any error of the compactor client. */
export class CompactorError extends Error {
    /**
     * @param {string} message
     * @param {ErrorOptions} [options]
     */
    constructor(message: string, options?: ErrorOptions);
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
    constructor(subject: string, code: number, message: string, body?: {
        status?: string;
        head_seq?: number;
        quota?: string;
        retry_after_ms?: number;
    });
    /** @type {string} */
    subject: string;
    /** HTTP-like: 400, 404, 409, 413, 429, 503, 500. @type {number} */
    code: number;
    /** "not_applied", "retry" or "failed". @type {string} */
    status: string;
    /** @type {number | undefined} */
    headSeq: number | undefined;
    /** @type {string | undefined} */
    quota: string | undefined;
    /** @type {number | undefined} */
    retryAfterMs: number | undefined;
    /** Whether the same request may succeed when sent again. */
    get retryable(): boolean;
}
/** The session does not exist (an endpoint's 404). */
export class NotFoundError extends EndpointError {
}
/**
 * The session exists with other content, or an append's expected head
 * moved (an endpoint's 409; headSeq is the head then).
 */
export class ConflictError extends EndpointError {
}
/**
 * The store has no room for the write (an endpoint's 507): nothing was
 * written; the same request passes once space is freed.
 */
export class StorageFullError extends EndpointError {
}
/** No compactor service answers on the subject. */
export class NoServiceError extends CompactorError {
    /** @type {string} */
    subject: string;
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
    constructor(requestId: string, sessionId: string, ms: number);
    /** @type {string} */
    requestId: string;
    /** @type {string} */
    sessionId: string;
}
/**
 * A compaction failed: failed is the CompactionFailed event's data, reason
 * its reason ("summary_failed", "circuit_open", "session_not_found",
 * "quota_exceeded", ...), retryable whether the same request may succeed
 * later.
 */
export class CompactionFailedError extends CompactorError {
    /** @param {Failed} failed the CompactionFailed event's data */
    constructor(failed: Failed);
    /** @type {Failed} */
    failed: Failed;
    /** @type {string} */
    reason: string;
    /** @type {boolean} */
    retryable: boolean;
    /** @type {string} */
    sessionId: string;
    /** @type {string} */
    requestId: string;
}
import type { Failed } from "./types.js";
