package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/events"
)

// The vectors of the NATS binding, §3.1.3.2.
func TestHeaderValues(t *testing.T) {
	for _, tc := range []struct{ in, enc string }{
		{"Euro € 😀", "Euro%20%E2%82%AC%20%F0%9F%98%80"}, // the spec's example
		{"urn:compactor", "urn:compactor"},              // not over-encoded
		{"/mycontext/sub context", "/mycontext/sub%20context"},
		{`say "hi" 100%`, "say%20%22hi%22%20100%25"},
		{"a\nb\x7f", "a%0Ab%7F"},
		{"", ""},
	} {
		if got := contract.EncodeHeaderValue(tc.in); got != tc.enc {
			t.Errorf("EncodeHeaderValue(%q) = %q, want %q", tc.in, got, tc.enc)
		}
		if got, err := contract.DecodeHeaderValue(tc.enc); err != nil || got != tc.in {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v; want %q", tc.enc, got, err, tc.in)
		}
	}
	for in, want := range map[string]string{
		`"urn:x"`:             "urn:x",          // a quoted string, as older senders wrote
		`"a \"quoted\" \\ b"`: `a "quoted" \ b`, // backslash escapes
		`"sp%20ace"`:          "sp ace",         // unquoted, then percent-decoded
		"%e2%82%ac":           "€",              // lower-case hex
		"%41bc":               "Abc",            // unnecessary encoding
		"  padded \t":         "padded",         // optional whitespace
	} {
		if got, err := contract.DecodeHeaderValue(in); err != nil || got != want {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"%C0%A0", "%zz", "50%", `"open`, `"a"b`, "%FF"} {
		if got, err := contract.DecodeHeaderValue(bad); err == nil {
			t.Errorf("DecodeHeaderValue(%q) = %q, want an error", bad, got)
		}
	}
}

func TestModes(t *testing.T) {
	data := `{"session_id":"s1"}`
	structured := []byte(`{"specversion":"1.0","id":"e1","source":"urn:r","type":"ContextOverBudget","datacontenttype":"application/json","data":` + data + `}`)
	for _, tc := range []struct {
		name string
		h    map[string][]string
		body []byte
		mode contract.Mode
	}{
		{"structured by content type", map[string][]string{"Content-Type": {"Application/CloudEvents+JSON; charset=utf-8"}}, structured, contract.Structured},
		{"structured with no headers (the SDKs' NATS bindings)", nil, structured, contract.Structured},
		{"binary", map[string][]string{"ce-specversion": {"1.0"}, "ce-id": {"e1"}, "ce-source": {"urn:r"}, "ce-type": {"ContextOverBudget"},
			"ce-datacontenttype": {"application/json"}}, []byte(data), contract.Binary},
		{"binary with Content-Type only", map[string][]string{"CE-SPECVERSION": {"1.0"}, "Ce-Id": {"e1"}, "ce-source": {`"urn:r"`}, "ce-type": {"ContextOverBudget"},
			"Content-Type": {"application/json"}}, []byte(data), contract.Binary},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if m, ok := contract.ModeOf(tc.h, tc.body); !ok || m != tc.mode {
				t.Fatalf("mode %q %v, want %q", m, ok, tc.mode)
			}
			ev, err := events.DecodeEvent(tc.h, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID() != "e1" || ev.Source() != "urn:r" || ev.DataContentType() != "application/json" || string(ev.Data()) != data {
				t.Fatalf("decoded %s", ev)
			}
			req, _, err := events.DecodeRequest(contract.OverBudgetPrefix+"s1", tc.h, tc.body)
			if err != nil || req.ID != "e1" || req.SessionID != "s1" {
				t.Fatalf("request %+v %v", req, err)
			}
		})
	}
	// ce-datacontenttype is an attribute, not an extension that overwrites
	// one (the official binding's requests were dead-lettered for it).
	h := map[string][]string{"ce-specversion": {"1.0"}, "ce-id": {"e1"}, "ce-source": {"urn:r"}, "ce-type": {"ContextOverBudget"},
		"ce-datacontenttype": {"application/json"}, "Content-Type": {"text/plain"}}
	if ev, err := events.DecodeEvent(h, []byte(data)); err != nil || ev.DataContentType() != "application/json" {
		t.Fatalf("ce-datacontenttype beside Content-Type: %v %v", ev.DataContentType(), err)
	}
	h["CE-ID"] = []string{"e2"}
	if _, err := events.DecodeEvent(h, []byte(data)); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("an attribute given twice with two values: %v", err)
	}
	for _, body := range []string{"plain text", `{"id":"x"}`, `[1]`, ``} {
		if _, ok := contract.ModeOf(nil, []byte(body)); ok {
			t.Errorf("ModeOf(%q) says it is an event", body)
		}
	}
}

