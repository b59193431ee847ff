package legacystore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/session"
)

// Uploads: a message too large for one request reaches the service in
// parts (compactor.session.upload), kept under the session's keys until an
// append or create names the upload: <sid>.u.<sha256(upload id), 40 hex>.<part>.
// Each part carries the count of parts; a session's delete or sweep
// removes what was never used.

const hdrParts = "Compactor-Upload-Parts"

func uploadPrefix(sid, id string) string {
	h := sha256.Sum256([]byte(id))
	return sid + ".u." + hex.EncodeToString(h[:20])
}

func uploadKey(sid, id string, part int) string {
	return fmt.Sprintf("%s.%04d", uploadPrefix(sid, id), part)
}

// PutUploadPart stores part of parts of upload id for the session; the
// same part again replaces it.
func (s *Sessions) PutUploadPart(ctx context.Context, sid, id string, part, parts int, data []byte) error {
	if err := checkID(sid); err != nil {
		return err
	}
	rec, err := s.record(ctx, sid)
	if err != nil {
		return err
	}
	_, err = s.putWith(ctx, uploadKey(sid, id, part), data, nil, rec.Epoch, map[string]string{hdrParts: strconv.Itoa(parts)})
	return err
}

// UploadParts returns upload id's parts joined; an upload with a part
// missing is session.ErrInvalid, one never started session.ErrNotFound.
func (s *Sessions) UploadParts(ctx context.Context, sid, id string) ([]byte, error) {
	if err := checkID(sid); err != nil {
		return nil, err
	}
	rec, err := s.record(ctx, sid)
	if err != nil {
		return nil, err
	}
	first := uploadKey(sid, id, 0)
	vals, err := s.getAll(ctx, []string{first}, rec.Epoch)
	if err != nil {
		return nil, err
	}
	v0, ok := vals[first]
	if !ok {
		return nil, fmt.Errorf("upload %q of session %s: %w (its part 0 is missing)", id, sid, session.ErrNotFound)
	}
	parts, err := strconv.Atoi(v0.hdr.Get(hdrParts))
	if err != nil || parts < 1 {
		return nil, fmt.Errorf("upload %q of session %s: %w: part 0 does not say how many parts", id, sid, session.ErrCorrupt)
	}
	keys := make([]string, parts)
	for i := range keys {
		keys[i] = uploadKey(sid, id, i)
	}
	if vals, err = s.getAll(ctx, keys, rec.Epoch); err != nil {
		return nil, err
	}
	var out []byte
	for i, k := range keys {
		v, ok := vals[k]
		if !ok {
			return nil, fmt.Errorf("%w: upload %q of session %s: part %d of %d is missing", session.ErrInvalid, id, sid, i, parts)
		}
		if n, _ := strconv.Atoi(v.hdr.Get(hdrParts)); n != parts {
			return nil, fmt.Errorf("%w: upload %q of session %s: part %d says %d parts, part 0 says %d", session.ErrInvalid, id, sid, i, n, parts)
		}
		out = append(out, v.data...)
	}
	return out, nil
}

// DeleteUpload removes upload id's parts.
func (s *Sessions) DeleteUpload(ctx context.Context, sid, id string) error {
	if err := checkID(sid); err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subject(SessionsBucket, uploadPrefix(sid, id)+".>"))); err != nil {
		return unavailable(ctx, "delete upload", err)
	}
	return nil
}
