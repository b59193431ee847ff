package contract

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"time"
)

// Event types.
const (
	TypeContextOverBudget       = "ContextOverBudget"
	TypeContextOverflow         = "context_overflow"
	TypeContextNearBudget       = "ContextNearBudget"
	TypeCompactionCompleted     = "CompactionCompleted"
	TypeCompactionFailed        = "CompactionFailed"
	TypeCompactionCircuitOpened = "CompactionCircuitOpened"
	TypeCompactionCircuitClosed = "CompactionCircuitClosed"
)

// Subject prefixes of the events; the session id is the last token.
const (
	OverBudgetPrefix = "agent.context.over_budget."
	OverflowPrefix   = "agent.context.overflow."
	// NearBudgetPrefix: a runtime says its context nears its budget; the
	// service prepares the coming compaction (no result event).
	NearBudgetPrefix    = "agent.context.near_budget."
	CompletedPrefix     = "compaction.completed."
	FailedPrefix        = "compaction.failed."
	CircuitOpenedPrefix = "compaction.circuit_opened."
	CircuitClosedPrefix = "compaction.circuit_closed."
	// DLQPrefix is where dead letters go: a prefix apart from the results,
	// so that compaction.> is one stream (ResultStream). Until version 0.4
	// it was compaction.dlq.
	DLQPrefix = "compactor.dlq."
)

// The streams and their subjects: each prefix above is one stream's.
const (
	RequestStream   = "AGENT_CONTEXT"
	ResultStream    = "COMPACTION_EVENTS"
	DLQStream       = "COMPACTION_DLQ"
	RequestSubjects = "agent.context.>"
	ResultSubjects  = "compaction.>"
	DLQSubjects     = DLQPrefix + ">"
)

// Trigger is why a compaction was requested.
type Trigger string

// Triggers. Overflow and manual requests compact whatever the counts say;
// an over-budget request only when the context is over its limit.
const (
	TriggerOverBudget Trigger = "over_budget" // ContextOverBudget
	TriggerOverflow   Trigger = "overflow"    // context_overflow
	TriggerManual     Trigger = "manual"      // an operator or a runtime asked (compactor.compact)
	// TriggerNearBudget is a ContextNearBudget: not a compaction request
	// but a hint that one is coming (the service prepares it).
	TriggerNearBudget Trigger = "near_budget"
)

// Compacts reports whether t asks for a compaction (near_budget does not).
func (t Trigger) Compacts() bool {
	switch t {
	case TriggerOverBudget, TriggerOverflow, TriggerManual:
		return true
	}
	return false
}

// The JSON Schemas of the events' data (files of the schemas directory).
const (
	SchemaContextRequest          = "context_request.json"
	SchemaCompactionCompleted     = "compaction_completed.json"
	SchemaCompactionFailed        = "compaction_failed.json"
	SchemaCompactionCircuitOpened = "compaction_circuit_opened.json"
	SchemaCompactionCircuitClosed = "compaction_circuit_closed.json"
)

// Route is one event type: its subject, who publishes it and the JSON
// Schema of its data.
type Route struct {
	Type   string `json:"type"`
	Prefix string `json:"prefix"`
	// Request: runtimes publish it to RequestStream and the service
	// consumes it; otherwise the service publishes it to ResultStream.
	Request bool `json:"request"`
	// Trigger is a request's trigger.
	Trigger Trigger `json:"trigger,omitempty"`
	// Schema names the data's schema.
	Schema string `json:"schema"`
}

// Routes is every event type, the one table that decoding, publishing,
// provisioning, the clients and the AsyncAPI document's test read.
var Routes = []Route{
	{Type: TypeContextOverBudget, Prefix: OverBudgetPrefix, Request: true, Trigger: TriggerOverBudget, Schema: SchemaContextRequest},
	{Type: TypeContextOverflow, Prefix: OverflowPrefix, Request: true, Trigger: TriggerOverflow, Schema: SchemaContextRequest},
	{Type: TypeContextNearBudget, Prefix: NearBudgetPrefix, Request: true, Trigger: TriggerNearBudget, Schema: SchemaContextRequest},
	{Type: TypeCompactionCompleted, Prefix: CompletedPrefix, Schema: SchemaCompactionCompleted},
	{Type: TypeCompactionFailed, Prefix: FailedPrefix, Schema: SchemaCompactionFailed},
	{Type: TypeCompactionCircuitOpened, Prefix: CircuitOpenedPrefix, Schema: SchemaCompactionCircuitOpened},
	{Type: TypeCompactionCircuitClosed, Prefix: CircuitClosedPrefix, Schema: SchemaCompactionCircuitClosed},
}

