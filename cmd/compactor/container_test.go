package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.yaml.in/yaml/v3"

	"github.com/compactor/compactor/internal/natstest"
)

// No docker daemon runs here: the image's and compose's commands run as
// processes of this binary, with their environment, on this machine's
// free ports and a temporary store (issue 42: the image's default command
// gave runtimes nothing to reach, compose had no way to a provider).

// runAs runs this test binary as the compactor command with args and env,
// stopped at the test's end; it returns its log.
func runAs(t *testing.T, env []string, args ...string) *natstest.LogBuffer {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logs := &natstest.LogBuffer{}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(os.Environ(), "COMPACTOR_TEST_RUN_MAIN=1"), env...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return logs
}

// healthy waits until `compactor health URL` passes.
func healthy(t *testing.T, url string, logs *natstest.LogBuffer) {
	t.Helper()
	natstest.Eventually(t, time.Minute, 100*time.Millisecond, func() error {
		if code, _, stderr := runCLI(t, "health", url); code != 0 {
			return fmt.Errorf("health: %s\n%s", stderr, logs.String())
		}
		return nil
	})
}

// The image by itself: its ENV and CMD serve the embedded NATS on the
// container's interfaces with the store on the volume, and its
// healthcheck passes once it is ready.
func TestImageServesByItself(t *testing.T) {
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var env []string
	var cmd []string
	sc := bufio.NewScanner(f)
	inEnv := false
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "ENV ") || inEnv {
			for _, kv := range strings.Fields(strings.TrimSuffix(strings.TrimPrefix(l, "ENV "), "\\")) {
				env = append(env, kv)
			}
			inEnv = strings.HasSuffix(l, "\\")
		}
		if rest, ok := strings.CutPrefix(l, "CMD "); ok {
			cmd = regexp.MustCompile(`"([^"]*)"`).FindAllString(rest, -1)
			for i := range cmd {
				cmd[i] = strings.Trim(cmd[i], `"`)
			}
		}
	}
	natsPort, metricsPort := freePort(t), freePort(t)
	dir := t.TempDir()
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "COMPACTOR_DATA_DIR":
			env[i] = k + "=" + dir // the volume
		case "COMPACTOR_METRICS_ADDR":
			env[i] = k + "=" + strings.Replace(v, ":9464", fmt.Sprintf(":%d", metricsPort), 1)
		}
	}
	env = append(env, fmt.Sprintf("COMPACTOR_NATS_PORT=%d", natsPort), "COMPACTOR_NATS_SYNC=1s")
	logs := runAs(t, env, cmd...)
	healthy(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", metricsPort), logs)
	if !strings.Contains(logs.String(), "data_dir="+dir) || !strings.Contains(logs.String(), fmt.Sprintf("0.0.0.0:%d", natsPort)) {
		t.Fatalf("the image's serve: not on all interfaces with its store on the volume:\n%s", logs.String())
	}
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	if err != nil {
		t.Fatalf("a runtime reaches the published port: %v", err)
	}
	nc.Close()
}

// compose's compactor service: its command and environment (the host's
// unset: the offline summariser), against nats.conf's server as the
// compactor user, provisioned as admin; its healthcheck passes.
func TestComposeServiceServes(t *testing.T) {
	b, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	as := natsConfServer(t)
	if code := cli(t, as("admin"), nil, "provision"); code != 0 {
		t.Fatal("provision as admin")
	}
	svc := c.Services["compactor"]
	metricsPort := freePort(t)
	args := append([]string(nil), svc.Command...)
	for i := range args {
		switch {
		case i > 0 && args[i-1] == "--nats-url":
			args[i] = as("compactor")
		case i > 0 && args[i-1] == "--metrics-addr":
			args[i] = fmt.Sprintf("0.0.0.0:%d", metricsPort)
		}
	}
	var env []string
	unset := regexp.MustCompile(`^\$\{[A-Z_]+:-(.*)\}$`)
	for k, v := range svc.Environment {
		if m := unset.FindStringSubmatch(v); m != nil {
			v = m[1]
		}
		env = append(env, k+"="+v)
	}
	logs := runAs(t, env, args...)
	hc := svc.Healthcheck.Test
	url := strings.Replace(hc[len(hc)-1], ":9464", fmt.Sprintf(":%d", metricsPort), 1)
	healthy(t, url, logs)
	if !strings.Contains(logs.String(), "provider=extractive") {
		t.Fatalf("compose's service with no provider set:\n%s", logs.String())
	}
}
