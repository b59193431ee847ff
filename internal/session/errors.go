package session

import "errors"

// Errors a session or breaker store returns. Stores translate their backend's
// errors into these where they enter the store, so callers never see a
// backend type.
var (
	// ErrNotFound is returned when a session, message, compaction or breaker
	// does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict is returned when a compare-and-set lost a race: the record
	// changed since it was read in a way the write cannot merge with (another
	// compaction committed first, or a create found the key taken).
	ErrConflict = errors.New("conflict")
	// ErrExists is returned by a create when the session already exists.
	ErrExists = errors.New("already exists")
	// ErrInvalid is returned for input the store refuses to keep: a message
	// with a bad role, a record without a session id.
	ErrInvalid = errors.New("invalid")
)
