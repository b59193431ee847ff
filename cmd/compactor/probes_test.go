package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/fakeprovider"
)

// eval probes with a model through --provider: the local OpenAI-compatible
// stand-in answers summaries that name no file, no error and no
// instruction. Over real HTTP, the compacted contexts still name every file,
// error and instruction of the SWE-agent and OpenHands runs, and most
// commands (the ledger), and no instruction is invented.
func TestEvalProbesWithAForgetfulModel(t *testing.T) {
	data := filepath.Join("..", "..", "..", "shared", "data", "agent_trajectories")
	if _, err := os.Stat(data); err != nil {
		t.Skipf("skipping: %s is absent", data)
	}
	dir := t.TempDir()
	for _, set := range []string{"swe-agent", "openhands"} {
		abs, _ := filepath.Abs(filepath.Join(data, set))
		os.MkdirAll(filepath.Join(dir, "agent_trajectories"), 0o755)
		if err := os.Symlink(abs, filepath.Join(dir, "agent_trajectories", set)); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := fakeprovider.Start(func(string) fakeprovider.Action { return fakeprovider.Action{} })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	t.Setenv("OPENAI_API_KEY", "sk-test")
	code, out, stderr := runCLI(t, "eval", "probes", "--data", dir, "--limits", "3000", "--max-messages", "0",
		"--provider", "openai", "--base-url", srv.URL, "--summary-model", "gpt-4o-mini")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var all struct {
		Source      string `json:"source"`
		Compactions int    `json:"compactions"`
		Scores      map[string]struct {
			Checks int `json:"checks"`
			Kept   int `json:"kept"`
		} `json:"scores"`
		Invented int `json:"invented_instructions"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &all); err != nil || all.Source != "all" {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	if calls, _, _, _ := srv.Stats(); calls == 0 || all.Compactions == 0 {
		t.Fatalf("%d model calls, %d compactions", calls, all.Compactions)
	}
	for _, kind := range []string{"files", "errors", "instructions"} {
		if s := all.Scores[kind]; s.Checks == 0 || s.Kept != s.Checks {
			t.Errorf("%s: %d of %d kept", kind, s.Kept, s.Checks)
		}
	}
	// Commands are the first thing the ledger cuts when its share of the
	// budget is short (at 3,000 tokens it is).
	if s := all.Scores["commands"]; s.Checks == 0 || float64(s.Kept) < 0.8*float64(s.Checks) {
		t.Errorf("commands: %d of %d kept", s.Kept, s.Checks)
	}
	if all.Invented != 0 {
		t.Errorf("%d invented instructions", all.Invented)
	}
}
