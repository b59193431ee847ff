package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/fakeprovider"
	"github.com/compactor/compactor/internal/natstest"
)

const schemaBase = "https://compactor.dev/schemas/"

// asyncAPI is schemas/asyncapi.yaml, with a compiler for its schemas (the
// JSON Schemas beside it resolved by their ids).
type asyncAPI struct {
	doc map[string]any
	c   *jsonschema.Compiler
	mu  sync.Mutex
	got map[string]*jsonschema.Schema
}

func loadAsyncAPI(t *testing.T) *asyncAPI {
	t.Helper()
	dir := filepath.Join("..", "..", "schemas")
	raw, err := os.ReadFile(filepath.Join(dir, "asyncapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("asyncapi.yaml: %v", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("asyncapi.yaml is not JSON-compatible: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	v, _ := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	if err := c.AddResource(schemaBase+"asyncapi.json", v); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, f := range files {
		fb, _ := os.ReadFile(f)
		fv, err := jsonschema.UnmarshalJSON(strings.NewReader(string(fb)))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource(schemaBase+filepath.Base(f), fv); err != nil {
			t.Fatal(err)
		}
	}
	return &asyncAPI{doc: doc, c: c, got: map[string]*jsonschema.Schema{}}
}

// at follows a JSON pointer ("#/a/b") in the document.
func (a *asyncAPI) at(ptr string) (any, bool) {
	var cur any = a.doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "#/"), "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// deref follows a {"$ref": "#/..."} object to what it names.
func (a *asyncAPI) deref(t *testing.T, v any) (any, string) {
	t.Helper()
	ptr := ""
	for {
		m, ok := v.(map[string]any)
		if !ok {
			return v, ptr
		}
		ref, ok := m["$ref"].(string)
		if !ok || !strings.HasPrefix(ref, "#/") {
			return v, ptr
		}
		if v, ok = a.at(ref); !ok {
			t.Fatalf("$ref %s resolves to nothing", ref)
		}
		ptr = ref
	}
}

// validate checks v against the schema at pointer ptr of the document.
func (a *asyncAPI) validate(t *testing.T, ptr string, v any) error {
	t.Helper()
	a.mu.Lock()
	s, ok := a.got[ptr]
	if !ok {
		var err error
		if s, err = a.c.Compile(schemaBase + "asyncapi.json" + ptr); err != nil {
			a.mu.Unlock()
			t.Fatalf("compile %s: %v", ptr, err)
		}
		a.got[ptr] = s
	}
	a.mu.Unlock()
	return s.Validate(v)
}

// checkMessage validates a NATS message's headers and payload against the
// message object at ptr.
func (a *asyncAPI) checkMessage(t *testing.T, ptr string, h nats.Header, data []byte) error {
	t.Helper()
	msg, mptr := a.deref(t, map[string]any{"$ref": ptr})
	m := msg.(map[string]any)
	if _, ok := m["headers"]; ok {
		hv := map[string]any{}
		for k, v := range h {
			if len(v) > 0 {
				hv[k] = v[0]
			}
		}
		if err := a.validate(t, mptr+"/headers", hv); err != nil {
			return fmt.Errorf("headers: %v", err)
		}
	}
	var body any = map[string]any{}
	if len(data) > 0 {
		var err error
		if body, err = jsonschema.UnmarshalJSON(strings.NewReader(string(data))); err != nil {
			return fmt.Errorf("payload is not JSON: %v", err)
		}
	}
	if err := a.validate(t, mptr+"/payload", body); err != nil {
		return fmt.Errorf("payload: %v", err)
	}
	return nil
}

// channels returns each channel's name by its address ("" for null).
func (a *asyncAPI) channels() map[string]string {
	out := map[string]string{}
	for name, ch := range a.doc["channels"].(map[string]any) {
		addr, _ := ch.(map[string]any)["address"].(string)
		out[addr] = name
	}
	return out
}

// description is the document's info.description.
func (a *asyncAPI) description() string {
	d, _ := a.doc["info"].(map[string]any)["description"].(string)
	return d
}

// operationOn returns the operation on channel name.
func (a *asyncAPI) operationOn(t *testing.T, name string) map[string]any {
	t.Helper()
	for _, op := range a.doc["operations"].(map[string]any) {
		o := op.(map[string]any)
		if o["channel"].(map[string]any)["$ref"] == "#/channels/"+name {
			return o
		}
	}
	t.Fatalf("no operation on channel %s", name)
	return nil
}

// onlyMessage is the pointer of a channel's one message.
func (a *asyncAPI) onlyMessage(t *testing.T, name string) string {
	t.Helper()
	msgs := a.doc["channels"].(map[string]any)[name].(map[string]any)["messages"].(map[string]any)
	if len(msgs) != 1 {
		t.Fatalf("channel %s has %d messages, want 1", name, len(msgs))
	}
	for k := range msgs {
		return "#/channels/" + name + "/messages/" + k
	}
	return ""
}

// Every reference resolves, and the document names every event type of
// the contract table on its subject, with its schema and direction.
func TestAsyncAPIDocument(t *testing.T) {
	a := loadAsyncAPI(t)
	if a.doc["asyncapi"] != "3.0.0" {
		t.Fatalf("asyncapi %v", a.doc["asyncapi"])
	}
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				switch {
				case strings.HasPrefix(ref, "#/"):
					if _, ok := a.at(ref); !ok {
						t.Errorf("%s: $ref %s resolves to nothing", at, ref)
					}
				case strings.HasPrefix(ref, "./"):
					file, frag, _ := strings.Cut(ref, "#")
					b, err := os.ReadFile(filepath.Join("..", "..", "schemas", file))
					if err != nil {
						t.Errorf("%s: $ref %s: %v", at, ref, err)
						break
					}
					var doc any
					json.Unmarshal(b, &doc)
					for _, key := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
						if key == "" {
							continue
						}
						m, _ := doc.(map[string]any)
						if doc = m[key]; doc == nil {
							t.Errorf("%s: $ref %s: %s has no %s", at, ref, file, frag)
							break
						}
					}
				default:
					t.Errorf("%s: $ref %s is neither local nor a schema beside the document", at, ref)
				}
			}
			for k, x := range v {
				walk(x, at+"/"+k)
			}
		case []any:
			for i, x := range v {
				walk(x, fmt.Sprintf("%s/%d", at, i))
			}
		}
	}
	walk(a.doc, "#")

	chans := a.channels()
	for _, r := range contract.Routes {
		name, ok := chans[r.Prefix+"{session_id}"]
		if !ok {
			t.Errorf("%s: no channel %s{session_id}", r.Type, r.Prefix)
			continue
		}
		msg, _ := a.deref(t, map[string]any{"$ref": a.onlyMessage(t, name)})
		if got := msg.(map[string]any)["name"]; got != r.Type {
			t.Errorf("channel %s carries %v, want %s", name, got, r.Type)
		}
		want := "send"
		if r.Request {
			want = "receive"
		} else if ref := msg.(map[string]any)["payload"].(map[string]any)["$ref"]; ref != "./"+r.Schema {
			t.Errorf("%s payload %v, want ./%s", r.Type, ref, r.Schema)
		}
		if op := a.operationOn(t, name); op["action"] != want {
			t.Errorf("%s: action %v, want %s", r.Type, op["action"], want)
		}
	}
	if name, ok := chans[contract.DLQPrefix+"{session_id}"]; !ok || a.operationOn(t, name)["action"] != "send" {
		t.Errorf("no DLQ channel sent on %s{session_id}", contract.DLQPrefix)
	}
	// Nothing else but the endpoints (checked against the service below)
	// and the reply inbox.
	for addr, name := range chans {
		if addr == "" || strings.HasPrefix(addr, "compactor.") && !strings.Contains(addr, "{") {
			continue
		}
		if _, _, ok := contract.RequestSubject(strings.TrimSuffix(addr, "{session_id}") + "x"); ok {
			continue
		}
		if _, ok := contract.RouteOf(a.onlyMessageName(t, name)); ok || addr == contract.DLQPrefix+"{session_id}" {
			continue
		}
		t.Errorf("channel %s (%s) is not in the contract", name, addr)
	}
}

