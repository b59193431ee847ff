package events

import (
	"regexp"
	"strings"
)

// Subject prefixes of the contract (SPEC §8); the session id is the last
// token.
const (
	OverBudgetPrefix    = "agent.context.over_budget."
	OverflowPrefix      = "agent.context.overflow."
	CompletedPrefix     = "compaction.completed."
	FailedPrefix        = "compaction.failed."
	CircuitOpenedPrefix = "compaction.circuit_opened."
	CircuitClosedPrefix = "compaction.circuit_closed."
	DLQPrefix           = "compaction.dlq."
)

var prefixes = map[string]string{
	TypeContextOverBudget:       OverBudgetPrefix,
	TypeContextOverflow:         OverflowPrefix,
	TypeCompactionCompleted:     CompletedPrefix,
	TypeCompactionFailed:        FailedPrefix,
	TypeCompactionCircuitOpened: CircuitOpenedPrefix,
	TypeCompactionCircuitClosed: CircuitClosedPrefix,
}

// Subject is where an event of type typ about session sessionID goes; ""
// for an unknown type.
func Subject(typ, sessionID string) string {
	p, ok := prefixes[typ]
	if !ok {
		return ""
	}
	return p + sessionID
}

var token = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// ValidSessionID reports whether id can be a session id: one subject token
// and one key token (letters, digits, '_' and '-', at most 200).
func ValidSessionID(id string) bool { return token.MatchString(id) }

// RequestSubject splits a request's subject into its event type and session
// id; ok is false when the subject is not a request subject.
func RequestSubject(subject string) (typ, sessionID string, ok bool) {
	for _, typ := range []string{TypeContextOverBudget, TypeContextOverflow} {
		if sid, found := strings.CutPrefix(subject, prefixes[typ]); found {
			return typ, sid, true
		}
	}
	return "", "", false
}