// RouteOf returns the route of an event type.
func RouteOf(typ string) (Route, bool) {
	for _, r := range Routes {
		if r.Type == typ {
			return r, true
		}
	}
	return Route{}, false
}

// RequestRoute returns the route of the request type with trigger t.
func RequestRoute(t Trigger) (Route, bool) {
	for _, r := range Routes {
		if r.Request && r.Trigger == t {
			return r, true
		}
	}
	return Route{}, false
}

// Subject is where an event of type typ about session sessionID goes; ""
// for an unknown type.
func Subject(typ, sessionID string) string {
	r, ok := RouteOf(typ)
	if !ok {
		return ""
	}
	return r.Prefix + sessionID
}

// RequestSubject splits a request's subject into its route and session id;
// ok is false when the subject is not a request subject.
func RequestSubject(subject string) (r Route, sessionID string, ok bool) {
	for _, r := range Routes {
		if !r.Request {
			continue
		}
		if sid, found := strings.CutPrefix(subject, r.Prefix); found {
			return r, sid, true
		}
	}
	return Route{}, "", false
}

// RequestData is the data of a request event (ContextOverBudget,
// context_overflow, ContextNearBudget) and of compactor.compact's body.
type RequestData struct {
	SessionID           string `json:"session_id"`
	Model               string `json:"model,omitempty"`
	ContextLimit        int    `json:"context_limit,omitempty"`
	RequestedTokens     int    `json:"requested_tokens,omitempty"`
	MessageCount        int    `json:"message_count,omitempty"`
	Provider            string `json:"provider,omitempty"`
	ErrorCode           string `json:"error_code,omitempty"`
	ErrorMessage        string `json:"error_message,omitempty"`
	SummaryModel        string `json:"summary_model,omitempty"`
	SummaryContextLimit int    `json:"summary_context_limit,omitempty"`
	Focus               string `json:"focus,omitempty"`
	// Cache is the runtime's prompt cache, when it tells it: the service
	// judges it warm or cold at the request's time (the event's time
	// attribute, else when the request is handled).
	Cache *CacheData `json:"cache,omitempty"`
}

// CacheData is a runtime's prompt cache: when it last sent the context to
// its model, and how many seconds its provider keeps an unused prefix.
type CacheData struct {
	LastRequestTime time.Time `json:"last_request_time"`
	TTLSeconds      int       `json:"ttl_seconds"`
}

// resultNamespace roots the deterministic ids of result events (a UUID's
// 16 bytes: 2b0f1c8e-5d7a-4e55-9c1e-7d3f0a9b6c42).
var resultNamespace = [16]byte{0x2b, 0x0f, 0x1c, 0x8e, 0x5d, 0x7a, 0x4e, 0x55, 0x9c, 0x1e, 0x7d, 0x3f, 0x0a, 0x9b, 0x6c, 0x42}

// ResultID is a deterministic event id (and Nats-Msg-Id) derived from a key
// and a kind: the same for a redelivery, different for another key. It is
// the name-based UUID (version 5, RFC 9562) of kind, a NUL and key in
// resultNamespace.
func ResultID(key, kind string) string {
	h := sha1.New()
	h.Write(resultNamespace[:])
	h.Write([]byte(kind + "\x00" + key))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// RequestResultID is the id of the CompactionCompleted event answering
// request requestID: however often the request is delivered or repeated,
// JetStream's dedup keeps one.
func RequestResultID(requestID string) string { return ResultID(requestID, "result") }

// FailedResultID is the id of the CompactionFailed event answering request
// requestID. It differs from RequestResultID so that a request repeated
// after a retryable failure still stores its final outcome: the stream
// keeps the failure, then the completion, each once, and the later is the
// request's outcome.
func FailedResultID(requestID string) string { return ResultID(requestID, "failed") }

// ResultEventID is the id of a request's result event of either kind.
func ResultEventID(requestID string, failed bool) string {
	if failed {
		return FailedResultID(requestID)
	}
	return RequestResultID(requestID)
}

// CircuitID is the id of the event of type typ (opened or closed) about
// the breaker opening at openedAt: one event per opening however often it
// is reported or reset.
func CircuitID(sessionID string, openedAt time.Time, typ string) string {
	return ResultID(sessionID+"@"+openedAt.UTC().Format(time.RFC3339Nano), typ)
}
