package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/schemas"
)

// MaxRequestBytes bounds a request event's body: a request's data is a few
// hundred bytes, so anything near this is not a request.
const MaxRequestBytes = 64 << 10

// ErrInvalid is wrapped by every decoding error: the request can never be
// processed (it belongs in the dead-letter queue with the error's text as
// the reason).
var ErrInvalid = errors.New("invalid request event")

// Request is the pipeline request d asks for, as request id, with its
// trigger and time (zero: when it is handled).
func Request(d contract.RequestData, id string, trigger pipeline.Trigger, at time.Time) pipeline.Request {
	r := pipeline.Request{ID: id, SessionID: d.SessionID, Trigger: trigger, Model: d.Model, ContextLimit: d.ContextLimit,
		RequestedTokens: d.RequestedTokens, MessageCount: d.MessageCount, SummaryModel: d.SummaryModel,
		SummaryContextLimit: d.SummaryContextLimit, Focus: d.Focus, At: at}
	if d.Cache != nil {
		r.Cache = &pipeline.CacheState{LastRequest: d.Cache.LastRequestTime, TTL: time.Duration(d.Cache.TTLSeconds) * time.Second}
	}
	return r
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// DecodeRequest reads the request event a message on subject carries, in
// either content mode (DecodeEvent), validates its attributes, type and
// data (against schemas/context_request.json), checks them against the
// subject (its route's type, its session id), and returns the pipeline
// request. Every error wraps ErrInvalid; with an error, the request holds
// what could be read of its id, session (the subject's) and trigger, so
// that a request the service can attribute is still answered.
func DecodeRequest(subject string, h map[string][]string, body []byte) (pipeline.Request, cloudevents.Event, error) {
	var req pipeline.Request
	route, sid, ok := contract.RequestSubject(subject)
	if ok {
		req.Trigger = route.Trigger
		if contract.ValidSessionID(sid) {
			req.SessionID = sid
		}
	}
	if v, found := contract.Header(h, contract.HeaderPrefix+"id"); found {
		if id, err := contract.DecodeHeaderValue(v); err == nil {
			req.ID = id
		}
	}
	if len(body) > MaxRequestBytes {
		return req, cloudevents.Event{}, invalid("body of %d bytes, over %d", len(body), MaxRequestBytes)
	}
	if !utf8.Valid(body) {
		return req, cloudevents.Event{}, invalid("body is not valid UTF-8")
	}
	ev, err := DecodeEvent(h, body)
	if ev.ID() != "" {
		req.ID = ev.ID()
	}
	if err != nil {
		return req, ev, invalid("%v", err)
	}
	if !ok {
		return req, ev, invalid("subject %q is not %s<session_id>, %s<session_id> or %s<session_id>", subject, contract.OverBudgetPrefix, contract.OverflowPrefix, contract.NearBudgetPrefix)
	}
	if ev.Type() != route.Type {
		return req, ev, invalid("type %q is not %s, the type of subject %q", ev.Type(), route.Type, subject)
	}
	if dct := ev.DataContentType(); dct != "" && !strings.HasPrefix(strings.ToLower(dct), "application/json") {
		return req, ev, invalid("datacontenttype %q is not application/json", dct)
	}
	data := ev.Data()
	if err := schemas.CheckKeys(data); err != nil {
		return req, ev, invalid("data: %v", err)
	}
	if err := schemas.Validate(schemas.ContextRequest, data); err != nil {
		return req, ev, invalid("data: %v", err)
	}
	var d contract.RequestData
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&d); err != nil {
		return req, ev, invalid("data: %v", schemas.DescribeJSON(err))
	}
	if d.SessionID != sid {
		return req, ev, invalid("subject's session %q differs from data.session_id %q", sid, d.SessionID)
	}
	if s := ev.Subject(); s != "" && s != d.SessionID {
		return req, ev, invalid("subject %q differs from data.session_id %q", s, d.SessionID)
	}
	return Request(d, ev.ID(), route.Trigger, ev.Time()), ev, nil
}

// NewEvent builds a result event with the given deterministic id.
func NewEvent(id, typ, source, sessionID string, now time.Time, data any) (cloudevents.Event, error) {
	ev := cloudevents.New(cloudevents.CloudEventsVersionV1)
	ev.SetID(id)
	ev.SetType(typ)
	ev.SetSource(source)
	ev.SetSubject(sessionID)
	ev.SetTime(now.UTC())
	if err := ev.SetData("application/json", data); err != nil {
		return ev, err
	}
	return ev, ev.Validate()
}
