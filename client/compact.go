package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/api"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/pipeline"
)

// Triggers of a compaction request.
const (
	// OverBudget: the runtime's context is over its budget, checked before
	// a model call (a ContextOverBudget event).
	OverBudget = pipeline.TriggerOverBudget
	// Overflow: the provider refused the call for its length (a
	// context_overflow event).
	Overflow = pipeline.TriggerOverflow
	// NearBudget: the runtime's context nears its budget (a
	// ContextNearBudget event, sent with Client.NearBudget): the service
	// prepares the coming compaction; no result answers it.
	NearBudget = pipeline.TriggerNearBudget
)

// CompactRequest asks for a compaction of a session.
type CompactRequest struct {
	// RequestID identifies the request (default: a new UUID). Sending the
	// same id again is answered once, with the same result.
	RequestID string
	// Trigger is OverBudget (default) or Overflow.
	Trigger pipeline.Trigger
	// Data is the request's data; Data.SessionID is required.
	Data RequestData
	// TraceParent and TraceState, when set, are the request's W3C trace
	// context; the result events carry them.
	TraceParent, TraceState string
}

// Result is a request's one result event.
type Result struct {
	// ID is the result event's id (the same for every delivery of it).
	ID string
	// Type is CompactionCompleted or CompactionFailed.
	Type string
	// Completed is the data of a CompactionCompleted; nil when failed.
	Completed *Completed
	// Failed is the data of a CompactionFailed; nil when completed.
	Failed *Failed
	// Data is the event's data as sent.
	Data json.RawMessage
}

// OK reports whether the request completed (compacted, or nothing to do).
func (r *Result) OK() bool { return r.Completed != nil }

func (req *CompactRequest) check() error {
	if req.RequestID == "" {
		req.RequestID = uuid.NewString()
	}
	if req.Trigger == "" {
		req.Trigger = OverBudget
	}
	if _, ok := events.RequestRoute(req.Trigger); !ok || !req.Trigger.Valid() {
		return fmt.Errorf("client: trigger %q is not %s or %s", req.Trigger, OverBudget, Overflow)
	}
	return checkSession(req.Data.SessionID)
}

// NearBudget tells the service that a session's context nears its budget
// (a ContextNearBudget event, stored in AGENT_CONTEXT): the service
// prepares the compaction the coming over-budget request will need, so
// that request is answered without waiting for a summary model. It is
// optional (the service also prepares when appends through it pass its
// prepare_at share of the limit) and answered by no event: it returns
// once the event is stored. req.Trigger is ignored.
func (c *Client) NearBudget(ctx context.Context, req CompactRequest) error {
	if req.RequestID == "" {
		req.RequestID = uuid.NewString()
	}
	if err := checkSession(req.Data.SessionID); err != nil {
		return err
	}
	route, _ := events.RequestRoute(NearBudget)
	fctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.publishRequest(fctx, route, req)
}

// publishRequest publishes req as a request event of route's type, in
// binary mode, with its trace context.
func (c *Client) publishRequest(ctx context.Context, route events.Route, req CompactRequest) error {
	sid := req.Data.SessionID
	ev, err := events.NewEvent(req.RequestID, route.Type, c.source, sid, time.Now(), req.Data)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if req.TraceParent != "" {
		if err := ev.Context.SetExtension("traceparent", req.TraceParent); err != nil {
			return fmt.Errorf("client: traceparent: %w", err)
		}
		if req.TraceState != "" {
			if err := ev.Context.SetExtension("tracestate", req.TraceState); err != nil {
				return fmt.Errorf("client: tracestate: %w", err)
			}
		}
	}
	h, body := events.EncodeBinary(ev)
	if _, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: route.Prefix + sid, Header: h, Data: body}); err != nil {
		return fmt.Errorf("client: publish request to %s: %w", route.Prefix+sid, err)
	}
	return nil
}

// ErrNoResult: no result arrived before the context ended. The request is
// stored and will still be answered on the result subjects.
var ErrNoResult = errors.New("no result event yet")

// Compact publishes a request event (ContextOverBudget or
// context_overflow, a CloudEvent in binary mode) to the AGENT_CONTEXT
// stream and waits for its one result event, matched by the result id
// the request's id determines. It subscribes before publishing, so the
// result cannot be missed; ctx bounds the wait. The service may answer
// after a restart or a failover: a repeated Compact with the same
// RequestID waits for the same result.
func (c *Client) Compact(ctx context.Context, req CompactRequest) (*Result, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	route, _ := events.RequestRoute(req.Trigger)
	sid := req.Data.SessionID
	completed, failed := events.RequestResultID(req.RequestID), events.FailedResultID(req.RequestID)
	ch := make(chan *nats.Msg, 16)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, typ := range []string{events.TypeCompactionCompleted, events.TypeCompactionFailed} {
		sub, err := c.nc.ChanSubscribe(events.Subject(typ, sid), ch)
		if err != nil {
			return nil, fmt.Errorf("client: subscribe to results: %w", err)
		}
		subs = append(subs, sub)
	}
	fctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.nc.FlushWithContext(fctx); err != nil {
		return nil, fmt.Errorf("client: subscribe to results: %w", err)
	}
	if err := c.publishRequest(fctx, route, req); err != nil {
		return nil, err
	}
	for {
		select {
		case m := <-ch:
			res, err := decodeResult(m)
			if err != nil || res.ID != completed && res.ID != failed {
				continue // another request's result, or not one
			}
			return res, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("client: request %s on %s: %w (%v)", req.RequestID, route.Prefix+sid, ErrNoResult, ctx.Err())
		}
	}
}

