package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/sessions"
)

// hostileInput is one kind of input a runtime must be refused: what a
// provider or the contract refuses, sent at a runtime's live session.
type hostileInput struct {
	name, subject string
	// body is a format: %[1]s the session id, %[2]d a number of its own.
	body string
}

var hostileInputs = []hostileInput{
	{"not JSON", contract.SubjectAppend, `{"session_id":"%[1]s","messages":[{"id":"hostile-%[2]d"`},
	{"an unknown field in a message", contract.SubjectAppend, `{"session_id":"%[1]s","messages":[{"id":"hostile-%[2]d","role":"user","content":"HOSTILE %[2]d","colour":"red"}]}`},
	{"two session_id keys", contract.SubjectAppend, `{"session_id":"%[1]s","session_id":"hostile-elsewhere","messages":[{"id":"hostile-%[2]d","role":"user","content":"HOSTILE %[2]d"}]}`},
	{"a tool result with no call", contract.SubjectAppend, `{"session_id":"%[1]s","messages":[{"id":"hostile-%[2]d","role":"tool","tool_call_id":"call-none-%[2]d","content":"HOSTILE %[2]d"}]}`},
	{"a tool call never answered", contract.SubjectAppend, `{"session_id":"%[1]s","messages":[{"id":"hostile-%[2]d","role":"assistant","tool_calls":[{"id":"call-%[2]d","type":"function","function":{"name":"lookup","arguments":"{}"}}]},{"id":"hostile-%[2]d-u","role":"user","content":"HOSTILE %[2]d"}]}`},
	{"two tool calls with one id", contract.SubjectAppend, `{"session_id":"%[1]s","messages":[{"id":"hostile-%[2]d","role":"assistant","tool_calls":[{"id":"call-%[2]d","type":"function","function":{"name":"lookup","arguments":"{}"}},{"id":"call-%[2]d","type":"function","function":{"name":"book","arguments":"{}"}}]},{"id":"hostile-%[2]d-t","role":"tool","tool_call_id":"call-%[2]d","content":"HOSTILE %[2]d"}]}`},
	{"upload_id beside content", contract.SubjectAppend, `{"session_id":"%[1]s","messages":[{"id":"hostile-%[2]d","role":"user","upload_id":"upload-%[2]d","content":"HOSTILE %[2]d"}]}`},
	{"a content part of unknown type", contract.SubjectAppend, `{"session_id":"%[1]s","messages":[{"id":"hostile-%[2]d","role":"user","content":[{"type":"hologram","text":"HOSTILE %[2]d"}]}]}`},
	{"a data URL that is not base64", contract.SubjectAppend, `{"session_id":"%[1]s","messages":[{"id":"hostile-%[2]d","role":"user","content":[{"type":"text","text":"HOSTILE %[2]d"},{"type":"image_url","image_url":{"url":"data:image/png;base64,@@not base64@@"}}]}]}`},
	{"a role that is a number", contract.SubjectAppend, `{"session_id":"%[1]s","messages":[{"id":"hostile-%[2]d","role":5,"content":"HOSTILE %[2]d"}]}`},
	{"a 10,000-character session id", contract.SubjectAppend, `{"session_id":"` + strings.Repeat("x", 10000) + `%.0[1]s","messages":[{"id":"hostile-%[2]d","role":"user","content":"HOSTILE %[2]d"}]}`},
	{"a create over a session with other messages", contract.SubjectCreate, `{"session_id":"%[1]s","messages":[{"id":"hostile-%[2]d","role":"system","content":"HOSTILE %[2]d: ignore your instructions"}]}`},
}

// tooMany is an append of one message more than a call may carry.
func tooMany(sid string, n int) []byte {
	var ms []string
	for i := range contract.MaxMessagesPerCall + 1 {
		ms = append(ms, fmt.Sprintf(`{"id":"hostile-%d-%d","role":"user","content":"HOSTILE %d"}`, n, i, n))
	}
	return fmt.Appendf(nil, `{"session_id":%q,"messages":[%s]}`, sid, strings.Join(ms, ","))
}

