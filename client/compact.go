package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
)

// CompactRequest is what a runtime knows of its model and context when it
// asks for a compaction; only the session (Compact's argument) is
// required.
type CompactRequest struct {
	// RequestID identifies the request (default: a new UUID). Sending the
	// same id again is answered once, with the same result.
	RequestID string
	// Trigger is OverBudget (default) or Overflow (CompactSync: Manual
	// too).
	Trigger Trigger
	// Model is the model the context goes to (default: the session's);
	// ContextLimit its window for this request (default: the session's).
	Model        string
	ContextLimit int
	// RequestedTokens and MessageCount are the runtime's own figures: the
	// service reports them and decides on its own count.
	RequestedTokens int
	MessageCount    int
	// Provider, ErrorCode and ErrorMessage tell an Overflow: the provider
	// and its error.
	Provider, ErrorCode, ErrorMessage string
	// SummaryModel and SummaryContextLimit override the summary model.
	SummaryModel        string
	SummaryContextLimit int
	// Focus is a topic for the summary to keep in detail.
	Focus string
	// Cache is the runtime's prompt cache as it last saw it: a cold one
	// lets the compaction clear more.
	Cache *CacheData
	// TraceParent and TraceState, when set, are the request's W3C trace
	// context; the result events carry them.
	TraceParent, TraceState string
}

// data is the request's event data for session sid.
func (req *CompactRequest) data(sid string) contract.RequestData {
	d := contract.RequestData{SessionID: sid, Model: req.Model, ContextLimit: req.ContextLimit, RequestedTokens: req.RequestedTokens,
		MessageCount: req.MessageCount, Provider: req.Provider, ErrorCode: req.ErrorCode, ErrorMessage: req.ErrorMessage,
		SummaryModel: req.SummaryModel, SummaryContextLimit: req.SummaryContextLimit, Focus: req.Focus}
	if req.Cache != nil {
		d.Cache = &contract.CacheData{LastRequestTime: req.Cache.LastRequestTime, TTLSeconds: req.Cache.TTLSeconds}
	}
	return d
}

func (req *CompactRequest) check(sid string, triggers ...Trigger) error {
	if req.RequestID == "" {
		req.RequestID = uuid.NewString()
	}
	if req.Trigger == "" {
		req.Trigger = OverBudget
	}
	if !slices.Contains(triggers, req.Trigger) {
		return fmt.Errorf("client: trigger %q is not one of %v", req.Trigger, triggers)
	}
	return checkSession(sid)
}

// FailedError is a compaction that failed: its CompactionFailed data.
// errors.Is matches it with its reason's sentinel (ErrSummaryFailed,
// ErrCircuitOpen, ...; ErrNotFound for a session that does not exist).
type FailedError struct {
	Failed
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("compaction of %s failed: %s: %s", e.SessionID, e.Reason, e.Failed.Error)
}

// Is matches the sentinel of the failure's reason.
func (e *FailedError) Is(target error) bool {
	if s, ok := target.(*reasonSentinel); ok {
		return s.reason == e.Reason
	}
	return target == ErrNotFound && e.Reason == ReasonSessionNotFound
}

type reasonSentinel struct{ reason Reason }

func (s *reasonSentinel) Error() string { return "compaction failed: " + string(s.reason) }

// Sentinels of the failure reasons, for errors.Is on a *FailedError.
var (
	ErrSummaryFailed        error = &reasonSentinel{ReasonSummaryFailed}
	ErrPersistFailed        error = &reasonSentinel{ReasonPersistFailed}
	ErrCircuitOpen          error = &reasonSentinel{ReasonCircuitOpen}
	ErrSessionNotFound      error = &reasonSentinel{ReasonSessionNotFound}
	ErrInvalidRequest       error = &reasonSentinel{ReasonInvalidRequest}
	ErrInsufficientProgress error = &reasonSentinel{ReasonInsufficientProgress}
	ErrInvariantViolated    error = &reasonSentinel{ReasonInvariantViolated}
	ErrConfiguration        error = &reasonSentinel{ReasonConfiguration}
	ErrCorruptSession       error = &reasonSentinel{ReasonCorruptSession}
	ErrQuotaExceeded        error = &reasonSentinel{ReasonQuotaExceeded}
)

// NearBudget tells the service that a session's context nears its budget
// (a ContextNearBudget event, stored in AGENT_CONTEXT): the service
// prepares the compaction the coming over-budget request will need, so
// that request is answered without waiting for a summary model. It is
// optional (the service also prepares when appends through it pass its
// prepare_at share of the limit) and answered by no event: it returns
// once the event is stored. req.Trigger is ignored.
func (c *Client) NearBudget(ctx context.Context, sessionID string, req CompactRequest) error {
	req.Trigger = NearBudget
	if err := req.check(sessionID, NearBudget); err != nil {
		return err
	}
	route, _ := contract.RequestRoute(contract.TriggerNearBudget)
	fctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	_, err := c.publish(fctx, route, sessionID, req)
	return err
}

