package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/config"
)

func write(t *testing.T, s string) string {
	p := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(p, []byte(s), 0o644)
	return p
}

func TestLoad(t *testing.T) {
	p := write(t, `{"compaction": {"keep_recent_turns": 2, "max_summary_tokens": 600}, "provider": "openai",
		"base_url": "http://127.0.0.1:8000/v1", "timeout": "90s",
		"models": [{"name": "qwen2.5-7b-instruct", "context_window": 32768, "encoding": "cl100k_base", "provider": "openai"}],
		"tenants": {"TENANT_A": {"summary_model": "gpt-4o-mini", "summary_context_limit": 64000, "requests_per_second": 5, "requests_burst": 10}, "_": {"summary_model": "gpt-4.1-mini"}}}`)
	l, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if l.Compaction.KeepRecentTurns != 2 || l.Compaction.MaxSummaryTokens != 600 || l.Compaction.MaxMessages != 50 || !l.Compaction.EnableIncremental {
		t.Fatalf("compaction %+v", l.Compaction)
	}
	if l.Provider != "openai" || l.BaseURL != "http://127.0.0.1:8000/v1" || l.Timeout != 90*time.Second {
		t.Fatalf("provider settings %+v", l)
	}
	if m := l.Models.Lookup("qwen2.5-7b-instruct"); m.ContextWindow != 32768 || !m.Known {
		t.Fatalf("model %+v", m)
	}
	if a := l.Tenants["TENANT_A"]; a.SummaryModel != "gpt-4o-mini" || a.SummaryContextLimit != 64000 || l.Tenants["_"].SummaryModel != "gpt-4.1-mini" {
		t.Fatalf("tenants %+v", l.Tenants)
	}
	if lim := l.Limits()["TENANT_A"]; lim.RequestsPerSecond != 5 || lim.RequestsBurst != 10 || l.Policies()["_"].SummaryModel != "gpt-4.1-mini" {
		t.Fatalf("limits %+v, policies %+v", l.Limits(), l.Policies())
	}
}

func TestLoadErrors(t *testing.T) {
	for name, body := range map[string]string{
		"unknown field":      `{"providr": "openai"}`,
		"unknown compaction": `{"compaction": {"keep_turns": 2}}`,
		"invalid compaction": `{"compaction": {"max_summary_tokens": 5}}`,
		"bad model":          `{"models": [{"name": "x", "context_window": 0, "encoding": "o200k_base"}]}`,
		"bad timeout":        `{"timeout": "soon"}`,
		"bad tenant name":    `{"tenants": {"tenant.a": {"summary_model": "gpt-4o"}}}`,
		"bad tenant limit":   `{"tenants": {"A": {"summary_context_limit": -1}}}`,
		"bad tenant rate":    `{"tenants": {"A": {"requests_per_second": -2}}}`,
		"bad tenant field":   `{"tenants": {"A": {"summary_modle": "gpt-4o"}}}`,
		"not json":           `provider = openai`,
		"yaml":               "compaction:\n  keep_recent_turns: 3\nprovider: openai\n",
	} {
		if _, err := config.Load(write(t, body)); err == nil || !strings.Contains(err.Error(), "c.json") && name != "bad timeout" {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A YAML file is told it must be JSON, not given a parser's byte offset.
	if _, err := config.Load(write(t, "provider: openai\n")); err == nil || !strings.Contains(err.Error(), "the config file is JSON") {
		t.Errorf("yaml: %v", err)
	}
	// A removed field says what replaced it.
	if _, err := config.Load(write(t, `{"compaction": {"ledger_window_share": 0.1}}`)); err == nil || !strings.Contains(err.Error(), "max_summary_tokens bounds the whole compaction message") {
		t.Errorf("removed field: %v", err)
	}
}
