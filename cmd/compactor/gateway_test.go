package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayUsage: a keys file that does not say whose users its keys
// are is refused before anything runs, saying what it wants.
func TestGatewayUsage(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ file, want string }{
		{`{"keys": "k"}`, `want {"keys": {"KEY"`},
		{`{"keys": {}}`, `want {"keys": {"KEY"`},
		{`{"keys": {"k1": {"nats_password": "p"}}}`, "a key without nats_user or nats_creds"},
	} {
		path := filepath.Join(dir, "keys.json")
		if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runCLI(t, "gateway", "--keys", path, "--nats-url", "nats://127.0.0.1:1")
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, %s (want 2 and %q)", c.file, code, stderr, c.want)
		}
	}
	if code, _, stderr := runCLI(t, "standin", "--steps", "3", "--tool-args", "{"); code != 2 || !strings.Contains(stderr, "--tool-args is not JSON") {
		t.Errorf("standin --tool-args {: exit %d, %s", code, stderr)
	}
}
