package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/pipeline"
)

// internalKeys are what the service's answers carry for itself, not for a
// runtime: the record's incarnation and write state.
var internalKeys = map[string]bool{"epoch": true, "create_digest": true, "pending": true, "deleted": true}

// covers checks that the client's type v reads every key of the
// service's raw answer, with the same value: decoded into v and written
// back, nothing the service said is lost or changed.
func covers(t *testing.T, what string, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: the client's %T does not read the service's answer: %v\n%s", what, v, err, raw)
	}
	back, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	for _, x := range []struct {
		b []byte
		v *any
	}{{raw, &want}, {back, &got}} {
		d := json.NewDecoder(bytes.NewReader(x.b))
		d.UseNumber()
		if err := d.Decode(x.v); err != nil {
			t.Fatal(err)
		}
	}
	var missing []string
	var walk func(path string, w, g any)
	walk = func(path string, w, g any) {
		switch wv := w.(type) {
		case map[string]any:
			gv, _ := g.(map[string]any)
			for k, x := range wv {
				if internalKeys[k] {
					continue
				}
				y, ok := gv[k]
				if !ok {
					missing = append(missing, path+"."+k)
					continue
				}
				walk(path+"."+k, x, y)
			}
		case []any:
			gv, _ := g.([]any)
			if len(gv) != len(wv) {
				missing = append(missing, fmt.Sprintf("%s (%d items, read %d)", path, len(wv), len(gv)))
				return
			}
			for i := range wv {
				walk(fmt.Sprintf("%s[%d]", path, i), wv[i], gv[i])
			}
		default:
			if !reflect.DeepEqual(w, g) {
				missing = append(missing, fmt.Sprintf("%s (%v, read %v)", path, w, g))
			}
		}
	}
	walk(what, want, got)
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the client's %T loses what the service said:\n  %s", v, strings.Join(missing, "\n  "))
	}
}

// The client's contract types are its own, but read every field of the
// service's answers and events: each raw answer of a session's life
// (create, append, a compaction, the context, the history with a
// prepared compaction, the breaker) and each event (completed, failed,
// circuit opened) decoded into the client's type loses nothing.
func TestContractTypesReadTheService(t *testing.T) {
	for _, broken := range []bool{false, true} {
		var sum pipeline.Summarizer
		if broken {
			sum = brokenModel{}
		}
		nc, _ := natstest.ConnectURL(t, serviceURL(t, sum))
		c, err := client.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		raw := func(subject string, body any) []byte {
			t.Helper()
			b, _ := json.Marshal(body)
			m, err := nc.Request(subject, b, 30*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", subject, err)
			}
			return m.Data
		}
		ctx := context.Background()
		published := subscribeAll(t, nc)
		sid := fmt.Sprintf("contract-%v", broken)
		msgs := append([]client.Message{client.Text("sys", client.System, "You are a booking agent.")}, turns(0, 30)...)
		covers(t, "create", raw(contract.SubjectCreate, map[string]any{"session_id": sid, "context_limit": 1500, "messages": msgs}), &client.Created{})
		covers(t, "append", raw(contract.SubjectAppend, map[string]any{"session_id": sid, "messages": turns(30, 2)}), &client.Appended{})
		if broken {
			if _, err := c.Compact(ctx, sid, client.CompactRequest{RequestID: "r-fail"}); err == nil {
				t.Fatal("the broken model compacted")
			}
			covers(t, "CompactionFailed", published.data(t, contract.TypeCompactionFailed), &client.Failed{})
			covers(t, "CompactionCircuitOpened", published.data(t, contract.TypeCompactionCircuitOpened), &client.CircuitOpened{})
			covers(t, "breaker", raw(contract.SubjectBreaker, map[string]any{"session_id": sid}), &client.Breaker{})
			continue
		}
		covers(t, "compactor.compact", raw(contract.SubjectCompact, map[string]any{"session_id": sid, "request_id": "r-sync"}), &client.Completed{})
		covers(t, "CompactionCompleted", published.data(t, contract.TypeCompactionCompleted), &client.Completed{})
		covers(t, "context", raw(contract.SubjectContext, map[string]any{"session_id": sid}), &client.ContextView{})
		covers(t, "history", raw(contract.SubjectHistory, map[string]any{"session_id": sid}), &client.History{})
		// A session at 80 % of its limit and a near-budget event: a
		// prepared compaction, which the history shows.
		long := append(msgs[:1:1], turns(0, 100)...)
		created, err := c.Create(ctx, "prep-probe", client.NewSession{Messages: long})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Create(ctx, "prep", client.NewSession{ContextLimit: created.Tokens * 10 / 8, Messages: long}); err != nil {
			t.Fatal(err)
		}
		if err := c.NearBudget(ctx, "prep", client.CompactRequest{}); err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
			h, err := c.History(ctx, "prep")
			if err != nil || len(h.Prepared) != 1 || h.Prepared[0].State != "ready" {
				return fmt.Errorf("no ready preparation: %+v %v", h.Prepared, err)
			}
			return nil
		})
		covers(t, "history with a prepared compaction", raw(contract.SubjectHistory, map[string]any{"session_id": "prep"}), &client.History{})
		covers(t, "breaker", raw(contract.SubjectBreaker, map[string]any{"session_id": sid}), &client.Breaker{})
		covers(t, "delete", raw(contract.SubjectDelete, map[string]any{"session_id": sid}), &client.Deleted{})
	}
}

