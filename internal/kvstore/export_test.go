package kvstore

import (
	"context"
	"strings"
	"time"
)

// FailWrites makes the store fail every write whose subject f refuses (f
// returns the error), as a connection lost mid-operation would.
func (s *Sessions) FailWrites(f func(subject string) error) { s.failWrite = f }

// BeforeRead calls f before each read of a session's data is sent: leader
// when the stream's leader answers it, subj the subject it reads.
func (s *Sessions) BeforeRead(f func(leader bool, subj string)) { s.beforeRead = f }

// SetClock replaces the store's clock.
func (s *Sessions) SetClock(now func() time.Time) { s.now = now }

// APIError maps a write's API error as the store does.
var APIError = apiError

// IsRecord reports whether a write's subject is a session record's.
func IsRecord(subject string) bool { return strings.HasPrefix(subject, "$KV."+RecordsBucketPrefix) }

// Place returns the shard, records bucket and key, and data subject prefix
// of a session of the default tenant.
func (s *Sessions) Place(sid string) (shard int, bucket, key, data string) {
	return s.PlaceOf(context.Background(), sid)
}

// PlaceOf is Place for a session of ctx's tenant.
func (s *Sessions) PlaceOf(ctx context.Context, sid string) (shard int, bucket, key, data string) {
	w, err := s.where(ctx, sid)
	if err != nil {
		panic(err)
	}
	return w.sh.n, RecordsBucket(w.sh.n), w.recKey(), w.subject("")
}