// Extensions go both ways: the distributed-tracing ones are what a result
// carries on from its request.
func TestExtensionsRoundTrip(t *testing.T) {
	ev, err := events.NewEvent("id 1", contract.TypeCompactionCompleted, "/src/path", "s1", time.Date(2026, 12, 3, 1, 2, 3, 4, time.UTC), map[string]int{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	ev.SetExtension("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	ev.SetExtension("tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
	ev.SetDataSchema("https://example.com/s.json")
	h, body := events.EncodeBinary(ev)
	for k, want := range map[string]string{"ce-id": "id%201", "ce-source": "/src/path", "ce-traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"ce-tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", "ce-time": "2026-12-03T01:02:03.000000004Z", "ce-dataschema": "https://example.com/s.json"} {
		if got := h[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %v, want %q", k, got, want)
		}
	}
	back, err := events.DecodeEvent(h, body)
	if err != nil {
		t.Fatal(err)
	}
	if back.String() != ev.String() {
		t.Fatalf("round trip:\n%s\nwant\n%s", back, ev)
	}
	if tr := events.TraceOf(back); tr.Parent == "" || tr.State == "" {
		t.Fatalf("trace %+v", tr)
	}
}

// A request the service cannot decode still says what it can of its id
// and session, so that the runtime waiting for it is answered.
func TestDecodeAttributes(t *testing.T) {
	h := map[string][]string{"ce-specversion": {"1.0"}, "ce-id": {"req%201"}, "ce-source": {"urn:r"}, "ce-type": {"ContextOverBudget"}}
	req, _, err := events.DecodeRequest(contract.OverBudgetPrefix+"s1", h, []byte(`{"session_id":"s1","context_limit":-5}`))
	if !errors.Is(err, events.ErrInvalid) || req.ID != "req 1" || req.SessionID != "s1" || req.Trigger != "over_budget" {
		t.Fatalf("%+v %v", req, err)
	}
	req, _, err = events.DecodeRequest(contract.OverflowPrefix+"s2", nil, []byte(`{"specversion":"1.0","id":"r2","type":"context_overflow"}`))
	if err == nil || req.ID != "r2" || req.SessionID != "s2" {
		t.Fatalf("structured without source: %+v %v", req, err)
	}
	req, _, _ = events.DecodeRequest(contract.OverBudgetPrefix+"a.b", h, []byte(`{}`))
	if req.SessionID != "" {
		t.Fatalf("an invalid session id is attributed: %+v", req)
	}
}

// conformanceCase is one event of the CloudEvents conformance suite's YAML.
type conformanceCase struct {
	Mode              string         `yaml:"Mode"`
	ContextAttributes map[string]any `yaml:"ContextAttributes"`
	Data              string         `yaml:"Data"`
}

func attrString(v any) string {
	switch v := v.(type) {
	case float64: // specversion: 1.0 is a YAML number
		return strconv.FormatFloat(v, 'f', 1, 64)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprint(v)
}

// The conformance suite's events, sent in each mode they name (both when
// none) as a NATS binding sender does, decode to the same attributes,
// extensions and data; version 0.3 events are refused with a clear error.
func TestConformanceCases(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "data", "cloudevents", "conformance", "yaml")
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	more, _ := filepath.Glob(filepath.Join(dir, "*", "*.yaml"))
	files = append(files, more...)
	if len(files) == 0 {
		t.Skipf("no conformance cases under %s (../shared/data is absent)", dir)
	}
	n := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for i := 0; ; i++ {
			var c conformanceCase
			if err := dec.Decode(&c); err != nil {
				break
			}
			attrs := map[string]string{}
			exts := map[string]string{}
			for k, v := range c.ContextAttributes {
				if k == "Extensions" {
					for ek, evv := range v.(map[string]any) {
						exts[ek] = attrString(evv)
					}
					continue
				}
				attrs[k] = attrString(v)
			}
			modes := []string{"binary", "structured"}
			if c.Mode != "" {
				modes = []string{c.Mode}
			}
			for _, mode := range modes {
				name := fmt.Sprintf("%s#%d/%s", filepath.Base(f), i, mode)
				h, body := sendAs(t, mode, attrs, exts, c.Data)
				ev, err := events.DecodeEvent(h, body)
				cev, cerr := contract.DecodeEvent(h, body)
				if attrs["specversion"] != "1.0" {
					if err == nil || cerr == nil {
						t.Errorf("%s: specversion %s accepted: %v, contract %v", name, attrs["specversion"], err, cerr)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				// The contract's codec, which the Go client reads with, reads
				// what the SDK reads.
				if cerr != nil {
					t.Errorf("%s: contract.DecodeEvent: %v", name, cerr)
				} else if diff := sameEvent(ev, cev); diff != "" {
					t.Errorf("%s: contract.DecodeEvent differs from the SDK: %s", name, diff)
				}
				n++
				got := map[string]string{"specversion": ev.SpecVersion(), "id": ev.ID(), "source": ev.Source(), "type": ev.Type()}
				if !ev.Time().IsZero() {
					got["time"] = ev.Time().UTC().Format(time.RFC3339Nano)
				}
				if ev.DataContentType() != "" {
					got["datacontenttype"] = ev.DataContentType()
				}
				if ev.Subject() != "" {
					got["subject"] = ev.Subject()
				}
				for k, want := range attrs {
					if got[k] != want {
						t.Errorf("%s: %s = %q, want %q", name, k, got[k], want)
					}
				}
				for k, want := range exts {
					if v, _ := ev.Extensions()[k].(string); v != want {
						t.Errorf("%s: extension %s = %q, want %q", name, k, v, want)
					}
				}
				if string(ev.Data()) != c.Data && !(mode == "structured" && jsonEqual(ev.Data(), []byte(c.Data))) {
					t.Errorf("%s: data %q, want %q", name, ev.Data(), c.Data)
				}
			}
		}
	}
	if n < 8 {
		t.Fatalf("only %d conformance events decoded", n)
	}
}

// sendAs builds the NATS message a binding sender writes for an event.
func sendAs(t *testing.T, mode string, attrs, exts map[string]string, data string) (map[string][]string, []byte) {
	t.Helper()
	if mode == "binary" {
		h := map[string][]string{"user-agent": {"foo"}}
		for k, v := range attrs {
			h["ce-"+k] = []string{contract.EncodeHeaderValue(v)}
		}
		for k, v := range exts {
			h["ce-"+k] = []string{contract.EncodeHeaderValue(v)}
		}
		return h, []byte(data)
	}
	doc := map[string]any{}
	for k, v := range attrs {
		doc[k] = v
	}
	for k, v := range exts {
		doc[k] = v
	}
	if strings.HasPrefix(attrs["datacontenttype"], "application/json") || attrs["datacontenttype"] == "" {
		doc["data"] = json.RawMessage(data)
	} else {
		doc["data"] = data
	}
	body, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]string{"Content-Type": {"application/cloudevents+json"}}, body
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// sameEvent says how the contract's reading of an event differs from the
// SDK's ("" when it does not).
func sameEvent(ev cloudevents.Event, c contract.Event) string {
	for _, a := range [][3]string{{"id", ev.ID(), c.ID}, {"source", ev.Source(), c.Source}, {"type", ev.Type(), c.Type},
		{"subject", ev.Subject(), c.Subject}, {"datacontenttype", ev.DataContentType(), c.DataContentType}, {"dataschema", ev.DataSchema(), c.DataSchema}} {
		if a[1] != a[2] {
			return fmt.Sprintf("%s %q, the SDK %q", a[0], a[2], a[1])
		}
	}
	if !ev.Time().Equal(c.Time) {
		return fmt.Sprintf("time %v, the SDK %v", c.Time, ev.Time())
	}
	if !bytes.Equal(ev.Data(), c.Data) && !jsonEqual(ev.Data(), c.Data) {
		return fmt.Sprintf("data %q, the SDK %q", c.Data, ev.Data())
	}
	if len(ev.Extensions()) != len(c.Extensions) {
		return fmt.Sprintf("extensions %v, the SDK %v", c.Extensions, ev.Extensions())
	}
	for k, v := range ev.Extensions() {
		if s, _ := types.Format(v); c.Extensions[k] != s {
			return fmt.Sprintf("extension %s %q, the SDK %q", k, c.Extensions[k], s)
		}
	}
	return ""
}