// resultEvents holds the data of the events published, by type.
type resultEvents struct {
	ch   chan *nats.Msg
	seen map[string][]byte
}

func subscribeAll(t *testing.T, nc *nats.Conn) *resultEvents {
	t.Helper()
	r := &resultEvents{ch: make(chan *nats.Msg, 64), seen: map[string][]byte{}}
	sub, err := nc.ChanSubscribe("compaction.>", r.ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *resultEvents) data(t *testing.T, typ string) []byte {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if d, ok := r.seen[typ]; ok {
			return d
		}
		select {
		case m := <-r.ch:
			if ev, err := events.DecodeEvent(m.Header, m.Data); err == nil {
				r.seen[ev.Type()] = ev.Data()
			}
		case <-deadline:
			t.Fatalf("no %s event", typ)
		}
	}
}

// The public API names no internal type: go doc shows every type of the
// contract with its fields (an alias of an internal type showed none).
func TestGoDocShowsTheContract(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go doc")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "doc", "-all", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go doc: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "compactor/internal/") || regexp.MustCompile(`(?m)^\s*type \w+ = `).Match(out) {
		t.Fatalf("the client's API names an internal package or aliases a type:\n%s", out)
	}
	for typ, field := range map[string]string{"Completed": "TokensAfter", "Failed": "Reason", "Message": "ToolCalls", "ContextView": "Messages",
		"History": "Prepared", "Created": "Tokens", "Appended": "HeadSeq", "Breaker": "LastError", "CircuitOpened": "OpenedAt", "Compaction": "LedgerBullets"} {
		out, err := exec.Command(gobin, "doc", ".", typ).CombinedOutput()
		if err != nil || !regexp.MustCompile(`(?m)^\s+`+field+`\s`).Match(out) {
			t.Errorf("go doc client.%s does not show its field %s: %v\n%s", typ, field, err, out)
		}
	}
}

// Issue 44: the client carries the contract and nats.go, nothing of the
// service: no internal package, at most 8 modules (nats.go's own, uuid,
// the compactor's).
func TestClientCarriesTheContractOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	modules := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, mod, _ := strings.Cut(line, " ")
		if strings.Contains(pkg, "/internal/") && strings.HasPrefix(pkg, "github.com/compactor/compactor/") {
			t.Errorf("the client imports %s", pkg)
		}
		if mod != "" {
			modules[mod] = true
		}
	}
	if len(modules) > 8 {
		t.Fatalf("the client carries %d modules, want at most 8: %v", len(modules), modules)
	}
}

// Issue 42: the client documented strategies the service never sends
// ("summarise", "clear_tool_results"). The client's strategies, the
// service's and the schema's enum are one list.
func TestStrategiesAreTheService(t *testing.T) {
	raw, err := os.ReadFile("../schemas/compaction_completed.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Strategy struct {
				Enum []string `json:"enum"`
			} `json:"strategy"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	want := schema.Properties.Strategy.Enum
	if !reflect.DeepEqual(client.Strategies, want) || !reflect.DeepEqual(pipeline.Strategies, want) {
		t.Fatalf("strategies: client %v, service %v, schema %v", client.Strategies, pipeline.Strategies, want)
	}
}

// Issue 42: nothing could be pinned (the binary said v0.0.0-dev, the
// TypeScript package 0.1.0, the contract 0.4). One version names a
// release: the VERSION file, the Go client's, the contract document's and
// the TypeScript package's, and CHANGELOG.md says what it changed.
func TestOneVersion(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if v := strings.TrimSpace(read("../VERSION")); v != client.Version {
		t.Fatalf("VERSION %s, client.Version %s", v, client.Version)
	}
	if !strings.Contains(read("../schemas/asyncapi.yaml"), "\n  version: "+client.Version+"\n") {
		t.Fatalf("schemas/asyncapi.yaml's info.version is not %s", client.Version)
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal([]byte(read("../clients/typescript/package.json")), &pkg); err != nil || pkg.Version != client.Version {
		t.Fatalf("the TypeScript package's version %q (%v), want %s", pkg.Version, err, client.Version)
	}
	if !strings.Contains(read("../CHANGELOG.md"), "## "+client.Version) {
		t.Fatalf("CHANGELOG.md has no section for %s", client.Version)
	}
}
