package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

const fixture = "../../testdata/tau-bench-airline-task2.json"

func TestCompactFile(t *testing.T) {
	// Flags before and after are both accepted.
	code, out, stderr := runCLI(t, "compact", "--context-limit", "6000", "--file", fixture, "--max-summary-tokens", "800")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		Result struct {
			Outcome      string `json:"outcome"`
			TokensBefore int    `json:"tokens_before"`
			TokensAfter  int    `json:"tokens_after"`
			Summary      int    `json:"summary_tokens"`
		} `json:"result"`
		Context []session.Message `json:"context"`
		Tokens  int               `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	cfg := pipeline.DefaultConfig()
	cfg.MaxSummaryTokens = 800
	if got.Result.Outcome != "compacted" || got.Result.TokensAfter > 6000 || got.Result.TokensAfter >= got.Result.TokensBefore || got.Result.Summary > cfg.MaxSummaryTokens {
		t.Fatalf("result: %+v", got.Result)
	}
	if got.Context[0].Role != session.RoleSystem || !got.Context[1].IsCompaction || got.Tokens != got.Result.TokensAfter {
		t.Fatalf("context: %d messages, %d tokens", len(got.Context), got.Tokens)
	}
}

func TestCompactFileNoop(t *testing.T) {
	code, out, _ := runCLI(t, "compact", "--file", fixture, "--max-messages", "0") // gpt-4o's window: fits
	if code != 0 || !strings.Contains(out, `"outcome": "noop"`) {
		t.Fatalf("exit %d: %s", code, out)
	}
}

func TestCompactFileErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`[{"role":"robot","content":"x"}]`), 0o644)
	empty := filepath.Join(t.TempDir(), "empty.json")
	os.WriteFile(empty, []byte(`[]`), 0o644)
	orphan := filepath.Join(t.TempDir(), "orphan.json")
	os.WriteFile(orphan, []byte(`[{"role":"system","content":"s"},{"role":"tool","tool_call_id":"call_nope","content":"x"}]`), 0o644)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no file", []string{"compact"}, 2, "give a stored session's ID, or --file FILE"},
		{"missing file", []string{"compact", "--file", "/nonexistent.json"}, 1, "no such file"},
		{"bad message", []string{"compact", "--file", bad}, 1, `role "robot"`},
		{"bad flag", []string{"compact", "--keep-recent-turns", "x"}, 2, "invalid value"},
		{"bad config", []string{"compact", "--file", fixture, "--max-summary-tokens", "5"}, 2, "max_summary_tokens"},
		{"bad trigger", []string{"compact", "--file", fixture, "--trigger", "soon"}, 2, "trigger"},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
		{"id and file", []string{"compact", "abc", "--file", fixture}, 2, "not both"},
		{"two ids", []string{"compact", "a", "b"}, 2, "one session ID"},
		{"bad id", []string{"compact", "a.b"}, 2, "session_id must be 1-200"},
		{"manual trigger by id", []string{"compact", "abc", "--trigger", "manual"}, 2, "over_budget or overflow"},
		{"session without verb", []string{"session"}, 2, "needs a verb"},
		{"session bad verb", []string{"session", "frob"}, 2, "unknown session verb"},
		{"import without file", []string{"session", "import"}, 2, "conversation FILE"},
		{"breaker show without id", []string{"breaker", "show"}, 2, "one session ID"},
		{"serve stray argument", []string{"serve", "x"}, 2, "unexpected argument"},
		{"serve bad log level", []string{"serve", "--log-level", "loud", "--nats-url", "nats://127.0.0.1:1"}, 2, "log-level"},
		{"no server", []string{"breaker", "list", "--nats-url", "nats://127.0.0.1:1"}, 1, "is `compactor serve` or nats-server running"},
		{"http url", []string{"breaker", "list", "--nats-url", "http://127.0.0.1:4222"}, 2, `"http" is not a NATS scheme`},
		{"serve http url", []string{"serve", "--nats-url", "nats://127.0.0.1:1,https://x:4222"}, 2, `"https" is not a NATS scheme`},
		{"import nothing", []string{"session", "import", empty, "--nats-url", "nats://127.0.0.1:1"}, 1, "holds no messages"},
		{"orphan tool result", []string{"compact", "--file", orphan}, 1, `call "call_nope" answers no call`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, tt.code, stderr, tt.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"compact", "--help"}} {
		code, out, _ := runCLI(t, args...)
		if code != 0 || !strings.Contains(out, "Usage: compactor") {
			t.Fatalf("%v: exit %d: %s", args, code, out)
		}
	}
}

func TestCompactFileConfig(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "compactor.json")
	os.WriteFile(conf, []byte(`{"compaction": {"max_summary_tokens": 300, "keep_recent_turns": 1}}`), 0o644)
	code, out, stderr := runCLI(t, "compact", "--config", conf, "--file", fixture, "--context-limit", "6000")
	if code != 0 || !strings.Contains(out, `"outcome": "compacted"`) {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		Result struct {
			SummaryTokens int `json:"summary_tokens"`
		} `json:"result"`
	}
	json.Unmarshal([]byte(out), &got)
	if got.Result.SummaryTokens > 300 || got.Result.SummaryTokens == 0 {
		t.Fatalf("the file's max_summary_tokens was not applied: %d", got.Result.SummaryTokens)
	}
	// A flag wins over the file.
	_, out, _ = runCLI(t, "compact", "--file", fixture, "--context-limit", "6000", "--config="+conf, "--max-summary-tokens", "150")
	json.Unmarshal([]byte(out), &got)
	if got.Result.SummaryTokens > 150 {
		t.Fatalf("the flag did not win: %d", got.Result.SummaryTokens)
	}
	t.Setenv("OPENAI_API_KEY", "")
	code, _, stderr = runCLI(t, "compact", "--file", fixture, "--provider", "openai")
	if code == 0 || !strings.Contains(stderr, "OPENAI_API_KEY") {
		t.Fatalf("a missing key must fail at start-up: exit %d, %s", code, stderr)
	}
}

func TestEval(t *testing.T) {
	var fx struct {
		Messages json.RawMessage `json:"messages"`
	}
	b, _ := os.ReadFile(fixture)
	json.Unmarshal(b, &fx)
	dir := t.TempDir()
	tau := filepath.Join(dir, "agent_trajectories", "tau-bench")
	os.MkdirAll(tau, 0o755)
	os.WriteFile(filepath.Join(tau, "runs.json"), []byte(`[{"task_id":2,"trial":1,"traj":`+string(fx.Messages)+`}]`), 0o644)
	code, out, stderr := runCLI(t, "eval", "replay", "--data", dir, "--limits", "6000", "--per-file")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 { // per file and overall, incremental and from scratch
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	var total struct {
		Sessions    int     `json:"sessions"`
		Compactions int     `json:"compactions"`
		Ratio       float64 `json:"input_over_floor"`
		HeadKept    float64 `json:"pinned_head_kept_share"`
	}
	json.Unmarshal([]byte(lines[1]), &total)
	if total.Sessions != 1 || total.Compactions == 0 || total.Ratio <= 0 || total.HeadKept != 1 {
		t.Fatalf("overall: %s", lines[1])
	}
	// --max-messages is the replay's message trigger: 0 leaves the token
	// limit alone (none reached here), 10 compacts.
	for _, c := range []struct {
		max  string
		some bool
	}{{"0", false}, {"10", true}} {
		code, out, stderr := runCLI(t, "eval", "replay", "--data", dir, "--limits", "1000000", "--mode", "scratch", "--max-messages", c.max)
		var got struct {
			Compactions int `json:"compactions"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || (got.Compactions > 0) != c.some {
			t.Fatalf("--max-messages %s: exit %d, %s %s", c.max, code, out, stderr)
		}
	}
	// Progress goes to stderr only when asked or on a terminal (a buffer
	// is not one), never to stdout.
	if strings.Contains(stderr, "eval: limit") {
		t.Fatalf("progress on a non-terminal: %q", stderr)
	}
	code, out2, stderr := runCLI(t, "eval", "replay", "--data", dir, "--limits", "6000", "--mode", "scratch", "--progress")
	if code != 0 || !strings.Contains(stderr, "eval: limit 6000, from scratch: 1/1") || strings.Contains(out2, "eval:") {
		t.Fatalf("--progress: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "eval", "replay", "--data", dir, "--limits", "x"); code != 2 || !strings.Contains(stderr, "limits") {
		t.Fatalf("bad limits: exit %d %s", code, stderr)
	}
	if code, _, _ := runCLI(t, "eval", "replay", "--data", t.TempDir()); code != 1 {
		t.Fatalf("empty data dir: exit %d", code)
	}
}