// decodeResult reads a result event by the CloudEvents NATS binding.
func decodeResult(m *nats.Msg) (*Result, error) {
	ev, err := events.DecodeEvent(m.Header, m.Data)
	if err != nil {
		return nil, err
	}
	res := &Result{ID: ev.ID(), Type: ev.Type(), Data: ev.Data()}
	switch ev.Type() {
	case events.TypeCompactionCompleted:
		res.Completed = new(Completed)
		err = json.Unmarshal(res.Data, res.Completed)
	case events.TypeCompactionFailed:
		res.Failed = new(Failed)
		err = json.Unmarshal(res.Data, res.Failed)
	default:
		err = fmt.Errorf("type %q is not a result", ev.Type())
	}
	return res, err
}

// CompactSync asks for a compaction through the compactor.compact
// endpoint and returns its result: the same result, and the same result
// event published, as Compact. A failed compaction is a Result with
// Failed set, not an error; an error means no result (the service is
// unreachable or shutting down: repeat with the same RequestID).
func (c *Client) CompactSync(ctx context.Context, req CompactRequest) (*Result, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(api.CompactRequest{RequestData: req.Data, RequestID: req.RequestID, Trigger: req.Trigger})
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(api.SubjectCompact)
	msg.Data = body
	if req.TraceParent != "" {
		msg.Header.Set("traceparent", req.TraceParent)
		if req.TraceState != "" {
			msg.Header.Set("tracestate", req.TraceState)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	m, err := c.nc.RequestMsgWithContext(ctx, msg)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("client: %s: %w", api.SubjectCompact, ErrNoService)
	}
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", api.SubjectCompact, err)
	}
	res := &Result{ID: events.RequestResultID(req.RequestID), Data: m.Data}
	code := m.Header.Get("Nats-Service-Error-Code")
	if code == "" {
		res.Type, res.Completed = events.TypeCompactionCompleted, new(Completed)
		if err := json.Unmarshal(m.Data, res.Completed); err != nil {
			return nil, fmt.Errorf("client: %s answered %.200q: %w", api.SubjectCompact, m.Data, err)
		}
		return res, nil
	}
	n, _ := strconv.Atoi(code)
	var f Failed
	if json.Unmarshal(m.Data, &f) != nil || f.Reason == "" {
		return nil, &Error{Subject: api.SubjectCompact, Code: n, Message: m.Header.Get("Nats-Service-Error")}
	}
	if n == 503 && f.Reason != string(pipeline.ReasonSummaryFailed) && f.Reason != string(pipeline.ReasonCircuitOpen) {
		// Not answered yet (a storage failure, a shutdown): no result.
		return nil, &Error{Subject: api.SubjectCompact, Code: n, Status: api.StatusRetry, Message: m.Header.Get("Nats-Service-Error")}
	}
	res.ID, res.Type, res.Failed = events.FailedResultID(req.RequestID), events.TypeCompactionFailed, &f
	return res, nil
}

// CircuitEvent is a CompactionCircuitOpened or CompactionCircuitClosed.
type CircuitEvent struct {
	Type      string
	SessionID string
	// Opened is set for CompactionCircuitOpened, Closed for
	// CompactionCircuitClosed.
	Opened *CircuitOpened
	Closed *CircuitClosed
}

// SubscribeCircuit calls f with each circuit event of a session (every
// session's for ""), as they happen, until the returned stop is called.
// f runs on one goroutine, in order.
func (c *Client) SubscribeCircuit(sessionID string, f func(CircuitEvent)) (stop func() error, err error) {
	tok := "*"
	if sessionID != "" {
		if err := checkSession(sessionID); err != nil {
			return nil, err
		}
		tok = sessionID
	}
	if f == nil {
		return nil, errors.New("client: SubscribeCircuit needs a function")
	}
	handle := func(m *nats.Msg) {
		ev, err := events.DecodeEvent(m.Header, m.Data)
		if err != nil {
			return
		}
		ce := CircuitEvent{Type: ev.Type(), SessionID: ev.Subject()}
		switch ev.Type() {
		case events.TypeCompactionCircuitOpened:
			ce.Opened = new(CircuitOpened)
			err = json.Unmarshal(ev.Data(), ce.Opened)
		case events.TypeCompactionCircuitClosed:
			ce.Closed = new(CircuitClosed)
			err = json.Unmarshal(ev.Data(), ce.Closed)
		default:
			return
		}
		if err == nil {
			f(ce)
		}
	}
	// One channel, one goroutine: opened and closed stay in order.
	ch := make(chan *nats.Msg, 64)
	var subs []*nats.Subscription
	stopAll := func() error {
		var first error
		for _, s := range subs {
			if err := s.Unsubscribe(); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	for _, typ := range []string{events.TypeCompactionCircuitOpened, events.TypeCompactionCircuitClosed} {
		s, err := c.nc.ChanSubscribe(events.Subject(typ, tok), ch)
		if err != nil {
			_ = stopAll()
			return nil, fmt.Errorf("client: subscribe: %w", err)
		}
		subs = append(subs, s)
	}
	if err := c.nc.Flush(); err != nil {
		_ = stopAll()
		return nil, fmt.Errorf("client: subscribe: %w", err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case m := <-ch:
				handle(m)
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	var serr error
	return func() error {
		once.Do(func() {
			close(done)
			serr = stopAll()
		})
		return serr
	}, nil
}
