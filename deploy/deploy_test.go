// Package deploy_test checks what the container files promise: no docker
// daemon runs here, so the Dockerfile and compose.yaml are read, and the
// cluster configuration is parsed by nats-server itself.
package deploy_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"
)

// dockerfile is the Dockerfile's instructions, stage by stage.
type stage struct {
	from  string
	lines []string // instructions after FROM, continuation lines joined
}

func readDockerfile(t *testing.T) []stage {
	t.Helper()
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []stage
	sc := bufio.NewScanner(f)
	line := ""
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			line += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		line += l
		if strings.HasPrefix(strings.ToUpper(line), "FROM ") {
			stages = append(stages, stage{from: strings.Fields(line)[1]})
		} else if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		} else if !strings.HasPrefix(strings.ToUpper(line), "ARG ") {
			t.Fatalf("an instruction before FROM: %q", line)
		}
		line = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

func instr(s stage, name string) []string {
	var out []string
	for _, l := range s.lines {
		if f := strings.Fields(l); len(f) > 0 && strings.EqualFold(f[0], name) {
			out = append(out, strings.TrimSpace(l[len(f[0]):]))
		}
	}
	return out
}

// The image is built in one stage and runs in another: a static binary
// (no cgo) from the Go the module asks for, on a base with no shell, as
// a user that is not root, exposing the metrics port, the binary its
// entrypoint.
func TestDockerfile(t *testing.T) {
	stages := readDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a run stage", len(stages))
	}
	build, run := stages[0], stages[len(stages)-1]
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if goVersion == nil || !strings.HasPrefix(build.from, "golang:"+string(goVersion[1])) {
		t.Fatalf("build stage FROM %s, want golang:%s (go.mod's)", build.from, goVersion[1])
	}
	runs := strings.Join(instr(build, "RUN"), "\n")
	if !strings.Contains(runs, "CGO_ENABLED=0") || !strings.Contains(runs, "./cmd/compactor") {
		t.Fatalf("the build stage does not build a static binary of ./cmd/compactor:\n%s", runs)
	}
	// No shell at run time: distroless static or scratch.
	if !strings.HasPrefix(run.from, "gcr.io/distroless/static") && run.from != "scratch" {
		t.Fatalf("run stage FROM %s: want a base without a shell (distroless static, scratch)", run.from)
	}
	if len(instr(run, "RUN")) > 0 {
		t.Fatal("the run stage runs commands: its base has no shell")
	}
	users := instr(run, "USER")
	if len(users) == 0 {
		t.Fatal("the run stage sets no USER: it would run as root")
	}
	if u := strings.Split(users[len(users)-1], ":")[0]; u == "root" || u == "0" {
		t.Fatalf("USER %s", users[len(users)-1])
	}
	if expose := strings.Join(instr(run, "EXPOSE"), " "); !strings.Contains(expose, "9464") || !strings.Contains(expose, "4222") {
		t.Fatalf("EXPOSE %v, want 4222 (the embedded NATS) and 9464 (metrics and probes)", instr(run, "EXPOSE"))
	}
	// By itself the image serves on the container's interfaces, its store
	// on a volume (issue 42: an embedded NATS on the container's loopback,
	// its store in the home directory, gave runtimes nothing to reach).
	env := strings.Join(instr(run, "ENV"), " ")
	for _, want := range []string{"COMPACTOR_NATS_HOST=0.0.0.0", "COMPACTOR_DATA_DIR=/data", "COMPACTOR_METRICS_ADDR=0.0.0.0:9464"} {
		if !strings.Contains(env, want) {
			t.Fatalf("ENV %s lacks %s", env, want)
		}
	}
	if v := instr(run, "VOLUME"); len(v) != 1 || v[0] != "/data" {
		t.Fatalf("VOLUME %v, want /data", v)
	}
	if copies := strings.Join(instr(run, "COPY"), "\n"); !strings.Contains(copies, "--chown=65532:65532") || !strings.Contains(copies, " /data") {
		t.Fatalf("the store's directory is not the service user's: %s", copies)
	}
	if hc := strings.Join(instr(run, "HEALTHCHECK"), " "); !strings.Contains(hc, `"/compactor", "health"`) || !strings.Contains(hc, "/readyz") {
		t.Fatalf("HEALTHCHECK %q: want compactor health on /readyz (the base has no shell or curl)", hc)
	}
	if ep := instr(run, "ENTRYPOINT"); len(ep) != 1 || ep[0] != `["/compactor"]` {
		t.Fatalf("ENTRYPOINT %v", ep)
	}
	copies := strings.Join(instr(run, "COPY"), "\n")
	if !strings.Contains(copies, "--from=build") || !strings.Contains(copies, "/compactor") {
		t.Fatalf("the run stage does not take the binary from the build stage: %s", copies)
	}
	if cmd := instr(run, "CMD"); len(cmd) != 1 || cmd[0] != `["serve"]` {
		t.Fatalf("CMD %v: want serve (its settings in ENV)", cmd)
	}
	ignore, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**/node_modules/", ".git", "bin/"} {
		if !slices.Contains(strings.Split(string(ignore), "\n"), want) {
			t.Fatalf(".dockerignore lacks %s (the TypeScript client's node_modules were 112 MB of build context)", want)
		}
	}
}

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		DependsOn   any               `yaml:"depends_on"`
		Restart     string            `yaml:"restart"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Deploy struct {
			Replicas int `yaml:"replicas"`
		} `yaml:"deploy"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// flag returns the value after name in a command.
