package contract_test

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/compactor/compactor/contract"
)

// A result id is the name-based UUID google/uuid derives (the ids stored
// before the contract had its own derivation).
func TestResultIDIsTheUUIDv5(t *testing.T) {
	ns := uuid.MustParse("2b0f1c8e-5d7a-4e55-9c1e-7d3f0a9b6c42")
	for i, key := range []string{"", "r1", "a request id with spaces", strings.Repeat("é", 300), "s1@2026-12-07T00:00:00Z"} {
		for _, kind := range []string{"result", "failed", contract.TypeCompactionCircuitOpened} {
			want := uuid.NewSHA1(ns, []byte(kind+"\x00"+key)).String()
			if got := contract.ResultID(key, kind); got != want {
				t.Errorf("%d: ResultID(%q, %q) = %s, want %s", i, key, kind, got, want)
			}
		}
	}
	if contract.RequestResultID("r") == contract.FailedResultID("r") || contract.ResultEventID("r", true) != contract.FailedResultID("r") {
		t.Fatal("a request's two result ids")
	}
}

// ValidSessionID is SessionIDPattern, on every byte and at the bounds.
func TestValidSessionIDIsThePattern(t *testing.T) {
	re := regexp.MustCompile(contract.SessionIDPattern)
	ids := []string{"", "a", strings.Repeat("x", contract.MaxSessionIDBytes), strings.Repeat("x", contract.MaxSessionIDBytes+1), "é", "a.b", "a b", "a*", "a>"}
	for c := range 256 {
		ids = append(ids, "a"+string([]byte{byte(c)}))
	}
	for _, id := range ids {
		if got, want := contract.ValidSessionID(id), re.MatchString(id); got != want {
			t.Errorf("ValidSessionID(%q) = %v, the pattern %v", id, got, want)
		}
		if err := contract.CheckSessionID(id); (err == nil) != re.MatchString(id) || err != nil && !errors.Is(err, contract.ErrSessionID) {
			t.Errorf("CheckSessionID(%q) = %v", id, err)
		}
	}
	long := strings.Repeat("ü", 100)
	if err := contract.CheckSessionID(long); err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), "(200 bytes)") {
		t.Fatalf("a long id's error: %v", err)
	}
}

// An event written in binary mode reads back the same, whatever its
// attributes hold.
func TestBinaryRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 7, 1, 2, 3, 4, time.UTC)
	ev, err := contract.NewEvent("id 1 %\"é", contract.TypeContextOverBudget, "urn:x/y z", "s-1", at, contract.RequestData{SessionID: "s-1", Focus: "ä\n\"q\""})
	if err != nil {
		t.Fatal(err)
	}
	ev.DataSchema = "https://example.com/s.json"
	ev.Extensions = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=1,b=2"}
	h, body := contract.EncodeBinary(ev)
	for k, v := range h {
		if k == "Nats-Msg-Id" {
			continue // the id as it is: JetStream's deduplication key
		}
		for _, c := range v[0] {
			if c < 0x20 || c >= 0x7f {
				t.Errorf("header %s = %q: not printable ASCII", k, v[0])
			}
		}
	}
	if h["Nats-Msg-Id"][0] != ev.ID || h["ce-id"][0] != "id%201%20%25%22%C3%A9" {
		t.Fatalf("headers %v", h)
	}
	back, err := contract.DecodeEvent(h, body)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, ev) {
		t.Fatalf("round trip:\n%+v\nwant\n%+v", back, ev)
	}
}

// Structured mode: data as JSON, as a string for other types, or base64.
func TestDecodeStructured(t *testing.T) {
	for _, tc := range []struct {
		body, data string
	}{
		{`{"specversion":"1.0","id":"e1","source":"urn:r","type":"T","datacontenttype":"application/json","data":{"a":1}}`, `{"a":1}`},
		{`{"specversion":"1.0","id":"e1","source":"urn:r","type":"T","data":[1,2]}`, `[1,2]`},
		{`{"specversion":"1.0","id":"e1","source":"urn:r","type":"T","datacontenttype":"text/plain","data":"a \"b\""}`, `a "b"`},
		{`{"specversion":"1.0","id":"e1","source":"urn:r","type":"T","data_base64":"aGk="}`, `hi`},
		{`{"specversion":"1.0","id":"e1","source":"urn:r","type":"T","ext1":"v","num":7}`, ``},
	} {
		ev, err := contract.DecodeEvent(map[string][]string{"Content-Type": {"application/cloudevents+json"}}, []byte(tc.body))
		if err != nil || string(ev.Data) != tc.data || ev.ID != "e1" {
			t.Errorf("%s: %+v %v", tc.body, ev, err)
		}
	}
	for _, tc := range []struct {
		h    map[string][]string
		body string
		err  string
	}{
		{nil, `plain`, "not a CloudEvent"},
		{map[string][]string{"ce-specversion": {"0.3"}, "ce-id": {"e"}, "ce-source": {"s"}, "ce-type": {"t"}}, ``, "specversion"},
		{map[string][]string{"ce-specversion": {"1.0"}, "ce-id": {"e"}, "ce-type": {"t"}}, ``, "source"},
		{map[string][]string{"ce-specversion": {"1.0"}, "ce-id": {"e"}, "CE-ID": {"f"}, "ce-source": {"s"}, "ce-type": {"t"}}, ``, "twice"},
		{map[string][]string{"ce-specversion": {"1.0"}, "ce-id": {"%zz"}, "ce-source": {"s"}, "ce-type": {"t"}}, ``, "percent"},
		{map[string][]string{"ce-specversion": {"1.0"}, "ce-id": {"e"}, "ce-source": {"s"}, "ce-type": {"t"}, "ce-time": {"yesterday"}}, ``, "RFC 3339"},
		{map[string][]string{"Content-Type": {"application/cloudevents-batch+json"}}, `[]`, "batch"},
	} {
		if _, err := contract.DecodeEvent(tc.h, []byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v %q: %v, want an error saying %q", tc.h, tc.body, err, tc.err)
		}
	}
}

