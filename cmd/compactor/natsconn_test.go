package main

import (
	"strings"
	"testing"
)

// --nats-url may name a cluster's nodes, comma-separated (as compose.yaml
// does): a command connects through any of them, and an error never shows
// a password, whichever node it names.
func TestNATSURLList(t *testing.T) {
	as := natsConfServer(t)
	good := as("admin")
	// The first node is down; the second answers.
	list := "nats://admin:admin-secret@127.0.0.1:1," + good
	if code, _, stderr := runCLI(t, "provision", "--nats-url", list); code != 0 {
		t.Fatalf("provision through a list: %d %s", code, stderr)
	}
	code, _, stderr := runCLI(t, "session", "list", "--nats-url", "nats://admin:admin-secret@127.0.0.1:1,nats://admin:admin-secret@127.0.0.1:2")
	if code == 0 || strings.Contains(stderr, "admin-secret") || !strings.Contains(stderr, "admin:xxxxx@127.0.0.1:1") || !strings.Contains(stderr, "admin:xxxxx@127.0.0.1:2") {
		t.Fatalf("no node: %d %q", code, stderr)
	}
	for in, want := range map[string]string{
		"nats://a:pw@h1:4222,nats://a:pw@h2:4222": "nats://a:xxxxx@h1:4222,nats://a:xxxxx@h2:4222",
		"nats://h1:4222, tls://b:pw@h2:4222":      "nats://h1:4222,tls://b:xxxxx@h2:4222",
		"nats://a:p%zz@h1:4222":                   "nats://xxxxx@h1:4222",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
