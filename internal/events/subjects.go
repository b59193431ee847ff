package events

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/schemas"
)

// Subject prefixes of the contract (SPEC §8); the session id is the last
// token.
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
	// so that compaction.> is one stream (COMPACTION_EVENTS) and a client
	// binding a consumer by that subject finds it. Until version 0.4 it
	// was compaction.dlq.
	DLQPrefix = "compactor.dlq."
	// LegacyDLQPrefix is the dead letters' prefix before it moved; the
	// DLQ stream's subjects are migrated at provisioning.
	LegacyDLQPrefix = "compaction.dlq."
)

// IngestPrefix: a tenant's request events reach the service account on
// tenant.<account>.compactor.request.<request subject> (its import maps
// agent.context.> there), and the service stores them in AGENT_CONTEXT
// under tenant.<account>.<request subject>, with the tenant's own
// deduplication id (see consumer.Ingest).
const IngestPrefix = "compactor.request."

// The subjects of the three streams: each prefix is one stream's.
const (
	RequestSubjects = "agent.context.>"
	ResultSubjects  = "compaction.>"
	DLQSubjects     = DLQPrefix + ">"
)

// Route is one event type of the contract: its subject, who publishes it
// and the JSON Schema of its data.
type Route struct {
	Type   string
	Prefix string
	// Request: runtimes publish it to AGENT_CONTEXT and the service
	// consumes it; otherwise the service publishes it to
	// COMPACTION_EVENTS.
	Request bool
	// Trigger is a request's pipeline trigger.
	Trigger pipeline.Trigger
	// Schema names the data's schema in package schemas.
	Schema string
}

// Contract is every event type of the contract, the one table that
// decoding, publishing, provisioning, the CLI and the AsyncAPI document's
// test read.
var Contract = []Route{
	{Type: TypeContextOverBudget, Prefix: OverBudgetPrefix, Request: true, Trigger: pipeline.TriggerOverBudget, Schema: schemas.ContextRequest},
	{Type: TypeContextOverflow, Prefix: OverflowPrefix, Request: true, Trigger: pipeline.TriggerOverflow, Schema: schemas.ContextRequest},
	{Type: TypeContextNearBudget, Prefix: NearBudgetPrefix, Request: true, Trigger: pipeline.TriggerNearBudget, Schema: schemas.ContextRequest},
	{Type: TypeCompactionCompleted, Prefix: CompletedPrefix, Schema: schemas.CompactionCompleted},
	{Type: TypeCompactionFailed, Prefix: FailedPrefix, Schema: schemas.CompactionFailed},
	{Type: TypeCompactionCircuitOpened, Prefix: CircuitOpenedPrefix, Schema: schemas.CompactionCircuitOpened},
	{Type: TypeCompactionCircuitClosed, Prefix: CircuitClosedPrefix, Schema: schemas.CompactionCircuitClosed},
}

// RouteOf returns the route of an event type.
func RouteOf(typ string) (Route, bool) {
	for _, r := range Contract {
		if r.Type == typ {
			return r, true
		}
	}
	return Route{}, false
}

// RequestRoute returns the route of the request type with trigger t.
func RequestRoute(t pipeline.Trigger) (Route, bool) {
	for _, r := range Contract {
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

// ValidSessionID reports whether id can be a session id: one subject token
// and one key token (letters, digits, '_' and '-', at most 200). Every
// request checks one: a loop, not an expression (1 % of an append's CPU).
func ValidSessionID(id string) bool {
	if len(id) == 0 || len(id) > 200 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ErrSessionID is the error of a session id that is not one.
var ErrSessionID = errors.New("session_id must be 1-200 letters, digits, '-' or '_'")

// CheckSessionID says why id is not a session id (nil when it is), quoting
// at most 64 bytes of it.
func CheckSessionID(id string) error {
	if ValidSessionID(id) {
		return nil
	}
	q := strconv.Quote(id)
	if len(id) > 64 {
		q = strconv.Quote(id[:64]) + fmt.Sprintf("… (%d bytes)", len(id))
	}
	return fmt.Errorf("%w, not %s", ErrSessionID, q)
}

// RequestSubject splits a request's subject into its route and session id;
// ok is false when the subject is not a request subject.
func RequestSubject(subject string) (r Route, sessionID string, ok bool) {
	for _, r := range Contract {
		if !r.Request {
			continue
		}
		if sid, found := strings.CutPrefix(subject, r.Prefix); found {
			return r, sid, true
		}
	}
	return Route{}, "", false
}
