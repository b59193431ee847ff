package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tenant"
	"github.com/compactor/compactor/internal/transcript"
	"github.com/compactor/compactor/schemas"
)

// Error answers: the code and status of each error, and the bodies
// decoded strictly.

// tooLarge is the error of a read whose answer is over one NATS message:
// the caller reads it in parts.
type tooLarge struct {
	bytes, room, parts int
}

func (e *tooLarge) Error() string {
	return fmt.Sprintf("the answer is %d bytes, over what one NATS message carries here (%d): read it in %d parts (the same request with \"part\": 0 to %d, and the digest the first part answers)",
		e.bytes, e.room, e.parts, e.parts-1)
}

// errorCode maps an error to a micro error code and a status: 400 for a bad
// request, 404 for an unknown session, 409 for a taken id or a moved head,
// 507 for a store with no room, 503 for what a retry may fix, 500
// otherwise.
func errorCode(err error) (contract.Code, contract.Status) {
	switch {
	case errors.Is(err, errBadRequest), errors.Is(err, session.ErrInvalid), errors.Is(err, pipeline.ErrInvalidRequest), errors.Is(err, transcript.ErrFormat):
		return contract.CodeBadRequest, contract.StatusNotApplied
	case errors.Is(err, errForbidden):
		return contract.CodeForbidden, contract.StatusNotApplied
	case errors.As(err, new(*tenant.QuotaError)):
		var q *tenant.QuotaError
		if errors.As(err, &q) && q.RetryAfter <= 0 {
			return contract.CodeTooMany, contract.StatusNotApplied // a quota of what is stored: room comes with deletes
		}
		return contract.CodeTooMany, contract.StatusRetry
	case errors.Is(err, session.ErrNotFound):
		return contract.CodeNotFound, contract.StatusNotApplied
	case errors.Is(err, session.ErrExists), errors.Is(err, session.ErrHeadMoved):
		return contract.CodeConflict, contract.StatusNotApplied
	case errors.Is(err, sessions.ErrChanged):
		return contract.CodeConflict, contract.StatusRetry
	case errors.Is(err, errBusy):
		return contract.CodeTooMany, contract.StatusRetry
	case errors.As(err, new(*tooLarge)):
		return contract.CodeTooLarge, contract.StatusFailed
	case errors.Is(err, session.ErrStorageFull):
		// Nothing written; the same request passes once space is freed.
		return contract.CodeStorageFull, contract.StatusNotApplied
	case errors.Is(err, session.ErrUnavailable), errors.Is(err, session.ErrConflict), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return contract.CodeUnavailable, contract.StatusRetry
	case errors.Is(err, session.ErrCorrupt):
		return contract.CodeInternal, contract.StatusNotApplied
	}
	return contract.CodeInternal, contract.StatusFailed
}

var errBadRequest = errors.New("bad request")

// errForbidden refuses a request whose caller the server names as another
// account than its subject's tenant.
var errForbidden = errors.New("forbidden")

// errorAnswer is the code and body of an error answer.
func errorAnswer(err error) (contract.Code, []byte) {
	code, status := errorCode(err)
	body := contract.ErrorBody{Status: status, Code: code, Error: err.Error()}
	if moved := (*session.HeadMovedError)(nil); errors.As(err, &moved) {
		body.HeadSeq = &moved.Head
	}
	if big := (*tooLarge)(nil); errors.As(err, &big) {
		body.Parts = big.parts
	}
	if q := (*tenant.QuotaError)(nil); errors.As(err, &q) {
		body.Quota = q.Quota
		if q.RetryAfter > 0 {
			body.RetryAfterMS = max(q.RetryAfter.Milliseconds(), 1)
		}
	}
	data, _ := json.Marshal(body)
	return code, data
}

func (s *Server) fail(r micro.Request, err error) {
	code, data := errorAnswer(err)
	if rerr := r.Error(code.String(), events.HeaderValue(err.Error()), data); rerr != nil {
		s.log.Warn("respond", slog.String("subject", r.Subject()), slog.String("error", rerr.Error()))
	}
}

// decode reads a request's body into v: one JSON object, no field v does
// not know (a misspelt "context_limt" is refused, not ignored). Errors name
// the fields as the body does.
func decode(r micro.Request, v any) error { return decodeBody(r.Data(), v) }

func decodeBody(data []byte, v any) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty body, want a JSON object", errBadRequest)
	}
	if err := schemas.CheckKeys(data); err != nil {
		return fmt.Errorf("%w: body: %v", errBadRequest, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %v", errBadRequest, schemas.DescribeJSON(err))
	}
	if dec.More() {
		return fmt.Errorf("%w: body: more than one JSON value", errBadRequest)
	}
	return nil
}

// decodeSession decodes the body into v and checks its session id (sid
// points into v); on an error it answers and returns false.
func (s *Server) decodeSession(r micro.Request, v any, sid *string) bool {
	if err := decodeSessionBody(r, v, sid); err != nil {
		s.fail(r, err)
		return false
	}
	return true
}

// decodeSessionBody decodes r's body into v and checks its session id.
func decodeSessionBody(r micro.Request, v any, sid *string) error {
	if err := decode(r, v); err != nil {
		return err
	}
	return checkSessionID(*sid)
}

func checkSessionID(sid string) error {
	if err := contract.CheckSessionID(sid); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return nil
}
