package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
)

// ServiceName is the NATS micro service's name ($SRV.PING.compactor).
const ServiceName = "compactor"

// The endpoints' subjects (SPEC §8; the session and breaker.list endpoints
// are additions).
const (
	SubjectCompact  = "compactor.compact"
	SubjectBreaker  = "compactor.breaker.get"
	SubjectReset    = "compactor.breaker.reset"
	SubjectBreakers = "compactor.breaker.list"
	SubjectCreate   = "compactor.session.create"
	SubjectAppend   = "compactor.session.append"
	SubjectContext  = "compactor.session.context"
	SubjectMessage  = "compactor.session.message"
	SubjectHistory  = "compactor.session.history"
	SubjectDelete   = "compactor.session.delete"
	SubjectUpload   = "compactor.session.upload"
	SubjectList     = "compactor.session.list"
	SubjectResult   = "compactor.result.get"
)

// Subjects is every endpoint's subject.
var Subjects = []string{SubjectCompact, SubjectBreaker, SubjectReset, SubjectBreakers, SubjectCreate, SubjectAppend,
	SubjectContext, SubjectMessage, SubjectHistory, SubjectDelete, SubjectUpload, SubjectList, SubjectResult, SubjectSearch, SubjectExpand}

// An error answer's headers (NATS micro's): the code, and the error's text
// (percent-encoded as a CloudEvents header value: EncodeHeaderValue).
const (
	HeaderErrorCode = "Nats-Service-Error-Code"
	HeaderError     = "Nats-Service-Error"
)

// Code is an error answer's code, an HTTP status.
type Code int

// The codes an endpoint answers with.
const (
	CodeBadRequest  Code = 400 // the request is wrong: not applied
	CodeForbidden   Code = 403 // the caller's account is not the subject's tenant
	CodeNotFound    Code = 404 // no such session (or stored result)
	CodeConflict    Code = 409 // a taken id, a moved head, or an answer changed while read in parts
	CodeTooLarge    Code = 413 // the answer is over one message: read it in parts (ErrorBody.Parts)
	CodeTooMany     Code = 429 // a quota, or the tenant's share of the workers (ErrorBody.Quota, RetryAfterMS)
	CodeInternal    Code = 500 // a corrupt session, or an error the service cannot classify
	CodeUnavailable Code = 503 // the store or the service is unavailable: retry, the same request is safe
	CodeStorageFull Code = 507 // the store is full: nothing written
)

// Codes is every Code an endpoint answers with.
var Codes = []Code{CodeBadRequest, CodeForbidden, CodeNotFound, CodeConflict, CodeTooLarge, CodeTooMany, CodeInternal, CodeUnavailable, CodeStorageFull}

// String is the code as its header carries it.
func (c Code) String() string { return strconv.Itoa(int(c)) }

// Status is what happened to a request an error answered.
type Status string

// Statuses of an error answer.
const (
	// StatusNotApplied: nothing was written, and the same request will be
	// refused again (bad input, unknown session, a taken id, a moved head).
	StatusNotApplied Status = "not_applied"
	// StatusRetry: nothing was written, or the outcome is unknown, because
	// the store was unavailable for longer than the service retries (a
	// failover): send the same request again, it is safe.
	StatusRetry Status = "retry"
	// StatusFailed: an error the service cannot classify.
	StatusFailed Status = "failed"
)

// ErrorBody is the body of an error answer of the session and breaker
// endpoints (beside the HeaderErrorCode and HeaderError headers).
type ErrorBody struct {
	Status Status `json:"status"`
	Code   Code   `json:"code"`
	Error  string `json:"error"`
	// HeadSeq is the session's head when an append's expected_head_seq did
	// not hold.
	HeadSeq *int64 `json:"head_seq,omitempty"`
	// Parts, on a 413 of a read that can answer in parts (context,
	// history), is how many: send the same request with "part" 0 to
	// Parts-1 (and the first part's "digest").
	Parts int `json:"parts,omitempty"`
	// Quota, on a 429 (quota_exceeded), is the tenant's quota the request
	// is over; RetryAfterMS, when it has room again.
	Quota        string `json:"quota,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

// CompactBody is the body of compactor.compact: a request's data, its id
// (default: a new one; the same id is answered once) and trigger
// (default over_budget; manual too).
type CompactBody struct {
	RequestData
	RequestID string  `json:"request_id,omitempty"`
	Trigger   Trigger `json:"trigger,omitempty"`
}

// ResultRequest asks compactor.result.get for the result event stored for
// a request.
type ResultRequest struct {
	SessionID string `json:"session_id"`
	RequestID string `json:"request_id"`
}

// StoredResult is a request's result event as the result stream keeps
// it: its type (CompactionCompleted or CompactionFailed), id and data.
type StoredResult struct {
	Type string          `json:"type"`
	ID   string          `json:"id"`
	Data json.RawMessage `json:"data"`
}

// Limits of one call.
const (
	// MaxMessagesPerCall bounds the messages of one create or append.
	MaxMessagesPerCall = 499
	// MaxUploadPartBytes bounds a part of an upload (compactor.session.upload)
	// and of a message or answer read in parts: a request carrying it,
	// base64-encoded, fits the default 1 MB max_payload.
	MaxUploadPartBytes = 512 << 10
	// MaxUploadParts bounds an upload's parts: a message is at most
	// MaxUploadParts x MaxUploadPartBytes (64 MiB).
	MaxUploadParts = 128
	// MaxRequestIDBytes bounds a request id (a CloudEvent's id).
	MaxRequestIDBytes = 256
)

// UploadBody is the body of compactor.session.upload: one part of a
// message too large for one request; an append then names it
// ({"upload_id"}) among its messages.
type UploadBody struct {
	SessionID string `json:"session_id"`
	UploadID  string `json:"upload_id"`
	Part      int    `json:"part"`
	Parts     int    `json:"parts"`
	// Data is a piece of the message's JSON, base64-encoded.
	Data []byte `json:"data"`
}

// PagedBody is the body of a read that may answer in parts (context,
// history).
type PagedBody struct {
	SessionID string `json:"session_id"`
	// Part, when set, asks for that part of the answer's JSON
	// (AnswerPart); without it the whole answer comes, or a 413 saying how
	// many parts there are.
	Part *int `json:"part,omitempty"`
	// Digest, with Part, names the answer whose part is wanted (the
	// digest of part 0): if the session changed since, the answer is a
	// 409 and the caller reads again from part 0.
	Digest string `json:"digest,omitempty"`
}

// AnswerPart is one part of an answer read in parts.
type AnswerPart struct {
	Part  int `json:"part"`
	Parts int `json:"parts"`
	// Digest is the SHA-256 of the whole answer, hex (Digest): every part
	// of one answer carries the same, and a request naming it gets a part
	// of that answer or a 409.
	Digest string `json:"digest"`
	// Data is the part's bytes (base64 in JSON).
	Data []byte `json:"data"`
}

// MessagePart is one part of a stored message's JSON, for a message too
// large for one answer (compactor.session.message with "part").
type MessagePart struct {
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
	Part      int    `json:"part"`
	Parts     int    `json:"parts"`
	// Data is the part's bytes (base64 in JSON); the parts joined are the
	// message's JSON.
	Data []byte `json:"data"`
}

// Digest is the digest AnswerPart carries for the whole answer.
func Digest(whole []byte) string {
	sum := sha256.Sum256(whole)
	return hex.EncodeToString(sum[:])
}