// The fact sheet holds every subject and route once.
func TestFactsHoldEverySubject(t *testing.T) {
	f := contract.Facts()
	var subjects []string
	for _, s := range f.Subjects {
		subjects = append(subjects, s)
	}
	slices.Sort(subjects)
	want := slices.Clone(contract.Subjects)
	slices.Sort(want)
	if !slices.Equal(subjects, want) || len(slices.Compact(slices.Clone(want))) != len(want) {
		t.Fatalf("fact sheet subjects %v, want %v", subjects, want)
	}
	if !reflect.DeepEqual(f.Routes, contract.Routes) || f.SessionID.Error != contract.ErrSessionID.Error() || len(f.Codes) != len(contract.Codes) {
		t.Fatalf("fact sheet %+v", f)
	}
	for _, r := range contract.Routes {
		if got, ok := contract.RouteOf(r.Type); !ok || got != r || contract.Subject(r.Type, "s") != r.Prefix+"s" {
			t.Errorf("route %+v", r)
		}
		if r.Request {
			if got, sid, ok := contract.RequestSubject(r.Prefix + "s-1"); !ok || got != r || sid != "s-1" {
				t.Errorf("RequestSubject of %s", r.Type)
			}
			if got, ok := contract.RequestRoute(r.Trigger); !ok || got != r {
				t.Errorf("RequestRoute(%s)", r.Trigger)
			}
		}
	}
}

// The contract carries nothing but the standard library: a client that
// imports it carries no more than nats.go.
func TestImportsTheStandardLibraryOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); !slices.Equal(got, []string{"github.com/compactor/compactor/contract"}) {
		t.Fatalf("the contract imports %v", got)
	}
}

// The recall tools' parameters are JSON Schema objects whose properties
// are their argument types' fields, and the two formats carry the one
// definition.
func TestRecallTools(t *testing.T) {
	args := map[string]any{contract.ToolSearchHistory: contract.SearchHistoryArgs{}, contract.ToolExpandHistory: contract.ExpandHistoryArgs{}}
	for _, tool := range contract.RecallTools {
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(tool.Parameters, &schema); err != nil || schema.Type != "object" {
			t.Fatalf("%s: %v %+v", tool.Name, err, schema)
		}
		var fields []string
		rt := reflect.TypeOf(args[tool.Name])
		for i := range rt.NumField() {
			fields = append(fields, strings.Split(rt.Field(i).Tag.Get("json"), ",")[0])
		}
		var props []string
		for p := range schema.Properties {
			props = append(props, p)
		}
		slices.Sort(fields)
		slices.Sort(props)
		if !slices.Equal(fields, props) {
			t.Fatalf("%s: arguments %v, schema %v", tool.Name, fields, props)
		}
	}
	var openai []struct {
		Type     string           `json:"type"`
		Function contract.ToolDef `json:"function"`
	}
	var anthropic []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if json.Unmarshal(contract.OpenAITools(), &openai) != nil || json.Unmarshal(contract.AnthropicTools(), &anthropic) != nil || len(openai) != 2 || len(anthropic) != 2 {
		t.Fatalf("formats: %s %s", contract.OpenAITools(), contract.AnthropicTools())
	}
	for i, tool := range contract.RecallTools {
		if openai[i].Type != "function" || openai[i].Function.Name != tool.Name || string(openai[i].Function.Parameters) != string(tool.Parameters) ||
			anthropic[i].Name != tool.Name || anthropic[i].Description != tool.Description || string(anthropic[i].InputSchema) != string(tool.Parameters) {
			t.Fatalf("tool %d differs between the formats", i)
		}
	}
}
