// Package client is the runtime's side of the contract over NATS: publish a
// request event and wait for the one result event that answers it.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/events"
)

// DefaultSource is the CloudEvents source of requests sent by the CLI.
const DefaultSource = "urn:compactor:cli"

// Result is a result event: CompactionCompleted or CompactionFailed.
type Result struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data"`
}

// Failed reports whether the result is a CompactionFailed.
func (r Result) Failed() bool { return r.Type == events.TypeCompactionFailed }

// Request is one compaction request to publish.
type Request struct {
	// ID is the event id (default: a new UUID). Publishing the same id
	// again within the dedup window is stored once.
	ID string
	// Type is events.TypeContextOverBudget (default) or TypeContextOverflow.
	Type   string
	Source string
	Data   events.RequestData
}

// ErrNoResult is returned when no result arrived before the context ended:
// the request is stored and will still be answered on the result subjects.
var ErrNoResult = errors.New("no result event yet")

// Compact publishes req to AGENT_CONTEXT and waits for its result event,
// matched by the result id derived from the request id. It subscribes
// before publishing, so a result cannot be missed. ctx bounds the wait.
func Compact(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, req Request) (Result, error) {
	if req.ID == "" {
		req.ID = uuid.NewString()
	}
	if req.Type == "" {
		req.Type = events.TypeContextOverBudget
	}
	if req.Source == "" {
		req.Source = DefaultSource
	}
	sid := req.Data.SessionID
	if !events.ValidSessionID(sid) {
		return Result{}, fmt.Errorf("session id %q must be 1-200 letters, digits, '-' or '_'", sid)
	}
	subject := events.Subject(req.Type, sid)
	if subject == "" || (req.Type != events.TypeContextOverBudget && req.Type != events.TypeContextOverflow) {
		return Result{}, fmt.Errorf("request type %q is not %s or %s", req.Type, events.TypeContextOverBudget, events.TypeContextOverflow)
	}
	want := events.RequestResultID(req.ID)
	ch := make(chan *nats.Msg, 16)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, typ := range []string{events.TypeCompactionCompleted, events.TypeCompactionFailed} {
		sub, err := nc.ChanSubscribe(events.Subject(typ, sid), ch)
		if err != nil {
			return Result{}, fmt.Errorf("subscribe to results: %w", err)
		}
		subs = append(subs, sub)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		return Result{}, fmt.Errorf("subscribe to results: %w", err)
	}
	ev, err := events.NewEvent(req.ID, req.Type, req.Source, sid, time.Now(), req.Data)
	if err != nil {
		return Result{}, err
	}
	h, body := events.EncodeBinary(ev)
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h, Data: body}); err != nil {
		return Result{}, fmt.Errorf("publish request to %s: %w", subject, err)
	}
	for {
		select {
		case m := <-ch:
			if m.Header.Get("ce-id") != want {
				continue // another request's result
			}
			return Result{ID: want, Type: m.Header.Get("ce-type"), Subject: m.Subject, Data: m.Data}, nil
		case <-ctx.Done():
			return Result{}, fmt.Errorf("request %s on %s: %w (%v)", req.ID, subject, ErrNoResult, ctx.Err())
		}
	}
}
