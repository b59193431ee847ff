package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/ARCHITECTURE.md has a row for every package `go list ./...` names,
// and names none that is gone (issue 44: the layout table missed five).
func TestLayoutNamesEveryPackage(t *testing.T) {
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	b, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	cell := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line[1:], "|", 2)[0]
		for _, m := range cell.FindAllStringSubmatch(first, -1) {
			rows[strings.TrimSuffix(m[1], "/")] = true
		}
	}
	const module = "github.com/compactor/compactor"
	listed := map[string]bool{}
	if len(strings.Fields(string(out))) < 30 {
		t.Fatalf("go list named only %s", out)
	}
	for _, p := range strings.Fields(string(out)) {
		p = strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if p == "" {
			continue
		}
		listed[p] = true
		if !rows[p] {
			t.Errorf("docs/ARCHITECTURE.md has no row for %s", p)
		}
	}
	for r := range rows {
		if strings.Contains(r, ".") || strings.HasPrefix(r, "clients/") {
			continue // a file (Dockerfile, compose.yaml) or the TypeScript client
		}
		if _, err := os.Stat(filepath.Join("../..", r)); err != nil && !listed[r] {
			t.Errorf("docs/ARCHITECTURE.md names %s, which is not in the tree", r)
		}
	}
}

// Every relative link of the README and the documents leads to a file
// that is there (the README was split into docs/ by reader).
func TestDocumentLinksResolve(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md", "../../CHANGELOG.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s, which is not there", strings.TrimPrefix(f, "../../"), m[1])
			}
		}
	}
}

// moduleImports is what each of the module's packages imports (tests
// aside), by go list.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], module) {
			imports[f[0]] = f[1:]
		}
	}
	if len(imports) < 30 {
		t.Fatalf("go list named only %d of the module's packages", len(imports))
	}
	return imports
}

const module = "github.com/compactor/compactor"

// Issue 44: the service's packages use OpenTelemetry's API; its SDK and
// the OTLP exporters (with gRPC) are internal/telemetry/otlp's, which only
// this command imports.
func TestOnlyServeCarriesTheTelemetrySDK(t *testing.T) {
	for pkg, imps := range moduleImports(t) {
		for _, imp := range imps {
			sdk := strings.HasPrefix(imp, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(imp, "go.opentelemetry.io/otel/exporters")
			if sdk && pkg != module+"/internal/telemetry/otlp" {
				t.Errorf("%s imports %s: only internal/telemetry/otlp carries the SDK", pkg, imp)
			}
			if imp == module+"/internal/telemetry/otlp" && pkg != module+"/cmd/compactor" {
				t.Errorf("%s imports internal/telemetry/otlp: only the command sets the SDK up", pkg)
			}
		}
	}
}

// Issue 44: the harnesses that measure (eval, bench, chaos) live under
// internal/harness, and nothing the service runs imports them: only the
// command (its eval, bench and chaos commands) and the harnesses
// themselves do.
func TestTheHarnessesHaveOneHome(t *testing.T) {
	const harness = module + "/internal/harness/"
	imports := moduleImports(t)
	for pkg, imps := range imports {
		for _, imp := range imps {
			if strings.HasPrefix(imp, harness) && pkg != module+"/cmd/compactor" && !strings.HasPrefix(pkg, harness) {
				t.Errorf("%s imports %s: only the command and the harnesses import a harness", pkg, imp)
			}
		}
	}
	for _, h := range []string{"eval", "bench", "chaos"} {
		if _, ok := imports[harness+h]; !ok {
			t.Errorf("no package %s%s", harness, h)
		}
	}
}

// Issue 44: no function of the module (tests aside) runs over 80 lines:
// a long one is split into the steps it takes.
func TestNoFunctionOver80Lines(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			checked++
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > 80 {
				t.Errorf("%s: %s is %d lines, over 80: split it into its steps", p, fd.Name.Name, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 1000 {
		t.Fatalf("only %d functions checked", checked)
	}
}
