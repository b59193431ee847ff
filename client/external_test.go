package client_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// exampleProgram turns example_test.go's Example into a program of its
// own: its imports, its body as main, and the output it promises.
func exampleProgram(t *testing.T) (program, want string) {
	t.Helper()
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	imports := s[strings.Index(s, "import ("):]
	imports = imports[:strings.Index(imports, "\n)\n")+3]
	if strings.Contains(imports, "/internal/") {
		t.Fatalf("the Example imports an internal package: a runtime cannot copy it\n%s", imports)
	}
	body := s[strings.Index(s, "func Example() {"):]
	body = body[:strings.Index(body, "\n}\n")+3]
	out := body[strings.Index(body, "\t// Output:\n")+len("\t// Output:\n"):]
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(out, "}\n"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, strings.TrimPrefix(strings.TrimPrefix(l, "//"), " "))
		}
	}
	return "package main\n\n" + imports + "\n" + strings.Replace(body, "func Example() {", "func main() {", 1), strings.Join(lines, "\n") + "\n"
}

// The Example, copied into a module outside this repository, builds
// against the client alone (its go.mod replaces the client's module with
// this checkout) and prints what it promises against a running service:
// a Go runtime can start from it.
func TestExampleRunsInAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in another module")
	}
	program, want := exampleProgram(t)
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
	for name, body := range map[string]string{"go.mod": gomod, "go.sum": string(sum), "main.go": program} {
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
		t.Fatalf("the Example as a program: %v\n%s\n%s", err, stderr.String(), program)
	}
	if string(out) != want {
		t.Fatalf("the Example as a program printed\n%s\nwant\n%s", out, want)
	}
}
