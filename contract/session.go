package contract

import (
	"errors"
	"fmt"
	"strconv"
)

// MaxSessionIDBytes bounds a session id.
const MaxSessionIDBytes = 200

// SessionIDPattern is the session-id rule as a regular expression (for
// the JSON Schemas and clients in other languages; ValidSessionID is the
// rule in Go).
const SessionIDPattern = `^[A-Za-z0-9_-]{1,200}$`

// ErrSessionID is the error of a session id that is not one.
var ErrSessionID = errors.New("session_id must be 1-200 letters, digits, '-' or '_'")

// ValidSessionID reports whether id can be a session id: one subject token
// and one key token (ASCII letters, digits, '_' and '-', 1 to
// MaxSessionIDBytes). Every request checks one: a loop, not an expression.
func ValidSessionID(id string) bool {
	if len(id) == 0 || len(id) > MaxSessionIDBytes {
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

// CheckSessionID says why id is not a session id (nil when it is),
// wrapping ErrSessionID and quoting at most 64 bytes of id.
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
