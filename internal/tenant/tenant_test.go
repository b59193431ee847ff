package tenant

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestSplitAndSubject(t *testing.T) {
	for _, c := range []struct {
		subject, name, rest string
		ok                  bool
	}{
		{"compactor.compact", Default, "compactor.compact", true},
		{"tenant.A.compactor.compact", "A", "compactor.compact", true},
		{"tenant.ACME-1_x.agent.context.over_budget.s1", "ACME-1_x", "agent.context.over_budget.s1", true},
		{"tenant._.compactor.compact", "", "", false}, // the default tenant has no prefix
		{"tenant.A", "", "", false},
		{"tenant.A.", "", "", false},
		{"tenant.*.compactor.compact", "", "", false},
	} {
		name, rest, ok := Split(c.subject)
		if name != c.name || rest != c.rest || ok != c.ok {
			t.Errorf("Split(%q) = %q %q %v, want %q %q %v", c.subject, name, rest, ok, c.name, c.rest, c.ok)
		}
		if ok && Subject(name, rest) != c.subject {
			t.Errorf("Subject(%q, %q) = %q, want %q", name, rest, Subject(name, rest), c.subject)
		}
	}
	if got := Wildcard("compactor.compact"); got != "tenant.*.compactor.compact" {
		t.Fatal(got)
	}
}

func TestContextTenant(t *testing.T) {
	ctx := context.Background()
	if From(ctx) != Default {
		t.Fatal("no tenant is the default tenant")
	}
	if From(With(ctx, "A")) != "A" {
		t.Fatal("With")
	}
}

// The subject's tenant must be the account the server says called; a
// request with no header came from within the compactor's account.
func TestVerify(t *testing.T) {
	if err := Verify("A", `{"acc":"A","rtt":1000}`); err != nil {
		t.Fatal(err)
	}
	if err := Verify("A", ""); err != nil {
		t.Fatal(err)
	}
	if err := Verify("A", `{"acc":"B","rtt":1000}`); err == nil {
		t.Fatal("B called for A")
	}
	if err := Verify(Default, `{"acc":"B"}`); err == nil {
		t.Fatal("an import reached the default tenant's subjects")
	}
	if name, rest, err := Of("tenant.A.compactor.compact", `{"acc":"A"}`); err != nil || name != "A" || rest != "compactor.compact" {
		t.Fatalf("Of: %q %q %v", name, rest, err)
	}
	if _, _, err := Of("tenant.A.compactor.compact", `{"acc":"B"}`); !errors.Is(err, ErrNotCaller) {
		t.Fatalf("B calling for A: %v", err)
	}
	if _, _, err := Of("tenant._.compactor.compact", ""); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("a bad tenant token: %v", err)
	}
	if c, ok := CallerOf(`{"acc":"A","user":"tenant-a"}`); !ok || c.User != "tenant-a" {
		t.Fatalf("%+v %v", c, ok)
	}
}

// A line logged with a tenant's context names the tenant; the default
// tenant's lines are as they were.
func TestLogHandler(t *testing.T) {
	var b strings.Builder
	log := slog.New(LogHandler{slog.NewTextHandler(&b, nil)}).With(slog.String("component", "x"))
	log.InfoContext(With(context.Background(), "A"), "compacted", slog.String("session_id", "s1"))
	log.InfoContext(context.Background(), "compacted", slog.String("session_id", "s2"))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "component=x session_id=s1 tenant=A") || strings.Contains(lines[1], "tenant=") {
		t.Fatalf("%q", lines)
	}
}