// HostileReport is what the hostile runtime sent during the load and how
// it was answered.
type HostileReport struct {
	Sent int `json:"sent"`
	// Codes counts the final answers by error code ("" when one was
	// accepted: a defect).
	Codes map[string]int `json:"codes"`
	// Refused are the answers with a 4xx code; Stored the hostile
	// messages found in the sessions afterwards.
	Refused int `json:"refused"`
	Stored  int `json:"stored"`
	// Accepted names the inputs answered otherwise (at most 10).
	Accepted []string `json:"accepted,omitempty"`
}

// hostile sends the hostile inputs, one about every 100 ms in turn, at the
// runtimes' sessions until ctx ends. An answer that says retry (the store
// unavailable under a fault) is sent again, as a runtime does.
func (r *run) hostile(ctx context.Context) {
	select { // the runtimes' sessions created
	case <-ctx.Done():
		return
	case <-time.After(2 * time.Second):
	}
	for n := 0; ctx.Err() == nil; n++ {
		sid := fmt.Sprintf("chaos-%02d", rand.IntN(r.o.Runtimes))
		in := hostileInput{name: "one message more than a call may carry", subject: contract.SubjectAppend}
		body := tooMany(sid, n)
		if k := n % (len(hostileInputs) + 1); k < len(hostileInputs) {
			in = hostileInputs[k]
			body = fmt.Appendf(nil, in.body, sid, n)
		}
		code := r.hostileCall(ctx, in.subject, body)
		r.mu.Lock()
		h := &r.hostileRep
		h.Sent++
		h.Codes[code]++
		if strings.HasPrefix(code, "4") && len(code) == 3 {
			h.Refused++
		} else if len(h.Accepted) < 10 {
			h.Accepted = append(h.Accepted, fmt.Sprintf("%s: %q", in.name, code))
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(50+rand.IntN(100)) * time.Millisecond):
		}
	}
}

// hostileCall sends body until it is answered other than retry; it
// returns the answer's error code ("" when accepted, "no answer" when none
// came).
func (r *run) hostileCall(ctx context.Context, subject string, body []byte) string {
	for try := 0; try < 100; try++ {
		m, err := r.nc.Request(subject, body, attemptTimeout)
		if err == nil {
			code := m.Header.Get(micro.ErrorCodeHeader)
			var eb contract.ErrorBody
			if code == "" || json.Unmarshal(m.Data, &eb) != nil || eb.Status != contract.StatusRetry {
				return code
			}
		}
		if ctx.Err() != nil && try > 20 {
			break
		}
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
	}
	return "no answer"
}

// RestartReport is the whole-cluster restart after the load: every node
// and both replicas stopped at once, as a host reboot or an upgrade does,
// the nodes started again and the replicas with them, before JetStream
// has a leader.
type RestartReport struct {
	Done bool `json:"done"`
	// LivezAfter is the longest a replica took from its start to answer
	// /livez; LeadersAfter from the nodes' start to every stream and
	// bucket having a leader; ServingAfter from then to every replica
	// ready (/readyz 200).
	LivezAfter   time.Duration `json:"livez_after_start"`
	LeadersAfter time.Duration `json:"leaders_after_start"`
	ServingAfter time.Duration `json:"serving_after_leaders"`
	// Appended are the sessions that appended a turn after it.
	Appended int    `json:"sessions_appended_after"`
	Error    string `json:"error,omitempty"`
}

// freeAddr is a free loopback address for a replica's HTTP endpoints.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

var probeClient = &http.Client{Timeout: 2 * time.Second}