func flag(cmd []string, name string) string {
	i := slices.Index(cmd, name)
	if i < 0 || i+1 >= len(cmd) {
		return ""
	}
	return cmd[i+1]
}

// compose.yaml starts three NATS servers on the repository's nats.conf,
// routed to each other, each with JetStream on a volume of its own;
// provisions with three replicas as admin; and runs two replicas of the
// service as the compactor user, connected to all three nodes. nats-server
// parses each node's configuration as the container would see it.
func TestCompose(t *testing.T) {
	b, err := os.ReadFile("../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"nats-1", "nats-2", "nats-3"}
	// The container's /etc/nats: nats.conf and the cluster configuration.
	etc := t.TempDir()
	for src, dst := range map[string]string{"../nats.conf": "nats.conf", "nats-cluster.conf": "cluster.conf"} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, dst), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	passwords := map[string]string{}
	for _, node := range nodes {
		s, ok := c.Services[node]
		if !ok {
			t.Fatalf("no service %s", node)
		}
		if !strings.HasPrefix(s.Image, "nats:2.") {
			t.Fatalf("%s: image %s", node, s.Image)
		}
		for _, v := range []string{"./nats.conf:/etc/nats/nats.conf:ro", "./deploy/nats-cluster.conf:/etc/nats/cluster.conf:ro", node + ":/data"} {
			if !slices.Contains(s.Volumes, v) {
				t.Fatalf("%s: volumes %v lack %s", node, s.Volumes, v)
			}
		}
		if _, ok := c.Volumes[node]; !ok {
			t.Fatalf("volume %s is not declared", node)
		}
		conf := flag(s.Command, "--config")
		if conf != "/etc/nats/cluster.conf" {
			t.Fatalf("%s: command %v", node, s.Command)
		}
		t.Setenv("NATS_SERVER_NAME", s.Environment["NATS_SERVER_NAME"])
		opts, err := server.ProcessConfigFile(filepath.Join(etc, "cluster.conf"))
		if err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		if opts.ServerName != node || opts.Host != "0.0.0.0" || opts.Port != 4222 || !opts.JetStream || opts.StoreDir != "/data" {
			t.Fatalf("%s: name %q, listen %s:%d, jetstream %v at %q", node, opts.ServerName, opts.Host, opts.Port, opts.JetStream, opts.StoreDir)
		}
		// An acknowledged write is on a quorum, and on its disks within a
		// second (not nats-server's default 2 minutes).
		if opts.SyncAlways || opts.SyncInterval != time.Second {
			t.Fatalf("%s: sync_interval %v (always %v), want 1s", node, opts.SyncInterval, opts.SyncAlways)
		}
		if opts.Cluster.Name != "compactor" || opts.Cluster.Port != 6222 || opts.Cluster.Username == "" {
			t.Fatalf("%s: cluster %+v", node, opts.Cluster)
		}
		var routed []string
		for _, r := range opts.Routes {
			if r.User.Username() == opts.Cluster.Username {
				routed = append(routed, r.Hostname())
			}
		}
		if slices.Sort(routed); !slices.Equal(routed, nodes) {
			t.Fatalf("%s: routes to %v (with the route user), want %v", node, routed, nodes)
		}
		// nats.conf's users and roles, whole.
		for _, u := range opts.Users {
			passwords[u.Username] = u.Password
		}
		if opts.Accounts == nil || len(opts.Users) < 4 {
			t.Fatalf("%s: %d users: nats.conf was not included", node, len(opts.Users))
		}
	}
	// Every node is reachable by runtimes on one port published on this
	// host's loopback (issue 42: on every interface, unauthenticated
	// metrics too), comes back after a crash or a reboot, and says when
	// its JetStream is ready.
	if !slices.Contains(c.Services["nats-1"].Ports, "127.0.0.1:4222:4222") {
		t.Fatalf("nats-1 ports %v, want 127.0.0.1:4222:4222", c.Services["nats-1"].Ports)
	}
	for _, node := range nodes {
		s := c.Services[node]
		if s.Restart != "unless-stopped" || !strings.Contains(strings.Join(s.Healthcheck.Test, " "), "8222/healthz") {
			t.Fatalf("%s: restart %q, healthcheck %v", node, s.Restart, s.Healthcheck.Test)
		}
	}
	for name, s := range c.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Fatalf("%s publishes %s on every interface", name, p)
			}
		}
	}
	// The URLs of a service name each node, as user with its password.
	checkURLs := func(what, urls, user string) {
		t.Helper()
		var hosts []string
		for _, u := range strings.Split(urls, ",") {
			m := regexp.MustCompile(`^nats://([^:]+):([^@]+)@([^:]+):4222$`).FindStringSubmatch(u)
			if m == nil || m[1] != user || passwords[user] == "" || m[2] != passwords[user] {
				t.Fatalf("%s: URL %q: want %s with nats.conf's password", what, u, user)
			}
			hosts = append(hosts, m[3])
		}
		if slices.Sort(hosts); !slices.Equal(hosts, nodes) {
			t.Fatalf("%s: connects to %v, want %v", what, hosts, nodes)
		}
	}
	prov := c.Services["provision"]
	if prov.Command[0] != "provision" || flag(prov.Command, "--replicas") != "3" {
		t.Fatalf("provision: %v", prov.Command)
	}
	checkURLs("provision", flag(prov.Command, "--nats-url"), "admin")
	svc := c.Services["compactor"]
	if svc.Command[0] != "serve" || svc.Deploy.Replicas != 2 || svc.Image != prov.Image || prov.Build == nil {
		t.Fatalf("compactor: %v, %d replicas, image %q (provision builds %q)", svc.Command, svc.Deploy.Replicas, svc.Image, prov.Image)
	}
	if flag(svc.Command, "--metrics-addr") != "0.0.0.0:9464" {
		t.Fatalf("compactor: metrics on %q", flag(svc.Command, "--metrics-addr"))
	}
	checkURLs("compactor", flag(svc.Command, "--nats-url"), "compactor")
	deps, _ := svc.DependsOn.(map[string]any)
	if p, _ := deps["provision"].(map[string]any); p["condition"] != "service_completed_successfully" {
		t.Fatalf("compactor starts before provisioning completes: depends_on %v", svc.DependsOn)
	}
	pdeps, _ := prov.DependsOn.(map[string]any)
	for _, node := range nodes {
		if d, _ := pdeps[node].(map[string]any); d["condition"] != "service_healthy" {
			t.Fatalf("provision starts before %s is healthy: depends_on %v", node, prov.DependsOn)
		}
	}
	if svc.Restart != "unless-stopped" || strings.Join(svc.Healthcheck.Test, " ") != "CMD /compactor health http://127.0.0.1:9464/readyz" {
		t.Fatalf("compactor: restart %q, healthcheck %v", svc.Restart, svc.Healthcheck.Test)
	}
	// A provider and its key, or a config file, come from the host.
	for _, k := range []string{"COMPACTOR_PROVIDER", "COMPACTOR_BASE_URL", "COMPACTOR_SUMMARY_MODEL", "COMPACTOR_CONFIG", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"} {
		if !strings.HasPrefix(svc.Environment[k], "${"+k) {
			t.Fatalf("compactor: environment %s = %q, want it from the host's", k, svc.Environment[k])
		}
	}
}
