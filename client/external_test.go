package client_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// runtimeProgram is a runtime in another module: it imports the client as
// any Go runtime would and runs the loop against the service at NATS_URL.
const runtimeProgram = `package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/compactor/compactor/client"
	"github.com/nats-io/nats.go"
)

func main() {
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithSource("urn:example:external"))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const sid, limit = "ext-1", 2500
	if _, err := c.Create(ctx, client.CreateRequest{SessionID: sid, ContextLimit: limit,
		Messages: []client.Message{client.Text("sys", client.System, "You are a concise assistant.")}}); err != nil {
		panic(err)
	}
	out := map[string]any{}
	compactions := 0
	for i := range 70 {
		msgs := []client.Message{
			client.Text(fmt.Sprintf("u%d", i), client.User, fmt.Sprintf("Question %d: what does the error E%03d in the build log mean and how do I fix it?", i, i)),
			client.Text(fmt.Sprintf("a%d", i), client.Assistant, fmt.Sprintf("E%03d means a missing dependency; run the install step again, then rebuild module %d.", i, i)),
		}
		if _, err := c.Append(ctx, sid, msgs); err != nil {
			panic(err)
		}
		view, err := c.Context(ctx, sid)
		if err != nil {
			panic(err)
		}
		if view.Tokens <= limit {
			continue
		}
		res, err := c.Compact(ctx, client.CompactRequest{Data: client.RequestData{SessionID: sid, ContextLimit: limit}})
		if err != nil {
			panic(err)
		}
		if !res.OK() {
			panic(res.Failed.Error)
		}
		compactions++
	}
	view, err := c.Context(ctx, sid)
	if err != nil {
		panic(err)
	}
	out["compactions"], out["tokens"], out["summary"] = compactions, view.Tokens, view.Messages[1].IsCompaction
	json.NewEncoder(os.Stdout).Encode(out)
}
`

// A Go runtime outside this module imports the client (it could not while
// the client lived under internal/) and runs the runtime loop against an
// embedded server: create, append, context, compact.
func TestAnotherModuleRunsTheLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in another module")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/runtime\n\ngo 1.26\n\nrequire github.com/compactor/compactor v0.0.0\n\nreplace github.com/compactor/compactor => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"go.mod": gomod, "go.sum": string(sum), "main.go": runtimeProgram} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := startService(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "run", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NATS_URL="+svc.URL, "GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false", "GOSUMDB=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the external runtime: %v\n%s", err, stderr.String())
	}
	var got struct {
		Compactions int  `json:"compactions"`
		Tokens      int  `json:"tokens"`
		Summary     bool `json:"summary"`
	}
	if err := json.Unmarshal(out, &got); err != nil || got.Compactions == 0 || got.Tokens > 2500 || !got.Summary {
		t.Fatalf("the external runtime printed %q (%v)", out, err)
	}
}
