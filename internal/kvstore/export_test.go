package kvstore

import "time"

// FailWrites makes the store fail every write whose last key f refuses
// (f returns the error), as a connection lost mid-operation would.
func (s *Sessions) FailWrites(f func(key string) error) { s.failWrite = f }

// SetClock replaces the store's clock.
func (s *Sessions) SetClock(now func() time.Time) { s.now = now }

// APIError maps a write's API error as the store does.
var APIError = apiError
