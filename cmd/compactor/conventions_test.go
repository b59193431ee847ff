package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"github.com/compactor/compactor/client"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/compactor/compactor/internal/natstest"
)

// Flags win over the environment, the environment over the config file.
func TestEnvironment(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(cfg, []byte(`{"compaction":{"keep_recent_turns":9,"max_summary_tokens":700}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) (*serveFlags, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		sf, err := addServeFlags(fs, args)
		if err != nil {
			return nil, err
		}
		_, err = parseFlags(fs, args, io.Discard, "serve")
		return sf, err
	}
	t.Setenv("COMPACTOR_CONFIG", cfg)
	t.Setenv("COMPACTOR_KEEP_RECENT_TURNS", "7")
	t.Setenv("NATS_URL", "nats://nats.example:4222")
	t.Setenv("COMPACTOR_WORKERS", "12")
	sf, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if sf.pf.cfg.KeepRecentTurns != 7 || sf.pf.cfg.MaxSummaryTokens != 700 || *sf.nats.url != "nats://nats.example:4222" || *sf.workers != 12 {
		t.Fatalf("env over file: keep %d, summary %d, url %s, workers %d", sf.pf.cfg.KeepRecentTurns, sf.pf.cfg.MaxSummaryTokens, *sf.nats.url, *sf.workers)
	}
	sf, err = parse("--keep-recent-turns", "5", "--nats-url", "nats://flag:4222")
	if err != nil || sf.pf.cfg.KeepRecentTurns != 5 || *sf.nats.url != "nats://flag:4222" {
		t.Fatalf("flags over env: %v", err)
	}
	t.Setenv("COMPACTOR_NATS_URL", "nats://compactor-env:4222")
	if sf, err = parse(); err != nil || *sf.nats.url != "nats://compactor-env:4222" {
		t.Fatalf("COMPACTOR_NATS_URL over NATS_URL: %v", err)
	}
	t.Setenv("COMPACTOR_WORKERS", "many")
	if _, err := parse(); err == nil || !strings.Contains(err.Error(), "COMPACTOR_WORKERS") {
		t.Fatalf("a bad value: %v", err)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, _ := runCLI(t, args...)
		if code != 0 || !strings.HasPrefix(out, "compactor v") || !strings.Contains(out, "go1.") {
			t.Fatalf("%v: exit %d %q", args, code, out)
		}
	}
	if v := semver(); !semverRE.MatchString(v) {
		t.Fatalf("micro version %q is not SemVer", v)
	}
	old := version
	defer func() { version = old }()
	for stamped, want := range map[string]string{"v1.4.0": "1.4.0", "v0.3.0-5-gabc1234-dirty": "0.3.0-5-gabc1234-dirty", "abc1234": client.Version + "-dev"} {
		version = stamped
		if got := semver(); got != want {
			t.Errorf("stamped %q: micro version %q, want %q", stamped, got, want)
		}
	}
}

// A NATS server that speaks only TLS and verifies its clients: the CLI and
// the service connect with --tls-ca, --tls-cert and --tls-key; without the
// CA the error says to check TLS.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, dir, "ca", nil, nil)
	newCert(t, dir, "server", ca, caKey)
	newCert(t, dir, "client", ca, caKey)
	f := func(n string) string { return filepath.Join(dir, n) }
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: f("server.pem"), KeyFile: f("server-key.pem"), CaFile: f("ca.pem"), Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.ServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		TLSConfig: tc, TLSVerify: true, TLSTimeout: 5})
	url := "tls://127.0.0.1:" + itoa(srv.Addr().(*net.TCPAddr).Port)
	tlsArgs := []string{"--tls-ca", f("ca.pem"), "--tls-cert", f("client.pem"), "--tls-key", f("client-key.pem")}

	if code, _, stderr := runCLI(t, append([]string{"provision", "--nats-url", url}, tlsArgs...)...); code != 0 {
		t.Fatalf("provision over TLS: %s", stderr)
	}
	code, _, stderr := runCLI(t, "provision", "--nats-url", url)
	if code != 1 || !strings.Contains(stderr, "--tls-ca") {
		t.Fatalf("without the CA: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "provision", "--nats-url", url, "--tls-cert", f("client.pem")); code != 2 || !strings.Contains(stderr, "go together") {
		t.Fatalf("a certificate without its key: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "provision", "--nats-url", url, "--tls-ca", f("nope.pem")); code != 2 || !strings.Contains(stderr, "--tls-ca") {
		t.Fatalf("a missing CA file: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, append([]string{"session", "import", fixture, "--session-id", "t1", "--nats-url", url}, tlsArgs...)...); code != 0 {
		t.Fatalf("import over TLS: %s", stderr)
	}
	// The service over TLS answers a compaction.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logs := &natstest.LogBuffer{}
	go func() {
		done <- run(ctx, append([]string{"serve", "--metrics-addr", "", "--nats-url", url}, tlsArgs...), io.Discard, logs)
	}()
	defer func() { cancel(); <-done }()
	natstest.Eventually(t, 20*time.Second, 100*time.Millisecond, func() error {
		var res map[string]any
		code, out, stderr := runCLI(t, append([]string{"compact", "t1", "--context-limit", "3000", "--timeout", "20s", "--nats-url", url}, tlsArgs...)...)
		if code == 0 && json.Unmarshal([]byte(out), &res) == nil && res["outcome"] == "compacted" {
			return nil
		}
		return fmt.Errorf("compact through the service over TLS: exit %d %s %s\n%s", code, out, stderr, logs.String())
	})
}

func itoa(n int) string { return big.NewInt(int64(n)).String() }

// newCert writes name.pem and name-key.pem, signed by parent (self-signed
// when nil), for 127.0.0.1.
func newCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

// Errors that say what is wrong, at once.
func TestErrorsThatDoNotHang(t *testing.T) {
	// Nothing listens: the hint says to start something.
	code, _, stderr := runCLI(t, "session", "show", "s1", "--nats-url", "nats://127.0.0.1:1")
	if code != 1 || !strings.Contains(stderr, "is `compactor serve` or nats-server running") {
		t.Fatalf("nothing listening: exit %d: %s", code, stderr)
	}
	// A server that refuses the password: the hint is about credentials,
	// not about starting a server.
	srv := natstest.Server(t, t.TempDir(), -1)
	authed := natstest.ServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1, Username: "u", Password: "p"})
	port := itoa(authed.Addr().(*net.TCPAddr).Port)
	code, _, stderr = runCLI(t, "session", "show", "s1", "--nats-url", "nats://u:wrong@127.0.0.1:"+port)
	if code != 1 || !strings.Contains(stderr, "check the user and password") || strings.Contains(stderr, "wrong") {
		t.Fatalf("a wrong password: exit %d: %s", code, stderr)
	}
	// breaker show of a session that does not exist says so.
	url := srv.ClientURL()
	if code, _, stderr := runCLI(t, "provision", "--nats-url", url); code != 0 {
		t.Fatal(stderr)
	}
	code, _, stderr = runCLI(t, "breaker", "show", "nosuch", "--nats-url", url)
	if code != 1 || !strings.Contains(stderr, "session nosuch not found") {
		t.Fatalf("breaker show of an unknown session: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "session", "import", fixture, "--session-id", "known", "--nats-url", url); code != 0 {
		t.Fatal(stderr)
	}
	if code, out, stderr := runCLI(t, "breaker", "show", "known", "--nats-url", url); code != 0 || !strings.Contains(out, `"state": "closed"`) {
		t.Fatalf("breaker show of a session without failures: %s %s", out, stderr)
	}
	// bench and chaos check where they write before running for minutes.
	for _, cmd := range []string{"bench", "chaos"} {
		start := time.Now()
		code, _, stderr = runCLI(t, cmd, "--out", filepath.Join(t.TempDir(), "missing", "R.md"))
		if code != 2 || !strings.Contains(stderr, "--out") || time.Since(start) > 5*time.Second {
			t.Fatalf("%s --out into a missing folder: exit %d after %v: %s", cmd, code, time.Since(start), stderr)
		}
	}
	// compact of a stored session with no service running says that no
	// service answers, after its --timeout.
	code, _, stderr = runCLI(t, "compact", "known", "--timeout", "1s", "--nats-url", url)
	if code != 1 || !strings.Contains(stderr, "no compactor service answers") {
		t.Fatalf("compact with no service: exit %d: %s", code, stderr)
	}
}

// The README quotes no measured figure by hand (issue 23, item 7: it said
// "44 s" for eval replay --service against "3 s in process" and a tokens_after
// long outdated): its Measured section names the commands and the files
// they write, and its example outputs elide what the code computes.
func TestReadmeQuotesNoFigures(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "## Measured")
	if start < 0 {
		t.Fatal("the README has no Measured section")
	}
	measured := readme[start:]
	if end := strings.Index(measured[3:], "\n## "); end >= 0 {
		measured = measured[:end+3]
	}
	for _, want := range []string{"docs/BENCHMARKS.md", "docs/RELIABILITY.md", "make bench", "make chaos"} {
		if !strings.Contains(measured, want) {
			t.Errorf("the Measured section does not point to %s", want)
		}
	}
	// Outside code and command lines, a measured figure is a number with a
	// unit of time, a ratio or a rate.
	figure := regexp.MustCompile(`\b\d[\d,.]*\s?(ms|×|x the|/s|compactions/s|messages/s)\b|\b\d[\d,.]*\s?%`)
	for _, line := range strings.Split(measured, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "`compactor") {
			continue
		}
		if m := figure.FindString(line); m != "" && !strings.Contains(line, "fails when") {
			t.Errorf("the Measured section quotes %q by hand: %s", m, line)
		}
	}
	for _, stale := range []string{`"tokens_after": 3270`, "44 s, against 3 s in process", "tokens_after 3270"} {
		if strings.Contains(readme, stale) {
			t.Errorf("the README quotes %q", stale)
		}
	}
}