// eval drift: a line per limit and one for all, the goals met; a limit
// too large to compact three times misses them (exit 1), saying so.
func TestEvalDrift(t *testing.T) {
	code, out, stderr := runCLI(t, "eval", "drift", "--cases", "2", "--limits", "3000", "--per-file")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 4 || !strings.Contains(lines[3], `"goals_met":true`) || !strings.Contains(lines[3], `"cases":2`) {
		t.Fatalf("exit %d: %s\n%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "eval", "drift", "--cases", "1", "--limits", "100000")
	if code != 1 || !strings.Contains(stderr, "drift goals missed") || !strings.Contains(out, `"goals_met":false`) {
		t.Fatalf("a window too large to compact: exit %d: %s\n%s", code, out, stderr)
	}
	if code, _, stderr := runCLI(t, "eval", "drift", "--cases", "0"); code != 2 || !strings.Contains(stderr, "--cases") {
		t.Fatalf("no cases: exit %d %s", code, stderr)
	}
}

// eval's verbs take only their own flags; the first layout's mode flags
// (eval --drift) still run their verb, saying what it is now; flags with
// no verb are the replay's; no verb at all is a usage error.
func TestEvalVerbs(t *testing.T) {
	if code, out, _ := runCLI(t, "eval"); code != 2 || !strings.Contains(out, "compactor eval compare-prepared") {
		t.Fatalf("no verb: exit %d, %q", code, out)
	}
	if code, _, stderr := runCLI(t, "eval", "drift", "--trace", "x"); code != 2 || !strings.Contains(stderr, "-trace") {
		t.Fatalf("a flag of another verb: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "eval", "sideways"); code != 2 || !strings.Contains(stderr, `unknown eval verb "sideways"`) {
		t.Fatalf("an unknown verb: exit %d, %q", code, stderr)
	}
	for _, old := range [][]string{{"--drift", "--cases", "0"}, {"--cases=0", "-drift=true"}} {
		code, _, stderr := runCLI(t, append([]string{"eval"}, old...)...)
		if code != 2 || !strings.Contains(stderr, "--drift is now a verb: compactor eval drift") || !strings.Contains(stderr, "--cases must be at least 1") {
			t.Fatalf("%v: exit %d, %q", old, code, stderr)
		}
	}
	if code, _, stderr := runCLI(t, "eval", "--data", t.TempDir()); code != 1 || !strings.Contains(stderr, "no conversations found") {
		t.Fatalf("flags with no verb are the replay's: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "eval", "compare-prepared", "--limits", "4000,8000"); code != 2 || !strings.Contains(stderr, "compare-prepared takes one limit") {
		t.Fatalf("compare-prepared at two limits: exit %d, %q", code, stderr)
	}
}

// eval recall replays the data, searches for what the final contexts
// summarised and times searches through the endpoint: the JSON run on
// stdout, the Markdown in --out, exit 1 while a goal of issue 46 is
// missed (each missed one named).
func TestEvalRecall(t *testing.T) {
	data := filepath.Join("..", "..", "..", "shared", "data")
	if _, err := os.Stat(filepath.Join(data, "locomo")); err != nil {
		t.Skipf("skipping: %s is absent", data)
	}
	dir := t.TempDir()
	for _, sub := range []string{"locomo", filepath.Join("agent_trajectories", "swe-agent")} {
		abs, _ := filepath.Abs(filepath.Join(data, sub))
		os.MkdirAll(filepath.Dir(filepath.Join(dir, sub)), 0o755)
		if err := os.Symlink(abs, filepath.Join(dir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	md := filepath.Join(dir, "RECALL.md")
	code, out, stderr := runCLI(t, "eval", "recall", "--quick", "--queries", "5", "--data", dir, "--out", md)
	var run struct {
		LoCoMo struct {
			Questions int         `json:"questions"`
			Evidence  int         `json:"summarised_evidence"`
			Found     map[int]int `json:"found"`
		} `json:"locomo"`
		Latency []struct {
			Messages int     `json:"messages"`
			P95      float64 `json:"p95_ms"`
			Bytes    float64 `json:"index_bytes_per_message"`
		} `json:"latency"`
	}
	if err := json.Unmarshal([]byte(out), &run); err != nil {
		t.Fatalf("exit %d, output %q: %v\n%s", code, out, err, stderr)
	}
	l := run.LoCoMo
	if l.Questions == 0 || l.Evidence == 0 || l.Found[5] == 0 || l.Found[5] > l.Found[10] || l.Found[10] > l.Evidence || len(run.Latency) != 2 || run.Latency[1].Messages != 2000 ||
		run.Latency[1].P95 <= 0 || run.Latency[1].Bytes <= 0 {
		t.Fatalf("run %+v", run)
	}
	doc, err := os.ReadFile(md)
	if err != nil || !strings.Contains(string(doc), "## LoCoMo evidence") || !strings.Contains(string(doc), "## Against the goals") {
		t.Fatalf("the Markdown: %v\n%s", err, doc)
	}
	if strings.Contains(string(doc), "**missed**") != (code == 1) || code == 1 && !strings.Contains(stderr, "recall goals missed") {
		t.Fatalf("exit %d with the goals %s", code, doc)
	}
}
