package events_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/schemas"
)

func binary(typ, data string) (map[string][]string, []byte) {
	return map[string][]string{
		"Ce-Specversion": {"1.0"}, "CE-ID": {"evt-1"}, "ce-source": {"urn%3Aruntime%3Aa"}, "ce-type": {typ},
		"ce-subject": {"sess-1"}, "ce-time": {"2026-12-02T12:00:00Z"}, "Content-Type": {"application/json"},
	}, []byte(data)
}

func TestDecodeBinaryAndStructured(t *testing.T) {
	h, body := binary("ContextOverBudget", `{"session_id":"sess-1","model":"gpt-4o","context_limit":8000,"requested_tokens":9100,"message_count":80}`)
	req, ev, err := events.DecodeRequest(contract.OverBudgetPrefix+"sess-1", h, body)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	want := pipeline.Request{ID: "evt-1", SessionID: "sess-1", Trigger: pipeline.TriggerOverBudget, Model: "gpt-4o", ContextLimit: 8000, RequestedTokens: 9100, MessageCount: 80, At: at}
	if req != want || ev.Source() != "urn:runtime:a" {
		t.Fatalf("got %+v (source %q), want %+v", req, ev.Source(), want)
	}
	// The runtime's cache state, judged at the event's time.
	h, body = binary("ContextOverBudget", `{"session_id":"sess-1","cache":{"last_request_time":"2026-12-02T11:58:00Z","ttl_seconds":300}}`)
	req, _, err = events.DecodeRequest(contract.OverBudgetPrefix+"sess-1", h, body)
	if err != nil || req.Cache == nil || !req.Cache.LastRequest.Equal(at.Add(-2*time.Minute)) || req.Cache.TTL != 5*time.Minute || !req.At.Equal(at) || req.Cache.Cold(req.At) {
		t.Fatalf("cache: %+v %+v %v", req, req.Cache, err)
	}
	structured := `{"specversion":"1.0","id":"evt-2","source":"runtime","type":"context_overflow","subject":"sess-1","datacontenttype":"application/json",
		"data":{"session_id":"sess-1","provider":"openai","error_code":"context_length_exceeded","error_message":"maximum context length is 8192 tokens"}}`
	req, _, err = events.DecodeRequest(contract.OverflowPrefix+"sess-1", map[string][]string{"content-type": {"application/cloudevents+json"}}, []byte(structured))
	if err != nil || req.Trigger != pipeline.TriggerOverflow || req.ID != "evt-2" || req.SessionID != "sess-1" {
		t.Fatalf("structured: %+v %v", req, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	ok := `{"session_id":"sess-1"}`
	tests := []struct {
		name string
		h    map[string][]string
		body string
		want string
	}{
		{"not JSON", nil, "hello", "not a CloudEvent"},
		{"structured not JSON", map[string][]string{"Content-Type": {"application/cloudevents+json"}}, "{", "structured event"},
		{"missing id", map[string][]string{"ce-specversion": {"1.0"}, "ce-source": {"x"}, "ce-type": {"ContextOverBudget"}}, ok, "not a valid CloudEvent"},
		{"wrong type", nil, ok, "type"},
		{"missing session_id", nil, `{"model":"gpt-4o"}`, "session_id"},
		{"bad session id", nil, `{"session_id":"a.b"}`, "session_id"},
		{"invalid UTF-8", nil, "{\"session_id\":\"\xff\"}", "UTF-8"},
		{"oversized", nil, `{"session_id":"s","focus":"` + strings.Repeat("x", events.MaxRequestBytes) + `"}`, "over"},
		{"data not JSON", nil, `[1,2`, "data"},
		{"subject mismatch", nil, `{"session_id":"other"}`, "subject"},
		{"batch", map[string][]string{"Content-Type": {"application/cloudevents-batch+json"}}, "[]", "batch"},
		{"wrong subject", nil, ok, "is not context_overflow"},
		{"misspelt field", nil, `{"session_id":"sess-1","context_limt":8000}`, "unknown field 'context_limt'"},
		{"wrong type of field", nil, `{"session_id":"sess-1","context_limit":"8k"}`, "context_limit: got string, want integer"},
		{"cache without ttl", nil, `{"session_id":"sess-1","cache":{"last_request_time":"2026-12-02T11:58:00Z"}}`, "ttl_seconds"},
		{"cache ttl negative", nil, `{"session_id":"sess-1","cache":{"last_request_time":"2026-12-02T11:58:00Z","ttl_seconds":-1}}`, "ttl_seconds"},
		{"cache time not a time", nil, `{"session_id":"sess-1","cache":{"last_request_time":"yesterday","ttl_seconds":300}}`, "last_request_time"},
		{"cache misspelt", nil, `{"session_id":"sess-1","cache":{"last_request_time":"2026-12-02T11:58:00Z","ttl":300}}`, "ttl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, body := binary("ContextOverBudget", tt.body)
			switch tt.name {
			case "wrong type":
				h["ce-type"] = []string{"SomethingElse"}
			case "not JSON":
				h = map[string][]string{}
			}
			if tt.h != nil {
				h = tt.h
			}
			subject := contract.OverBudgetPrefix + "sess-1"
			if tt.name == "wrong subject" {
				subject = contract.OverflowPrefix + "sess-1"
			}
			_, _, err := events.DecodeRequest(subject, h, body)
			if !errors.Is(err, events.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want ErrInvalid mentioning %q", err, tt.want)
			}
			// A field the schema knows is never called unknown (a failed
			// subschema evaluates none of its properties).
			if strings.Contains(err.Error(), "unknown field 'session_id'") {
				t.Fatalf("err %q calls session_id unknown", err)
			}
			// The error speaks of the event's fields, not of the validator
			// or of Go types.
			for _, leak := range []string{"mem:///", "Go struct", "jsonschema"} {
				if strings.Contains(err.Error(), leak) {
					t.Fatalf("err %q carries %q", err, leak)
				}
			}
		})
	}
}

func TestResultEventsRoundTrip(t *testing.T) {
	res := &pipeline.Result{SessionID: "sess-1", RequestID: "evt-1", Trigger: pipeline.TriggerOverBudget, Outcome: pipeline.OutcomeNoop}
	id := contract.RequestResultID(res.RequestID)
	if id != contract.RequestResultID("evt-1") || id == contract.RequestResultID("evt-2") ||
		id == contract.ResultID("evt-1", contract.TypeCompactionCircuitOpened) {
		t.Fatal("result ids must be deterministic per request, one for completed and failed alike")
	}
	opened := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	if contract.CircuitID("s", opened, contract.TypeCompactionCircuitClosed) != contract.CircuitID("s", opened.In(time.FixedZone("x", 3600)), contract.TypeCompactionCircuitClosed) ||
		contract.CircuitID("s", opened, contract.TypeCompactionCircuitClosed) == contract.CircuitID("s", opened.Add(time.Nanosecond), contract.TypeCompactionCircuitClosed) {
		t.Fatal("circuit ids must be one per breaker opening")
	}
	ev, err := events.NewEvent(id, contract.TypeCompactionCompleted, "compactor", res.SessionID, time.Now(), res)
	if err != nil {
		t.Fatal(err)
	}
	h, body := events.EncodeBinary(ev)
	if h["Nats-Msg-Id"][0] != id || h["ce-type"][0] != "CompactionCompleted" || h["ce-subject"][0] != "sess-1" || h["Content-Type"][0] != "application/json" ||
		h["ce-datacontenttype"][0] != "application/json" || h["ce-source"][0] != "compactor" {
		t.Fatalf("headers %v", h)
	}
	if err := schemas.Validate(schemas.CompactionCompleted, body); err != nil {
		t.Fatal(err)
	}
	var back pipeline.Result
	if json.Unmarshal(body, &back); back.Outcome != pipeline.OutcomeNoop {
		t.Fatalf("body %s", body)
	}
}

// FuzzDecodeRequest: any headers and body decode to a valid request or to an
// ErrInvalid error; never a panic, never another error.
func FuzzDecodeRequest(f *testing.F) {
	f.Add("1.0", "ContextOverBudget", "application/json", `{"session_id":"s1"}`)
	f.Add("1.0", "context_overflow", "application/cloudevents+json", `{"specversion":"1.0","id":"x","source":"y","type":"context_overflow","data":{"session_id":"s"}}`)
	f.Add("0.3", "x", "", "\xff")
	f.Add("1.0", "ContextOverBudget", "text/plain", `{"session_id":""}`)
	f.Fuzz(func(t *testing.T, spec, typ, ct, body string) {
		h := map[string][]string{"ce-specversion": {spec}, "ce-id": {"i"}, "ce-source": {"s"}, "ce-type": {typ}, "Content-Type": {ct}}
		req, _, err := events.DecodeRequest(contract.OverBudgetPrefix+"s1", h, []byte(body))
		if err != nil {
			if !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("decoded an invalid request: %v", err)
		}
	})
}

func TestSubjects(t *testing.T) {
	for _, tc := range []struct {
		subject, typ, sid string
		ok                bool
	}{
		{"agent.context.over_budget.s-1", contract.TypeContextOverBudget, "s-1", true},
		{"agent.context.overflow.abc_2", contract.TypeContextOverflow, "abc_2", true},
		{"agent.context.other.s", "", "", false},
		{"compaction.completed.s", "", "", false},
	} {
		r, sid, ok := contract.RequestSubject(tc.subject)
		if typ := r.Type; typ != tc.typ || sid != tc.sid || ok != tc.ok {
			t.Errorf("RequestSubject(%q) = %q %q %v", tc.subject, r.Type, sid, ok)
		}
	}
	if got := contract.Subject(contract.TypeCompactionCircuitOpened, "s"); got != "compaction.circuit_opened.s" {
		t.Errorf("Subject = %q", got)
	}
	if contract.Subject("Nope", "s") != "" {
		t.Error("unknown type has a subject")
	}
	for id, want := range map[string]bool{"s-1_A": true, "": false, "a.b": false, "a b": false, strings.Repeat("x", 201): false, strings.Repeat("x", 200): true, "é": false, "Zz09-_": true, "a*": false, "a>": false, "a\x00": false} {
		if contract.ValidSessionID(id) != want {
			t.Errorf("ValidSessionID(%q) != %v", id, want)
		}
	}
	// The rule as its expression says it, on every byte.
	rule := regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)
	for c := range 256 {
		id := "a" + string([]byte{byte(c)})
		if contract.ValidSessionID(id) != rule.MatchString(id) {
			t.Errorf("ValidSessionID(%q) = %v, the expression %v", id, !rule.MatchString(id), rule.MatchString(id))
		}
	}
}