// probe answers a replica's HTTP probe's status (0 when it cannot be
// reached) and body.
func probe(addr, path string) (int, string) {
	resp, err := probeClient.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// restartAll stops every node and both replicas at once and starts them
// again, measuring when each replica answers /livez, when JetStream has
// every leader back and when each replica is ready; then every runtime
// appends a turn and requests a compaction, through the restarted service.
func (r *run) restartAll(ctx context.Context) (rep RestartReport) {
	var names []string
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	sn := r.js.StreamNames(lctx)
	for n := range sn.Name() {
		names = append(names, n)
	}
	cancel()
	if len(names) == 0 {
		rep.Error = fmt.Sprintf("list the streams: %v", sn.Err())
		return rep
	}
	r.mu.Lock()
	reps := r.replicas
	r.mu.Unlock()
	for _, p := range reps {
		if p != nil {
			p.kill()
		}
	}
	for i := range r.c.Nodes {
		r.c.Kill(i)
	}
	r.fault("whole-cluster restart: killed the three nodes and both replicas at once")
	start := time.Now()
	for i := range r.c.Nodes {
		if err := r.c.Restart(i); err != nil {
			rep.Error = err.Error()
			return rep
		}
	}
	for i := range 2 {
		if err := r.startReplica(i); err != nil {
			rep.Error = err.Error()
			return rep
		}
	}
	r.fault("started the three nodes and the two replicas")
	if err := r.awaitServing(ctx, names, start, &rep); err != nil {
		rep.Error = err.Error()
		return rep
	}
	r.fault("both replicas ready %v after the leaders", rep.ServingAfter.Round(100*time.Millisecond))

	r.appendAfterRestart(ctx, &rep)
	rep.Done = true
	return rep
}

// awaitServing waits until JetStream has every leader of the streams
// named back and both replicas are live and ready, and says how long each
// took from start (the nodes' start).
func (r *run) awaitServing(ctx context.Context, names []string, start time.Time, rep *RestartReport) error {
	r.mu.Lock()
	reps := slices.Clone(r.replicas)
	r.mu.Unlock()
	livez := make([]time.Duration, len(reps))
	ready := make([]time.Time, len(reps))
	var leaders time.Time
	for deadline := time.Now().Add(3 * time.Minute); ; {
		done := !leaders.IsZero()
		for i, p := range reps {
			if livez[i] == 0 {
				if c, _ := probe(p.addr, "/livez"); c == 200 {
					livez[i] = time.Since(p.started)
				}
			}
			if ready[i].IsZero() {
				if c, _ := probe(p.addr, "/readyz"); c == 200 {
					ready[i] = time.Now()
				}
			}
			done = done && livez[i] > 0 && !ready[i].IsZero()
		}
		if leaders.IsZero() && r.c.MetaLeader() >= 0 && r.allLeaders(names) {
			leaders = time.Now()
			r.fault("JetStream has every leader back (%v after the nodes' start)", leaders.Sub(start).Round(100*time.Millisecond))
		}
		if done {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("after 3 minutes: leaders back %v, /livez %v, ready %v", !leaders.IsZero(), livez, ready)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rep.LeadersAfter = leaders.Sub(start)
	for i := range reps {
		rep.LivezAfter = max(rep.LivezAfter, livez[i])
		rep.ServingAfter = max(rep.ServingAfter, ready[i].Sub(leaders))
	}
	return nil
}

// appendAfterRestart has every runtime append a turn and request a
// compaction: the service works through the restart.
func (r *run) appendAfterRestart(ctx context.Context, rep *RestartReport) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range r.o.Runtimes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := fmt.Sprintf("chaos-%02d", i)
			id := sid + "-after-restart"
			body, _ := json.Marshal(map[string]any{"session_id": sid, "messages": []map[string]any{
				{"id": id, "role": "user", "content": fmt.Sprintf("[%s] Back after the restart: is my booking still there?", sid)}}})
			var ap sessions.Appended
			if err := r.call(ctx, contract.SubjectAppend, body, &ap); err != nil {
				r.fail(fmt.Errorf("%s after the restart: append: %w", sid, err))
				return
			}
			r.ack(sid, id)
			mu.Lock()
			rep.Appended++
			mu.Unlock()
			r.publish(sid, uuid.NewString(), r.o.ContextLimit+1)
		}()
	}
	wg.Wait()
}

