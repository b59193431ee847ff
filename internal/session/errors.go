package session

import (
	"errors"
	"strconv"
)

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
	// ErrExists is returned by a create when the session already exists
	// with other content (a create repeated with the same content succeeds),
	// and by an append whose message id the session holds for a message
	// with other content (an *IDTakenError; a true repeat succeeds).
	ErrExists = errors.New("already exists")
	// ErrInvalid is returned for input the store refuses to keep: a message
	// with a bad role, a record without a session id.
	ErrInvalid = errors.New("invalid")
	// ErrHeadMoved is returned by an append whose expected head seq is not
	// the session's head: nothing was written.
	ErrHeadMoved = errors.New("head moved")
	// ErrCorrupt is returned when stored state does not decode (a record or
	// message that is not what this service writes): retrying cannot help.
	ErrCorrupt = errors.New("corrupt stored state")
	// ErrUnavailable is returned when the backend could not be reached or
	// had no leader (a failover, a partition): the write was not applied or
	// its outcome is unknown, and repeating it is safe (creates and appends
	// are idempotent).
	ErrUnavailable = errors.New("store unavailable")
	// ErrStorageFull is returned when the backend refused a write for want
	// of room (its store at max_file_store, a stream at its byte limit):
	// nothing was written, and the same write passes once space is freed
	// (deleting sessions frees it).
	ErrStorageFull = errors.New("store full")
)

// HeadMovedError is an ErrHeadMoved with the session's actual head.
type HeadMovedError struct {
	Expected, Head int64
}

func (e *HeadMovedError) Error() string {
	return "head moved: expected head seq " + strconv.FormatInt(e.Expected, 10) + ", the session's is " + strconv.FormatInt(e.Head, 10)
}

// Is makes errors.Is(err, ErrHeadMoved) true.
func (e *HeadMovedError) Is(target error) bool { return target == ErrHeadMoved }

// IDTakenError is the ErrExists of an append that gives a message the id of
// a stored message with other content: nothing was appended.
type IDTakenError struct {
	ID  string
	Seq int64
}

func (e *IDTakenError) Error() string {
	return "message id " + strconv.Quote(e.ID) + " is taken: the session holds it as message " + strconv.FormatInt(e.Seq, 10) +
		" with other content, so nothing was appended (an id names one message: give the new one another id)"
}

// Is makes errors.Is(err, ErrExists) true.
func (e *IDTakenError) Is(target error) bool { return target == ErrExists }