func (a *asyncAPI) onlyMessageName(t *testing.T, channel string) string {
	msg, _ := a.deref(t, map[string]any{"$ref": a.onlyMessage(t, channel)})
	n, _ := msg.(map[string]any)["name"].(string)
	return n
}

// The document against the running service: its endpoints are the
// document's, every endpoint request and answer below fits the document's
// messages, and so does every event the service publishes: the four
// result types and a dead letter.
func TestAsyncAPIMatchesTheService(t *testing.T) {
	a := loadAsyncAPI(t)
	srv := natstest.Server(t, t.TempDir(), -1)
	service(t, srv.ClientURL(), func(prompt string) fakeprovider.Action {
		if strings.Contains(prompt, "BROKEN") {
			return fakeprovider.Action{Status: 401}
		}
		return fakeprovider.Action{}
	}, func(c *app.Config) { c.Pipeline.MaxFailures = 1 })
	nc, _ := natstest.Connect(t, srv)

	var mu sync.Mutex
	var seen []*nats.Msg
	for _, subj := range []string{contract.ResultSubjects, contract.DLQSubjects} {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) { mu.Lock(); seen = append(seen, m); mu.Unlock() })
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	_ = nc.Flush()

	// The service's endpoints are the document's.
	chans := a.channels()
	info, err := nc.Request("$SRV.INFO."+contract.ServiceName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var si struct {
		Endpoints []struct {
			Subject string `json:"subject"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(info.Data, &si); err != nil {
		t.Fatal(err)
	}
	// Each endpoint serves every tenant too, under the tenant form the
	// document's description gives.
	var have, documented, tenants []string
	for _, e := range si.Endpoints {
		if rest, ok := strings.CutPrefix(e.Subject, "tenant.*."); ok {
			tenants = append(tenants, rest)
			continue
		}
		have = append(have, e.Subject)
	}
	slices.Sort(tenants)
	for addr := range chans {
		if strings.HasPrefix(addr, "compactor.") && !strings.Contains(addr, "{") {
			documented = append(documented, addr)
		}
	}
	slices.Sort(have)
	slices.Sort(documented)
	if !slices.Equal(have, documented) {
		t.Fatalf("endpoints %v, documented %v", have, documented)
	}
	if !slices.Equal(tenants, have) || !strings.Contains(a.description(), "`tenant.{tenant}.<subject>`") {
		t.Fatalf("tenants' endpoints %v, documented %v: the description must give their form", tenants, have)
	}

	// Each endpoint, asked as the document says, answers as it says.
	up, _ := json.Marshal(map[string]any{"id": "up-1", "role": "user", "content": "an uploaded message"})
	calls := []struct {
		subject string
		body    any
		fails   bool
	}{
		{contract.SubjectCreate, map[string]any{"session_id": "s1", "context_limit": 3000, "messages": chatJSON(40)}, false},
		{contract.SubjectCreate, map[string]any{"session_id": "cb", "context_limit": 3000, "messages": brokenChat(40)}, false},
		{contract.SubjectCreate, map[string]any{"session_id": "s1", "messages": chatJSON(1)}, true},
		{contract.SubjectAppend, map[string]any{"session_id": "s1", "messages": []map[string]any{{"id": "x1", "role": "user", "content": "one more"}}}, false},
		{contract.SubjectUpload, map[string]any{"session_id": "s1", "upload_id": "u1", "part": 0, "parts": 1, "data": up}, false},
		{contract.SubjectAppend, map[string]any{"session_id": "s1", "messages": []map[string]any{{"upload_id": "u1"}}}, false},
		{contract.SubjectAppend, map[string]any{"session_id": "s1", "expected_head_seq": 3, "messages": []map[string]any{{"id": "x2", "role": "user", "content": "late"}}}, true},
		{contract.SubjectContext, map[string]any{"session_id": "s1"}, false},
		{contract.SubjectContext, map[string]any{"session_id": "nope"}, true},
		{contract.SubjectContext, map[string]any{"session_id": "s1", "part": 0}, false},
		{contract.SubjectContext, map[string]any{"session_id": "s1", "part": 0, "digest": strings.Repeat("0", 64)}, true},
		{contract.SubjectHistory, map[string]any{"session_id": "s1", "part": 0}, false},
		{contract.SubjectMessage, map[string]any{"session_id": "s1", "seq": 2}, false},
		{contract.SubjectMessage, map[string]any{"session_id": "s1", "seq": 2, "part": 0}, false},
		{contract.SubjectHistory, map[string]any{"session_id": "s1"}, false},
		{contract.SubjectCompact, map[string]any{"session_id": "s1", "request_id": "sync-1"}, false},
		{contract.SubjectCompact, map[string]any{"session_id": "cb", "request_id": "sync-2"}, true},
		{contract.SubjectResult, map[string]any{"session_id": "s1", "request_id": "sync-1"}, false},
		{contract.SubjectResult, map[string]any{"session_id": "cb", "request_id": "sync-2"}, false},
		{contract.SubjectResult, map[string]any{"session_id": "s1", "request_id": "never-sent"}, true},
		{contract.SubjectBreaker, map[string]any{"session_id": "cb"}, false},
		{contract.SubjectBreakers, map[string]any{}, false},
		{contract.SubjectBreakers, map[string]any{"limit": 1}, false},
		{contract.SubjectList, map[string]any{}, false},
		{contract.SubjectList, map[string]any{"limit": 1, "prefix": "s", "idle_for": "1m", "compacted": false}, false},
		{contract.SubjectList, map[string]any{"after": "not-a-cursor"}, true},
		{contract.SubjectList, map[string]any{"idle_for": "a day"}, true},
		{contract.SubjectSearch, map[string]any{"session_id": "s1", "query": "question 3"}, false},
		{contract.SubjectSearch, map[string]any{"session_id": "s1", "query": "one more", "mode": "substring", "roles": []string{"user"}, "states": []string{"raw", "summarised"}, "limit": 3}, false},
		{contract.SubjectSearch, map[string]any{"session_id": "s1", "query": "(", "mode": "regex"}, true},
		{contract.SubjectExpand, map[string]any{"session_id": "s1", "from_seq": 2, "to_seq": 6, "limit": 2}, false},
		{contract.SubjectExpand, map[string]any{"session_id": "s1"}, true},
		{contract.SubjectReset, map[string]any{"session_id": "cb"}, false},
		{contract.SubjectReset, map[string]any{"all": true}, false},
		{contract.SubjectDelete, map[string]any{"session_id": "s1"}, false},
	}
	for i, c := range calls {
		name := chans[c.subject]
		body, _ := json.Marshal(c.body)
		if err := a.checkMessage(t, a.onlyMessage(t, name), nil, body); err != nil {
			t.Errorf("call %d: the request to %s does not fit the document: %v", i, c.subject, err)
		}
		m, err := nc.Request(c.subject, body, 60*time.Second)
		if err != nil {
			t.Fatalf("call %d: %s: %v", i, c.subject, err)
		}
		failed := m.Header.Get("Nats-Service-Error-Code") != ""
		if failed != c.fails {
			t.Errorf("call %d: %s answered %q %s, want failed=%v", i, c.subject, m.Header.Get("Nats-Service-Error-Code"), m.Data, c.fails)
		}
		// A success fits one of the operation's answers (the last is its
		// error), a failure the error.
		reply := a.operationOn(t, name)["reply"].(map[string]any)["messages"].([]any)
		answers := reply[:max(len(reply)-1, 1)]
		if failed {
			answers = reply[len(reply)-1:]
		}
		var errs []error
		for _, r := range answers {
			ptr := r.(map[string]any)["$ref"].(string)
			if err := a.checkMessage(t, ptr, m.Header, m.Data); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", ptr, err))
			}
		}
		if len(errs) == len(answers) {
			t.Errorf("call %d: the answer of %s fits none of its messages: %v\n%.300s", i, c.subject, errors.Join(errs...), m.Data)
		}
	}

	// Requests in both modes, as the document describes them, are
	// accepted; an invalid one is answered and dead-lettered.
	reqMsg := a.onlyMessage(t, chans[contract.OverBudgetPrefix+"{session_id}"])
	ev, _ := events.NewEvent("ev-bin", contract.TypeContextOverBudget, "urn:test", "s2", time.Now(), contract.RequestData{SessionID: "s2"})
	bh, bbody := events.EncodeBinary(ev)
	structured := []byte(`{"specversion":"1.0","id":"ev-st","source":"urn:test","type":"ContextOverBudget","data":{"session_id":"s2"}}`)
	invalid := nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"ev-bad"}, "ce-source": {"urn:test"}, "ce-type": {"ContextOverBudget"}}
	for _, r := range []struct {
		h    nats.Header
		body []byte
	}{{bh, bbody}, {nil, structured}} {
		if err := a.checkMessage(t, reqMsg, r.h, r.body); err != nil {
			t.Errorf("a request does not fit the document: %v", err)
		}
	}
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(context.Background(), "s2", client.NewSession{ContextLimit: 3000, Messages: turnsOf(chatJSON(40))}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*nats.Msg{{Subject: contract.OverBudgetPrefix + "s2", Header: bh, Data: bbody},
		{Subject: contract.OverBudgetPrefix + "s2", Data: structured},
		{Subject: contract.OverBudgetPrefix + "s3", Header: invalid, Data: []byte(`{"session_id":"s3","context_limit":"lots"}`)}} {
		if _, err := a.jsPublish(nc, r); err != nil {
			t.Fatal(err)
		}
	}

	types := map[string]int{}
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		mu.Lock()
		types = map[string]int{}
		for _, m := range seen {
			if strings.HasPrefix(m.Subject, contract.DLQPrefix) {
				types["DeadLetter"]++
			} else {
				types[m.Header.Get("ce-type")]++
			}
		}
		mu.Unlock()
		if types["DeadLetter"] >= 1 && types[contract.TypeCompactionCompleted] >= 3 && types[contract.TypeCompactionFailed] >= 2 &&
			types[contract.TypeCompactionCircuitOpened] >= 1 && types[contract.TypeCompactionCircuitClosed] >= 1 {
			return nil
		}
		return fmt.Errorf("events seen %v", types)
	})
	mu.Lock()
	defer mu.Unlock()
	for _, m := range seen {
		var name string
		for addr, ch := range chans {
			if p, ok := strings.CutSuffix(addr, "{session_id}"); ok && regexp.MustCompile("^"+regexp.QuoteMeta(p)+"[A-Za-z0-9_-]+$").MatchString(m.Subject) {
				name = ch
			}
		}
		if name == "" {
			t.Errorf("%s: no channel of the document", m.Subject)
			continue
		}
		if err := a.checkMessage(t, a.onlyMessage(t, name), m.Header, m.Data); err != nil {
			t.Errorf("%s (%s) does not fit the document: %v\n%v", m.Subject, m.Header.Get("ce-type"), err, m.Header)
		}
	}
}

func (a *asyncAPI) jsPublish(nc *nats.Conn, m *nats.Msg) (any, error) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	return nc.RequestMsg(m, 5*time.Second) // a JetStream publish ack
}

// brokenChat is a chat the stand-in model refuses to summarise.
func brokenChat(turns int) []map[string]any {
	out := chatJSON(turns)
	out[1]["content"] = "BROKEN " + out[1]["content"].(string)
	return out
}

func turnsOf(raw []map[string]any) []client.Message {
	b, _ := json.Marshal(raw)
	var out []client.Message
	_ = json.Unmarshal(b, &out)
	return out
}