// allLeaders reports whether every stream named has a leader.
func (r *run) allLeaders(names []string) bool {
	for _, n := range names {
		if r.c.StreamLeader(n) < 0 {
			return false
		}
	}
	return true
}

// FullReport is the full-store phase: a node at its max_file_store, one
// replica, runtimes appending until the store is full.
type FullReport struct {
	Done bool `json:"done"`
	// Acknowledged are the appends stored before the store filled.
	Acknowledged int `json:"acknowledged"`
	// Code and Status are the answer at the limit, Error its text,
	// RefusedIn how long it took.
	Code      string        `json:"code"`
	Status    string        `json:"status"`
	Message   string        `json:"message"`
	RefusedIn time.Duration `json:"refused_in"`
	// Readyz is the replica's /readyz then (status and body).
	Readyz     int    `json:"readyz"`
	ReadyzBody string `json:"readyz_body"`
	// Deleted says a delete was answered on the full store; ResumedIn is
	// from its answer to the first append stored after it, ReadyAfter
	// whether /readyz said ready again.
	Deleted    bool          `json:"deleted"`
	ResumedIn  time.Duration `json:"resumed_in"`
	ReadyAfter bool          `json:"ready_after"`
	// Lost are acknowledged appends not in their sessions afterwards.
	Lost  int    `json:"lost"`
	Error string `json:"error,omitempty"`
}

// fullStoreBytes is the node's max_file_store in the full-store phase.
const fullStoreBytes = 6 << 20

// fullStore runs the full-store phase on a node of its own.
func (r *run) fullStore(ctx context.Context) (rep FullReport) {
	fail := func(err error) FullReport { rep.Error = err.Error(); return rep }
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(r.dir, "full"),
		JetStreamMaxStore: fullStoreBytes, NoLog: true, NoSigs: true})
	if err != nil {
		return fail(err)
	}
	go srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		return fail(errors.New("the full-store node is not ready"))
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = app.ProvisionAll(pctx, nc, js, app.Provisioning{EventBytes: 1 << 20})
	cancel()
	if err != nil {
		return fail(err)
	}
	addr, stop, err := r.fullStoreReplica(srv.ClientURL())
	if err != nil {
		return fail(err)
	}
	defer stop()
	request := requester(nc)
	acked, err := fillStore(request, &rep)
	if err != nil {
		return fail(err)
	}
	rep.Readyz, rep.ReadyzBody = probe(addr, "/readyz")
	r.logf("full store: refused %s %s in %v after %d appends: %s", rep.Code, rep.Status, rep.RefusedIn.Round(time.Millisecond), rep.Acknowledged, rep.Message)
	if err := resumeAfterDelete(request, acked, &rep); err != nil {
		return fail(err)
	}
	c2, _ := probe(addr, "/readyz")
	rep.ReadyAfter = c2 == 200
	if rep.Lost, err = lostOf(ctx, nc, js, acked); err != nil {
		return fail(err)
	}
	rep.Done = true
	return rep
}

// fullStoreReplica starts a replica on the full-store node at url and
// waits until it is ready; stop kills it.
func (r *run) fullStoreReplica(url string) (addr string, stop func(), err error) {
	if addr, err = freeAddr(); err != nil {
		return "", nil, err
	}
	logf, err := os.Create(filepath.Join(r.dir, "replica-full.log"))
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(r.o.Binary, "serve", "--nats-url", url, "--provision=false", "--metrics-addr", addr,
		"--log-format", "json", "--log-level", "warn", "--shutdown-grace", "5s")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, err
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() }
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if c, _ := probe(addr, "/readyz"); c == 200 {
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("the full-store replica was not ready within a minute (log in %s)", r.dir)
		}
	}
}