// publish publishes req as a request event of route's type, in binary
// mode, with its trace context, and returns the stream's ack (Duplicate:
// the request was stored before).
func (c *Client) publish(ctx context.Context, route contract.Route, sid string, req CompactRequest) (*jetstream.PubAck, error) {
	ev, err := contract.NewEvent(req.RequestID, route.Type, c.source, sid, time.Now(), req.data(sid))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if req.TraceParent != "" {
		ev.Extensions = map[string]string{"traceparent": req.TraceParent}
		if req.TraceState != "" {
			ev.Extensions["tracestate"] = req.TraceState
		}
	}
	h, body := contract.EncodeBinary(ev)
	ack, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: route.Prefix + sid, Header: h, Data: body})
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		// No stream takes the request's subject: no service was ever
		// provisioned on this server.
		return nil, fmt.Errorf("client: publish request to %s: %w (%v)", route.Prefix+sid, ErrNoService, err)
	}
	if err != nil {
		return nil, fmt.Errorf("client: publish request to %s: %w", route.Prefix+sid, err)
	}
	return ack, nil
}

// storedResult reads the result stored for a request sent before (a
// request has one: the first published, whichever kind) through the
// compactor.result.get endpoint: its CompactionCompleted data, or a
// *FailedError; done false when none is stored yet.
func (c *Client) storedResult(ctx context.Context, sid, requestID string) (res *Completed, done bool, err error) {
	var stored contract.StoredResult
	err = c.call(ctx, contract.SubjectResult, contract.ResultRequest{SessionID: sid, RequestID: requestID}, &stored)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("client: read the stored result: %w", err)
	case stored.Type == contract.TypeCompactionFailed:
		var f Failed
		if err := json.Unmarshal(stored.Data, &f); err != nil {
			return nil, false, fmt.Errorf("client: read the stored result: %w", err)
		}
		return nil, true, &FailedError{Failed: f}
	}
	var r Completed
	if err := json.Unmarshal(stored.Data, &r); err != nil {
		return nil, false, fmt.Errorf("client: read the stored result: %w", err)
	}
	return &r, true, nil
}

// ErrNoResult: no result arrived before the context ended. The request is
// stored and will still be answered on the result subjects.
var ErrNoResult = errors.New("no result event yet")

