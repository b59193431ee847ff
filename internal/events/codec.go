package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"

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

// RequestData is the data of ContextOverBudget and context_overflow.
type RequestData struct {
	SessionID           string `json:"session_id"`
	Model               string `json:"model,omitempty"`
	ContextLimit        int    `json:"context_limit,omitempty"`
	RequestedTokens     int    `json:"requested_tokens,omitempty"`
	MessageCount        int    `json:"message_count,omitempty"`
	Provider            string `json:"provider,omitempty"`
	ErrorCode           string `json:"error_code,omitempty"`
	ErrorMessage        string `json:"error_message,omitempty"`
	SummaryModel        string `json:"summary_model,omitempty"`
	SummaryContextLimit int    `json:"summary_context_limit,omitempty"`
	Focus               string `json:"focus,omitempty"`
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// header returns a header's first value, matching the name case-
// insensitively (the SDK's NATS binding does not).
func header(h map[string][]string, name string) (string, bool) {
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0], true
		}
	}
	return "", false
}

// DecodeRequest reads a request event in binary mode (attributes as ce-
// headers, values percent-decoded) or structured mode (Content-Type
// application/cloudevents+json), validates its attributes, type and data
// (against schemas/context_request.json), and returns the pipeline request.
// Every error wraps ErrInvalid.
func DecodeRequest(h map[string][]string, body []byte) (pipeline.Request, cloudevents.Event, error) {
	var ev cloudevents.Event
	if len(body) > MaxRequestBytes {
		return pipeline.Request{}, ev, invalid("body of %d bytes, over %d", len(body), MaxRequestBytes)
	}
	if !utf8.Valid(body) {
		return pipeline.Request{}, ev, invalid("body is not valid UTF-8")
	}
	ct, _ := header(h, "Content-Type")
	if strings.HasPrefix(strings.ToLower(ct), "application/cloudevents") {
		if err := json.Unmarshal(body, &ev); err != nil {
			return pipeline.Request{}, ev, invalid("structured event: %v", err)
		}
	} else {
		spec, ok := header(h, "ce-specversion")
		if !ok {
			return pipeline.Request{}, ev, invalid("not a CloudEvent: no ce-specversion header and no application/cloudevents content type")
		}
		if spec != cloudevents.CloudEventsVersionV1 {
			return pipeline.Request{}, ev, invalid("specversion %q is not %s", spec, cloudevents.CloudEventsVersionV1)
		}
		ev = cloudevents.New(spec)
		for k, v := range h {
			name, ok := cutPrefixFold(k, "ce-")
			if !ok || len(v) == 0 {
				continue
			}
			val, err := url.PathUnescape(v[0])
			if err != nil || !utf8.ValidString(val) {
				return pipeline.Request{}, ev, invalid("header %s is not a valid percent-encoded UTF-8 value", k)
			}
			if err := setAttr(&ev, strings.ToLower(name), val); err != nil {
				return pipeline.Request{}, ev, invalid("header %s: %v", k, err)
			}
		}
		if ct == "" {
			ct = "application/json"
		}
		if err := ev.SetData(ct, body); err != nil {
			return pipeline.Request{}, ev, invalid("data: %v", err)
		}
	}
	if err := ev.Validate(); err != nil {
		return pipeline.Request{}, ev, invalid("not a valid CloudEvent: %v", err)
	}
	var trig pipeline.Trigger
	switch ev.Type() {
	case TypeContextOverBudget:
		trig = pipeline.TriggerOverBudget
	case TypeContextOverflow:
		trig = pipeline.TriggerOverflow
	default:
		return pipeline.Request{}, ev, invalid("type %q is not %s or %s", ev.Type(), TypeContextOverBudget, TypeContextOverflow)
	}
	if dct := ev.DataContentType(); dct != "" && !strings.HasPrefix(dct, "application/json") {
		return pipeline.Request{}, ev, invalid("datacontenttype %q is not application/json", dct)
	}
	data := ev.Data()
	if err := schemas.Validate(schemas.ContextRequest, data); err != nil {
		return pipeline.Request{}, ev, invalid("data: %v", err)
	}
	var d RequestData
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&d); err != nil {
		return pipeline.Request{}, ev, invalid("data: %v", err)
	}
	if s := ev.Subject(); s != "" && s != d.SessionID {
		return pipeline.Request{}, ev, invalid("subject %q differs from data.session_id %q", s, d.SessionID)
	}
	return pipeline.Request{ID: ev.ID(), SessionID: d.SessionID, Trigger: trig, Model: d.Model, ContextLimit: d.ContextLimit,
		RequestedTokens: d.RequestedTokens, MessageCount: d.MessageCount, SummaryModel: d.SummaryModel,
		SummaryContextLimit: d.SummaryContextLimit, Focus: d.Focus}, ev, nil
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) > len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

func setAttr(ev *cloudevents.Event, name, val string) error {
	switch name {
	case "specversion":
	case "id":
		ev.SetID(val)
	case "source":
		ev.SetSource(val)
	case "type":
		ev.SetType(val)
	case "subject":
		ev.SetSubject(val)
	case "dataschema":
		ev.SetDataSchema(val)
	case "time":
		t, err := time.Parse(time.RFC3339Nano, val)
		if err != nil {
			return err
		}
		ev.SetTime(t)
	default:
		ev.SetExtension(name, val)
	}
	return nil
}

// resultNamespace roots the deterministic ids of result events.
var resultNamespace = uuid.MustParse("2b0f1c8e-5d7a-4e55-9c1e-7d3f0a9b6c42")

// ResultID is a deterministic event id (and Nats-Msg-Id) derived from a key
// and an event type: the same for a redelivery, different for another key.
func ResultID(key, typ string) string {
	return uuid.NewSHA1(resultNamespace, []byte(typ+"\x00"+key)).String()
}

// RequestResultID is the id of the one result event answering request
// requestID, CompactionCompleted or CompactionFailed alike: whichever is
// published first, JetStream's dedup drops any other, so a request never
// has two results.
func RequestResultID(requestID string) string { return ResultID(requestID, "result") }

// CircuitID is the id of the event of type typ (opened or closed) about
// the breaker opening at openedAt: one event per opening however often it
// is reported or reset.
func CircuitID(sessionID string, openedAt time.Time, typ string) string {
	return ResultID(sessionID+"@"+openedAt.UTC().Format(time.RFC3339Nano), typ)
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

// EncodeBinary writes an event in binary mode: each attribute a ce- header
// (percent-encoded), the data as the body, and Nats-Msg-Id set to the id so
// that JetStream drops a duplicate publish.
func EncodeBinary(ev cloudevents.Event) (map[string][]string, []byte) {
	h := map[string][]string{
		"ce-specversion": {ev.SpecVersion()},
		"ce-id":          {url.PathEscape(ev.ID())},
		"ce-source":      {url.PathEscape(ev.Source())},
		"ce-type":        {url.PathEscape(ev.Type())},
		"Content-Type":   {ev.DataContentType()},
		"Nats-Msg-Id":    {ev.ID()},
	}
	if s := ev.Subject(); s != "" {
		h["ce-subject"] = []string{url.PathEscape(s)}
	}
	if !ev.Time().IsZero() {
		h["ce-time"] = []string{ev.Time().UTC().Format(time.RFC3339Nano)}
	}
	return h, ev.Data()
}
