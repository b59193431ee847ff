package kvstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/session"
)

// Uploads: a message too large for one request reaches the service in
// parts (compactor.session.upload), kept on the session's subject
// .u.<sha256(upload id), 40 hex> until an append or create names the
// upload. Each part carries its number and the count of parts; a
// session's delete or sweep removes what was never used, and each part
// expires UploadTTL after it was stored (where the data stream allows
// per-message TTLs: provisioned since issue 42), so uploads never named
// cannot fill the store.

const (
	hdrPart  = "Compactor-Upload-Part"
	hdrParts = "Compactor-Upload-Parts"
)

// UploadTTL is how long an upload's part is kept: an upload is named by
// the append or create it is for within it.
const UploadTTL = time.Hour

func uploadKind(id string) string {
	h := sha256.Sum256([]byte(id))
	return "u." + hex.EncodeToString(h[:20])
}

// PutUploadPart stores part of parts of upload id for the session; the
// same part again replaces it.
func (s *Sessions) PutUploadPart(ctx context.Context, sid, id string, part, parts int, data []byte) error {
	w, err := s.where(ctx, sid)
	if err != nil {
		return err
	}
	rec, err := s.record(ctx, w)
	if err != nil {
		return err
	}
	hdr := map[string]string{hdrPart: strconv.Itoa(part), hdrParts: strconv.Itoa(parts)}
	if w.sh.ttl {
		hdr[jetstream.MsgTTLHeader] = UploadTTL.String()
	}
	_, _, err = s.publish(ctx, write{subject: w.subject(uploadKind(id)), data: data, epoch: rec.Epoch, hdr: hdr})
	return err
}

// UploadParts returns upload id's parts joined; an upload with a part
// missing is session.ErrInvalid, one never started session.ErrNotFound.
func (s *Sessions) UploadParts(ctx context.Context, sid, id string) ([]byte, error) {
	w, err := s.where(ctx, sid)
	if err != nil {
		return nil, err
	}
	rec, err := s.record(ctx, w)
	if err != nil {
		return nil, err
	}
	got := map[int][]byte{}
	counts := map[int]int{}
	err = s.rangeAll(ctx, w.dataStream(), w.subject(uploadKind(id)), 1, 0, false, func(r raw) (bool, error) {
		if r.epoch() != rec.Epoch {
			return true, nil // another incarnation's, on a lagging replica
		}
		part, err1 := strconv.Atoi(r.hdr.Get(hdrPart))
		parts, err2 := strconv.Atoi(r.hdr.Get(hdrParts))
		if err1 != nil || err2 != nil || parts < 1 || part < 0 || part >= parts {
			return false, fmt.Errorf("upload %q of session %s: %w: a part does not say which it is", id, sid, session.ErrCorrupt)
		}
		got[part], counts[part] = r.data, parts // a later one replaces it
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("upload %q of session %s: %w", id, sid, session.ErrNotFound)
	}
	if _, ok := got[0]; !ok {
		return nil, fmt.Errorf("upload %q of session %s: %w (its part 0 is missing)", id, sid, session.ErrNotFound)
	}
	parts := counts[0]
	var out []byte
	for i := range parts {
		b, ok := got[i]
		if !ok {
			return nil, fmt.Errorf("%w: upload %q of session %s: part %d of %d is missing", session.ErrInvalid, id, sid, i, parts)
		}
		if counts[i] != parts {
			return nil, fmt.Errorf("%w: upload %q of session %s: part %d says %d parts, part 0 says %d", session.ErrInvalid, id, sid, i, counts[i], parts)
		}
		out = append(out, b...)
	}
	return out, nil
}

// DeleteUpload removes upload id's parts.
func (s *Sessions) DeleteUpload(ctx context.Context, sid, id string) error {
	w, err := s.where(ctx, sid)
	if err != nil {
		return err
	}
	return s.purgeSubject(ctx, w.dataStream(), w.subject(uploadKind(id)))
}