// Compact publishes a request event (ContextOverBudget or
// context_overflow, a CloudEvent in binary mode) to the AGENT_CONTEXT
// stream for the session and waits for its one result event, matched by
// the result id the request's id determines: the CompactionCompleted
// data, or a *FailedError with the CompactionFailed data. It subscribes
// before publishing, so the result cannot be missed; ctx bounds the wait
// (ErrNoResult after it: the request is stored and will still be
// answered). The service may answer after a restart or a failover: a
// repeated Compact with the same RequestID waits for the same result.
func (c *Client) Compact(ctx context.Context, sessionID string, req CompactRequest) (*Completed, error) {
	if err := req.check(sessionID, OverBudget, Overflow); err != nil {
		return nil, err
	}
	route, _ := contract.RequestRoute(contract.Trigger(req.Trigger))
	completed, failed := contract.RequestResultID(req.RequestID), contract.FailedResultID(req.RequestID)
	ch := make(chan *nats.Msg, 16)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, typ := range []string{contract.TypeCompactionCompleted, contract.TypeCompactionFailed} {
		sub, err := c.nc.ChanSubscribe(contract.Subject(typ, sessionID), ch)
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
	ack, err := c.publish(fctx, route, sessionID, req)
	if err != nil {
		return nil, err
	}
	// Sent before, its result may be stored already; and a result a
	// subscriber saw may reach the stream a moment after: a duplicate
	// looks again every second while it waits.
	var again <-chan time.Time
	if ack.Duplicate {
		res, done, err := c.storedResult(fctx, sessionID, req.RequestID)
		if done || err != nil {
			return res, err
		}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		again = t.C
	}
	for {
		select {
		case m := <-ch:
			id, done, err := decodeResult(m)
			if id != completed && id != failed {
				continue // another request's result, or not one
			}
			return done, err
		case <-again:
			if res, done, err := c.storedResult(ctx, sessionID, req.RequestID); done {
				return res, err
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("client: request %s on %s: %w (%v)", req.RequestID, route.Prefix+sessionID, ErrNoResult, ctx.Err())
		}
	}
}

// decodeResult reads a result event by the CloudEvents NATS binding: its
// id, and its data as Compact returns it.
func decodeResult(m *nats.Msg) (string, *Completed, error) {
	ev, err := contract.DecodeEvent(m.Header, m.Data)
	if err != nil {
		return "", nil, err
	}
	switch ev.Type {
	case contract.TypeCompactionCompleted:
		var done Completed
		if err := json.Unmarshal(ev.Data, &done); err != nil {
			return "", nil, err
		}
		return ev.ID, &done, nil
	case contract.TypeCompactionFailed:
		var f Failed
		if err := json.Unmarshal(ev.Data, &f); err != nil {
			return "", nil, err
		}
		return ev.ID, nil, &FailedError{Failed: f}
	}
	return "", nil, fmt.Errorf("type %q is not a result", ev.Type)
}

// CompactSync asks for a compaction of the session through the
// compactor.compact endpoint and returns its result: the same result, and
// the same result event published, as Compact (Manual is a trigger here
// too). A failed compaction is a *FailedError; any other error means no
// result (the service is unreachable or shutting down: repeat with the
// same RequestID).
func (c *Client) CompactSync(ctx context.Context, sessionID string, req CompactRequest) (*Completed, error) {
	if err := req.check(sessionID, OverBudget, Overflow, Manual); err != nil {
		return nil, err
	}
	body, err := json.Marshal(contract.CompactBody{RequestData: req.data(sessionID), RequestID: req.RequestID, Trigger: contract.Trigger(req.Trigger)})
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(contract.SubjectCompact)
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
		return nil, fmt.Errorf("client: %s: %w", contract.SubjectCompact, ErrNoService)
	}
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", contract.SubjectCompact, err)
	}
	code := m.Header.Get(contract.HeaderErrorCode)
	if code == "" {
		var done Completed
		if err := json.Unmarshal(m.Data, &done); err != nil {
			return nil, fmt.Errorf("client: %s answered %.200q: %w", contract.SubjectCompact, m.Data, err)
		}
		return &done, nil
	}
	n, _ := strconv.Atoi(code)
	var f Failed
	if json.Unmarshal(m.Data, &f) != nil || f.Reason == "" {
		return nil, &Error{Subject: contract.SubjectCompact, Code: n, Message: m.Header.Get(contract.HeaderError)}
	}
	if n == 503 && f.Reason != ReasonSummaryFailed && f.Reason != ReasonCircuitOpen {
		// Not answered yet (a storage failure, a shutdown): no result.
		return nil, &Error{Subject: contract.SubjectCompact, Code: n, Status: string(contract.StatusRetry), Message: m.Header.Get(contract.HeaderError)}
	}
	return nil, &FailedError{Failed: f}
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

// Subscription is a running SubscribeCircuit; it stops as a nats.go
// JetStream consumption does: Stop at once, Drain once the events
// received are handled, Closed when either is done.
type Subscription struct {
	subs    []*nats.Subscription
	ch      chan *nats.Msg
	done    chan struct{} // closed to end the handler's loop
	stopped chan struct{} // closed once the handler's loop has returned
	once    sync.Once
}

// Stop stops at once: events not handled yet are dropped.
func (s *Subscription) Stop() {
	s.once.Do(func() {
		s.unsubscribe()
		close(s.done)
	})
}

// Drain stops taking events; those received already are still handled,
// then Closed closes.
func (s *Subscription) Drain() {
	s.once.Do(func() {
		for _, sub := range s.subs {
			_ = sub.Drain()
		}
		go func() {
			// The server has stopped sending once the subscriptions are
			// gone; then the handler takes what arrived.
			for _, sub := range s.subs {
				for sub.IsValid() {
					time.Sleep(5 * time.Millisecond)
				}
			}
			for len(s.ch) > 0 {
				time.Sleep(5 * time.Millisecond)
			}
			close(s.done)
		}()
	})
}

// Closed is closed once the subscription has stopped and its handler has
// returned.
func (s *Subscription) Closed() <-chan struct{} { return s.stopped }

func (s *Subscription) unsubscribe() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
}

// SubscribeCircuit calls f with each circuit event of a session (every
// session's for ""), as they happen, until the subscription is
// stopped or drained. f runs on one goroutine, in order.
func (c *Client) SubscribeCircuit(sessionID string, f func(CircuitEvent)) (*Subscription, error) {
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
		ev, err := contract.DecodeEvent(m.Header, m.Data)
		if err != nil {
			return
		}
		ce := CircuitEvent{Type: ev.Type, SessionID: ev.Subject}
		switch ev.Type {
		case contract.TypeCompactionCircuitOpened:
			ce.Opened = new(CircuitOpened)
			err = json.Unmarshal(ev.Data, ce.Opened)
		case contract.TypeCompactionCircuitClosed:
			ce.Closed = new(CircuitClosed)
			err = json.Unmarshal(ev.Data, ce.Closed)
		default:
			return
		}
		if err == nil {
			f(ce)
		}
	}
	// One channel, one goroutine: opened and closed stay in order.
	sub := &Subscription{ch: make(chan *nats.Msg, 64), done: make(chan struct{}), stopped: make(chan struct{})}
	for _, typ := range []string{contract.TypeCompactionCircuitOpened, contract.TypeCompactionCircuitClosed} {
		s, err := c.nc.ChanSubscribe(contract.Subject(typ, tok), sub.ch)
		if err != nil {
			sub.unsubscribe()
			return nil, fmt.Errorf("client: subscribe: %w", err)
		}
		sub.subs = append(sub.subs, s)
	}
	if err := c.nc.Flush(); err != nil {
		sub.unsubscribe()
		return nil, fmt.Errorf("client: subscribe: %w", err)
	}
	go func() {
		defer close(sub.stopped)
		for {
			select {
			case m := <-sub.ch:
				handle(m)
			case <-sub.done:
				return
			}
		}
	}()
	return sub, nil
}
