package legacystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/session"
)

func rev(v uint64) *uint64 { return &v }

// apiError maps the error of a write's ack: a write that lost its
// compare-and-set, input the stream refuses whatever its health, and
// anything else, which left the write unapplied: the backend's trouble,
// and worth repeating.
func apiError(ctx context.Context, what string, code, errCode int, desc string) error {
	switch ec := jetstream.ErrorCode(errCode); ec {
	case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return fmt.Errorf("%s: %w: %s", what, session.ErrConflict, desc)
	case jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return fmt.Errorf("%s: %w: %s", what, session.ErrInvalid, desc)
	}
	return unavailable(ctx, what, &jetstream.APIError{Code: code, ErrorCode: jetstream.ErrorCode(errCode), Description: desc})
}

// put writes one value, tagged with epoch, with an expected revision when
// expect is set, and returns its revision.
func (s *Sessions) put(ctx context.Context, key string, data []byte, expect *uint64, epoch string) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	m := nats.NewMsg(subject(SessionsBucket, key))
	m.Data = data
	if epoch != "" {
		m.Header.Set(hdrEpoch, epoch)
	}
	if expect != nil {
		m.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(*expect, 10))
	}
	ack, err := s.js.PublishMsg(ctx, m)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return 0, apiError(ctx, "write "+key, apiErr.Code, int(apiErr.ErrorCode), apiErr.Description)
	}
	if err != nil {
		return 0, unavailable(ctx, "write "+key, err)
	}
	return ack.Sequence, nil
}

// Delete removes every value of the session: its record, messages, chunks,
// id index and compactions. Deleting a session that does not exist is not
// an error, so a repeated delete answers the same. The record is first
// marked deleted (compare-and-set), so no write racing the delete applies
// after it; then the session's subjects are purged.
func (s *Sessions) Delete(ctx context.Context, sid string) error {
	if err := checkID(sid); err != nil {
		return err
	}
	for range casRetries {
		rec, err := s.rawRecord(ctx, sid)
		if errors.Is(err, session.ErrNotFound) {
			return s.purge(ctx, sid) // what a failed create or delete may have left
		}
		if errors.Is(err, session.ErrCorrupt) {
			return s.purge(ctx, sid)
		}
		if err != nil {
			return err
		}
		if err := s.deleteAt(ctx, rec); !errors.Is(err, session.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("delete %s: %w: it kept changing", sid, session.ErrConflict)
}

// deleteAt deletes the session if its record is still rec (its revision):
// session.ErrConflict when it moved.
func (s *Sessions) deleteAt(ctx context.Context, rec session.Record) error {
	if !rec.Deleted {
		rec.Deleted, rec.UpdatedAt = true, s.now().UTC()
		b, _ := json.Marshal(rec)
		if _, err := s.put(ctx, recKey(rec.SessionID), b, rev(rec.Revision), ""); err != nil {
			return err
		}
	}
	return s.purge(ctx, rec.SessionID)
}

// purge removes every value under the session's keys from the stream
// (no delete markers are left: the keys are as if never written).
func (s *Sessions) purge(ctx context.Context, sid string) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subject(SessionsBucket, sid+".>"))); err != nil {
		return unavailable(ctx, "delete session "+sid, err)
	}
	return nil
}
