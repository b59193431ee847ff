package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tenant"
	"github.com/compactor/compactor/internal/transcript"
)

// Every error an endpoint meets answers one code and status, as the
// contract says a caller reads them: not_applied where the same request
// would be refused again, retry where sending it again is safe and may
// pass. A wrapped error answers as the error it wraps.
func TestErrorsAnswerTheirCodeAndStatus(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   contract.Code
		status contract.Status
	}{
		{fmt.Errorf("%w: body: x", errBadRequest), contract.CodeBadRequest, contract.StatusNotApplied},
		{session.ErrInvalid, contract.CodeBadRequest, contract.StatusNotApplied},
		{pipeline.ErrInvalidRequest, contract.CodeBadRequest, contract.StatusNotApplied},
		{transcript.ErrFormat, contract.CodeBadRequest, contract.StatusNotApplied},
		{errForbidden, contract.CodeForbidden, contract.StatusNotApplied},
		{&tenant.QuotaError{Quota: tenant.QuotaSessions}, contract.CodeTooMany, contract.StatusNotApplied},
		{&tenant.QuotaError{Quota: "writes_per_second", RetryAfter: time.Second}, contract.CodeTooMany, contract.StatusRetry},
		{fmt.Errorf("%w: tenant a", errBusy), contract.CodeTooMany, contract.StatusRetry},
		{session.ErrNotFound, contract.CodeNotFound, contract.StatusNotApplied},
		{session.ErrExists, contract.CodeConflict, contract.StatusNotApplied},
		{&session.HeadMovedError{Expected: 3, Head: 5}, contract.CodeConflict, contract.StatusNotApplied},
		{sessions.ErrChanged, contract.CodeConflict, contract.StatusRetry},
		{&tooLarge{bytes: 10, room: 5, parts: 2}, contract.CodeTooLarge, contract.StatusFailed},
		{session.ErrStorageFull, contract.CodeStorageFull, contract.StatusNotApplied},
		{session.ErrUnavailable, contract.CodeUnavailable, contract.StatusRetry},
		{session.ErrConflict, contract.CodeUnavailable, contract.StatusRetry},
		{context.DeadlineExceeded, contract.CodeUnavailable, contract.StatusRetry},
		{session.ErrCorrupt, contract.CodeInternal, contract.StatusNotApplied},
		{errors.New("something else"), contract.CodeInternal, contract.StatusFailed},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("session s: %w", tc.err)} {
			code, status := errorCode(err)
			if code != tc.code || status != tc.status {
				t.Errorf("%v: %v %s, want %v %s", err, code, status, tc.code, tc.status)
			}
			if !slices.Contains(contract.Codes, code) {
				t.Errorf("%v: code %v is not one of the contract's", err, code)
			}
			gotCode, body := errorAnswer(err)
			var eb contract.ErrorBody
			if json.Unmarshal(body, &eb) != nil || gotCode != code || eb.Code != code || eb.Status != status || eb.Error != err.Error() {
				t.Errorf("%v: answer %v %s", err, gotCode, body)
			}
		}
	}
}

// The answer says what the caller needs to act: the head an append met,
// how many parts a read has, which quota and when it has room.
func TestErrorBodiesSayWhatToDo(t *testing.T) {
	read := func(err error) contract.ErrorBody {
		_, body := errorAnswer(err)
		var eb contract.ErrorBody
		if err := json.Unmarshal(body, &eb); err != nil {
			t.Fatal(err)
		}
		return eb
	}
	if eb := read(fmt.Errorf("append: %w", &session.HeadMovedError{Expected: 3, Head: 5})); eb.HeadSeq == nil || *eb.HeadSeq != 5 {
		t.Errorf("head moved: %+v", eb)
	}
	if eb := read(&tooLarge{bytes: 10, room: 5, parts: 2}); eb.Parts != 2 {
		t.Errorf("too large: %+v", eb)
	}
	if eb := read(&tenant.QuotaError{Quota: "writes_per_second", RetryAfter: 1500 * time.Microsecond}); eb.Quota != "writes_per_second" || eb.RetryAfterMS != 1 {
		t.Errorf("quota: %+v", eb)
	}
	if eb := read(&tenant.QuotaError{Quota: tenant.QuotaSessions}); eb.RetryAfterMS != 0 {
		t.Errorf("a quota of what is stored has no retry time: %+v", eb)
	}
}
