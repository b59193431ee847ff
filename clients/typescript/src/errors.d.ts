import type { Failed } from "./index.js";

export declare class CompactorError extends Error {}

/** An endpoint's error answer. */
export declare class EndpointError extends CompactorError {
  subject: string;
  /** HTTP-like: 400, 404, 409, 413, 429, 503, 500. */
  code: number;
  /** "not_applied", "retry" or "failed". */
  status: string;
  headSeq?: number;
  quota?: string;
  retryAfterMs?: number;
  readonly retryable: boolean;
}
export declare class NotFoundError extends EndpointError {}
export declare class ConflictError extends EndpointError {}
export declare class StorageFullError extends EndpointError {}
export declare class NoServiceError extends CompactorError {
  subject: string;
}
export declare class NoResultError extends CompactorError {
  requestId: string;
  sessionId: string;
}
export declare class CompactionFailedError extends CompactorError {
  failed: Failed;
  reason: string;
  retryable: boolean;
  sessionId: string;
  requestId: string;
}
