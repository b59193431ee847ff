package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/micro"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tenant"
)

// compactor.compact and compactor.result.get: a compaction answered
// synchronously, and the result stored for a request.

// CompactRequest is the body of compactor.compact.
type CompactRequest = contract.CompactBody

// compact runs in its own goroutine (bounded by Workers) so that a long
// compaction does not hold up the endpoint's other requests. What it
// publishes follows events.Dispose, as the durable consumer does: a
// failure a retry may fix (the store unavailable, this instance shutting
// down) publishes nothing and answers 503, so the caller's retry with the
// same request_id gets the request's one result event.
func (s *Server) compact(r micro.Request) {
	var req CompactRequest
	if err := decode(r, &req); err != nil {
		s.fail(r, err)
		return
	}
	if req.Trigger == "" {
		req.Trigger = pipeline.TriggerOverBudget
	}
	repeatable := req.RequestID != "" // a caller's id may have been answered before
	if !repeatable {
		req.RequestID = uuid.NewString()
	}
	if err := checkSessionID(req.SessionID); err != nil {
		s.fail(r, err)
		return
	}
	done := func() {}
	if s.d.Quotas != nil {
		ctx, cancel := context.WithTimeout(tenant.With(s.work, tenantOf(r)), 10*time.Second)
		var err error
		done, err = s.d.Quotas.Compact(ctx, tenantOf(r))
		cancel()
		if err != nil {
			s.fail(r, err)
			return
		}
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		done()
		if err := r.Error("503", "shutting down: retry, another instance will answer", nil); err != nil {
			s.log.Warn("respond", slog.String("subject", r.Subject()), slog.String("error", err.Error()))
		}
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	s.sem <- struct{}{}
	// The compaction runs under the request's SERVER span, a child of the
	// caller's trace (traceparent and tracestate headers, as on any NATS
	// request), and its result events carry that trace onward.
	sctx, span := keepSpan(r)
	s.run.run(func() {
		defer func() { <-s.sem; done(); s.wg.Done() }()
		ctx, cancel := context.WithTimeout(oteltrace.ContextWithSpan(tenant.With(s.work, tenantOf(r)), oteltrace.SpanFromContext(sctx)), s.d.Timeout)
		defer cancel()
		if repeatable && s.answeredBefore(ctx, r, req) {
			return
		}
		res, cerr := s.d.Pipeline.Compact(ctx, events.Request(req.RequestData, req.RequestID, req.Trigger, time.Time{}))
		telemetry.Fail(span, cerr)
		s.answerCompaction(ctx, r, res, cerr)
	})
}

// answerCompaction publishes a synchronous compaction's result event (as
// the durable consumer does, events.Dispose) and answers the request: the
// CompactionCompleted data, or an error whose body is the CompactionFailed
// data (503 when a retry may fix it: nothing was published).
func (s *Server) answerCompaction(ctx context.Context, r micro.Request, res *pipeline.Result, cerr error) {
	interrupted := cerr != nil && s.work.Err() != nil
	disp := events.Dispose(res, interrupted, false)
	if s.d.Observe != nil && !interrupted {
		s.d.Observe(res)
	}
	if !interrupted {
		pipeline.LogResult(ctx, s.log, res)
	}
	if disp != events.Retry {
		// A repeated request may have been answered before.
		if err := s.d.Publisher.Once(ctx, res, res.Strategy == pipeline.StrategyRedelivered); err != nil {
			s.log.Warn("result event not published", slog.String("session_id", res.SessionID), slog.String("request_id", res.RequestID), slog.String("error", err.Error()))
			disp = events.Retry // the caller's retry publishes it
		}
	}
	// The answer goes straight to the reply subject: the micro request
	// belongs to its handler, which has returned (its stats would race).
	if cerr == nil && disp == events.Answer {
		body, _ := json.Marshal(res)
		s.replyTo(r, "", "", body)
		return
	}
	body, _ := json.Marshal(events.FailedData(res))
	code := failedCode(res.Reason, res.Retryable)
	if disp == events.Retry {
		code = "503"
	}
	desc := string(res.Reason) + ": " + res.Error
	if cerr == nil { // answered, but the event could not be published
		desc = "the result could not be published: retry with the same request_id"
	}
	s.replyTo(r, code, events.HeaderValue(desc), body)
}

// failedCode is the status a failed compaction is answered with.
func failedCode(reason pipeline.Reason, retryable bool) string {
	switch {
	case reason == pipeline.ReasonInvalidRequest, reason == pipeline.ReasonConfiguration:
		return "400"
	case reason == pipeline.ReasonSessionNotFound:
		return "404"
	case reason == pipeline.ReasonQuotaExceeded:
		return "429"
	case retryable || reason == pipeline.ReasonCircuitOpen:
		return "503"
	}
	return "500"
}

// answeredBefore answers a compaction request whose id was answered
// already with that stored result, whichever kind it is (a request has one
// result; to try again after a failure, send a new request_id), and
// reports whether it did. A result stream that cannot be read is a 503:
// working on the request then might give it a second, different result.
func (s *Server) answeredBefore(ctx context.Context, r micro.Request, req CompactRequest) bool {
	stored, err := s.d.Publisher.Answered(ctx, req.SessionID, req.RequestID, time.Now().Add(-consumer.DedupWindow))
	switch {
	case err != nil:
		body, _ := json.Marshal(events.Failed{SessionID: req.SessionID, RequestID: req.RequestID, Trigger: string(req.Trigger),
			Reason: string(pipeline.ReasonPersistFailed), Error: "cannot read whether the request was answered: " + err.Error(), Retryable: true})
		s.replyTo(r, "503", events.HeaderValue("cannot read whether the request was answered: retry with the same request_id"), body)
		return true
	case stored == nil:
		return false
	case !stored.Failed:
		s.replyTo(r, "", "", stored.Data)
		return true
	}
	var f events.Failed
	if err := json.Unmarshal(stored.Data, &f); err != nil {
		f = events.Failed{Reason: "unknown", Error: err.Error()}
	}
	s.replyTo(r, failedCode(pipeline.Reason(f.Reason), f.Retryable), events.HeaderValue(f.Reason+": answered before: "+f.Error), stored.Data)
	return true
}

// errNoResult: no result of the request is stored (yet).
var errNoResult = fmt.Errorf("no result stored: %w", session.ErrNotFound)

// resultGet answers the result event stored for a request sent within the
// requests' deduplication window (what a runtime whose request was a
// duplicate reads, instead of a consumer on the result stream, which the
// runtime role may not make).
func (s *Server) resultGet(r micro.Request) {
	var req contract.ResultRequest
	if !s.decodeSession(r, &req, &req.SessionID) {
		return
	}
	if req.RequestID == "" || len(req.RequestID) > contract.MaxRequestIDBytes {
		s.fail(r, fmt.Errorf("%w: request_id must be 1-%d characters", errBadRequest, contract.MaxRequestIDBytes))
		return
	}
	s.answer(r, func(ctx context.Context) (any, error) {
		stored, err := s.d.Publisher.Answered(ctx, req.SessionID, req.RequestID, time.Now().Add(-consumer.DedupWindow))
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: %v", session.ErrUnavailable, err)
		case stored == nil:
			return nil, fmt.Errorf("request %s of session %s: %w", req.RequestID, req.SessionID, errNoResult)
		case stored.Failed:
			return contract.StoredResult{Type: contract.TypeCompactionFailed, ID: contract.FailedResultID(req.RequestID), Data: stored.Data}, nil
		}
		return contract.StoredResult{Type: contract.TypeCompactionCompleted, ID: contract.RequestResultID(req.RequestID), Data: stored.Data}, nil
	})
}
