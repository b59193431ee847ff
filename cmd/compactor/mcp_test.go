package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/mcpserver"
)

// mcpSession connects the MCP project's Go client to `compactor mcp` run
// as a child process over stdio, as an agent CLI does.
func mcpSession(t *testing.T, args ...string) *mcp.ClientSession {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), "COMPACTOR_TEST_RUN_MAIN=1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// callText calls a tool and answers its text and whether it was an error.
func callText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	return strings.Join(texts, "\n"), res.IsError
}

// `compactor mcp` with a tenant's credentials, over stdio, through the
// MCP project's client: it lists the two recall tools with their one
// definition, finds and expands what the tenant's compaction summarised,
// tells the model what it got wrong, and never reaches another tenant's
// session of the same id.
func TestMCPServerScopedToItsTenant(t *testing.T) {
	as := natsConfServer(t)
	if code := cli(t, as("admin"), nil, "provision"); code != 0 {
		t.Fatal("admin could not provision")
	}
	startServe(t, as("admin"), "--nats-url", as("compactor"))
	a, b := connectAs(t, as("tenant-a")), connectAs(t, as("tenant-b"))
	msgs, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    *roleConn
		body string
	}{
		{a, fmt.Sprintf(`{"session_id":"same","context_limit":6000,"messages":%s}`, msgs)},
		{b, `{"session_id":"same","model":"gpt-4o","messages":[{"role":"user","content":"tenant B's secret: the vault code is 4711"}]}`},
	} {
		m, err := c.r.nc.Request(contract.SubjectCreate, []byte(c.body), 30*time.Second)
		if err != nil || m.Header.Get(contract.HeaderErrorCode) != "" {
			t.Fatalf("create: %v %s", err, m.Data)
		}
	}
	var res map[string]any
	if code := cli(t, as("tenant-a"), &res, "compact", "same", "--timeout", "30s"); code != 0 || res["outcome"] != "compacted" {
		t.Fatalf("A's compact: exit %d %v", code, res)
	}

	cs := mcpSession(t, "--session", "same", "--nats-url", as("tenant-a"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Equal(names, []string{contract.ToolExpandHistory, contract.ToolSearchHistory}) && !slices.Equal(names, []string{contract.ToolSearchHistory, contract.ToolExpandHistory}) {
		t.Fatalf("tools %v", names)
	}
	found, isErr := callText(t, cs, contract.ToolSearchHistory, map[string]any{"query": "economy downgrade reservation", "states": []string{"summarised"}})
	if isErr || !strings.Contains(found, "summarised (expand_history compaction_id=") || strings.Contains(found, "vault") {
		t.Fatalf("search_history: %s", found)
	}
	id := found[strings.Index(found, "compaction_id=")+len("compaction_id=") : strings.Index(found, "compaction_id=")+len("compaction_id=")+36]
	orig, isErr := callText(t, cs, contract.ToolExpandHistory, map[string]any{"compaction_id": id})
	if isErr || !strings.Contains(orig, "#2 ") || !strings.Contains(orig, "[summarised]") {
		t.Fatalf("expand_history %s: %.600s", id, orig)
	}
	if msg, isErr := callText(t, cs, contract.ToolSearchHistory, map[string]any{"query": "(", "mode": "regex"}); !isErr || !strings.Contains(msg, "refused") {
		t.Fatalf("a bad expression: %v %s", isErr, msg)
	}
	if msg, isErr := callText(t, cs, contract.ToolSearchHistory, map[string]any{"query": "vault code 4711"}); isErr || strings.Contains(msg, "the vault code is 4711") {
		t.Fatalf("tenant A read tenant B's message: %s", msg)
	}
	theirs := mcpSession(t, "--session", "same", "--nats-url", as("tenant-b"))
	if msg, isErr := callText(t, theirs, contract.ToolSearchHistory, map[string]any{"query": "vault code"}); isErr || !strings.Contains(msg, "the vault code is 4711") || strings.Contains(msg, "reservation") {
		t.Fatalf("tenant B's own search: %s", msg)
	}
}

// Over streamable HTTP: /mcp/{session_id} picks the session; one that is
// not a session id is refused.
func TestMCPServerOverHTTP(t *testing.T) {
	r := fakeRunner{}
	srv := httptest.NewServer(mcpserver.Handler(r, "", "test"))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp/s-42"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if text, isErr := callText(t, cs, contract.ToolSearchHistory, map[string]any{"query": "x"}); isErr || text != "s-42 search_history {\"query\":\"x\"}" {
		t.Fatalf("answered %q", text)
	}
	if _, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp/not%20an%20id", MaxRetries: -1}, nil); err == nil {
		t.Fatal("a path that names no session id was served")
	}
}

type fakeRunner struct{}

func (fakeRunner) RunTool(_ context.Context, sid, name string, args json.RawMessage) (string, error) {
	return sid + " " + name + " " + string(args), nil
}