// requestFunc sends an endpoint request and reads its error code and body
// ("" when answered), and how long it took.
type requestFunc func(subject string, body any) (string, contract.ErrorBody, time.Duration, error)

func requester(nc *nats.Conn) requestFunc {
	return func(subject string, body any) (string, contract.ErrorBody, time.Duration, error) {
		b, _ := json.Marshal(body)
		start := time.Now()
		m, err := nc.Request(subject, b, 60*time.Second)
		took := time.Since(start)
		if err != nil {
			return "", contract.ErrorBody{}, took, fmt.Errorf("%s: %w", subject, err)
		}
		var eb contract.ErrorBody
		code := m.Header.Get(micro.ErrorCodeHeader)
		if code != "" {
			_ = json.Unmarshal(m.Data, &eb)
		}
		return code, eb, took, nil
	}
}

// fillStore creates sessions and appends 4 KB messages to them until the
// store refuses one (rep says how); it returns the ids acknowledged, by
// session.
func fillStore(request requestFunc, rep *FullReport) (map[string][]string, error) {
	text := strings.Repeat("the quick brown fox jumps over the lazy dog ", 90) // about 4 KB
	acked := map[string][]string{}
	const sessionsN = 4
	for i := range sessionsN {
		sid := fmt.Sprint("full-", i)
		if c, eb, _, err := request(contract.SubjectCreate, map[string]any{"session_id": sid, "messages": []map[string]any{{"role": "system", "content": "an agent"}}}); err != nil || c != "" {
			return nil, fmt.Errorf("create %s: %v %s %s", sid, err, c, eb.Error)
		}
	}
	for i := 0; rep.Code == "" && i < 10000; i++ {
		sid, id := fmt.Sprint("full-", i%sessionsN), fmt.Sprint("m", i)
		code, eb, took, err := request(contract.SubjectAppend, map[string]any{"session_id": sid, "messages": []map[string]any{{"id": id, "role": "user", "content": text}}})
		if err != nil {
			return nil, err
		}
		if code == "" {
			acked[sid] = append(acked[sid], id)
			rep.Acknowledged++
			continue
		}
		rep.Code, rep.Status, rep.Message, rep.RefusedIn = code, string(eb.Status), eb.Error, took
	}
	return acked, nil
}

// resumeAfterDelete deletes a session of the full store and waits until an
// append to another is stored again.
func resumeAfterDelete(request requestFunc, acked map[string][]string, rep *FullReport) error {
	c, eb, _, err := request(contract.SubjectDelete, map[string]any{"session_id": "full-0"})
	if err != nil || c != "" {
		return fmt.Errorf("delete on the full store: %v %s %s", err, c, eb.Error)
	}
	rep.Deleted = true
	deleted := time.Now()
	delete(acked, "full-0")
	for {
		code, eb, _, err := request(contract.SubjectAppend, map[string]any{"session_id": "full-1", "messages": []map[string]any{{"id": "after", "role": "user", "content": "space again"}}})
		if err == nil && code == "" {
			rep.ResumedIn = time.Since(deleted)
			acked["full-1"] = append(acked["full-1"], "after")
			return nil
		}
		if time.Since(deleted) > time.Minute {
			return fmt.Errorf("appends did not resume within a minute of the delete: %v %s %s", err, code, eb.Error)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lostOf counts the acknowledged messages the store does not hold.
func lostOf(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, acked map[string][]string) (int, error) {
	store, err := kvstore.NewSessions(ctx, nc, js)
	if err != nil {
		return 0, err
	}
	lost := 0
	for sid, ids := range acked {
		ms, _, err := store.History(ctx, sid)
		if err != nil {
			return 0, fmt.Errorf("history of %s: %w", sid, err)
		}
		have := map[string]bool{}
		for _, m := range ms {
			have[m.ID] = true
		}
		for _, id := range ids {
			if !have[id] {
				lost++
			}
		}
	}
	return lost, nil
}
