package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

// Tenant A's floods run in a process of their own (`compactor chaos
// --tenant-a-flood SPEC`), as another tenant's runtimes do: sent from the
// harness's process, their thousand goroutines a second and their garbage
// shared a scheduler and a collector with tenant B's runtimes, whose
// times are the measure.

// The kinds of flood.
const (
	floodRequests = "requests" // an append, then a compaction request, each time
	floodAppends  = "appends"
)

// FloodSpec is one of tenant A's floods.
type FloodSpec struct {
	// URL is the server's client URL (tenant A's user is added).
	URL       string `json:"url"`
	Kind      string `json:"kind"`
	PerSecond int    `json:"per_second"`
}

// FloodResult is what a flood counted.
type FloodResult struct {
	Sent    int64            `json:"sent"`
	Stored  int64            `json:"stored"`
	Failed  int64            `json:"failed"`
	Refused map[string]int64 `json:"refused,omitempty"`
	// Created are the sessions it created new; Bytes what its appends
	// applied said they stored.
	Created []string `json:"created,omitempty"`
	Bytes   int64    `json:"bytes"`
	Errors  []string `json:"errors,omitempty"`
	// Seconds is how long it sent.
	Seconds float64 `json:"seconds"`
}

// RunFlood sends spec's flood as tenant A until ctx ends, waits for the
// answers under way, and says what it counted.
func RunFlood(ctx context.Context, spec FloodSpec) (*FloodResult, error) {
	if spec.PerSecond < 1 || spec.Kind != floodRequests && spec.Kind != floodAppends {
		return nil, fmt.Errorf("chaos: a flood of %d %q a second", spec.PerSecond, spec.Kind)
	}
	o := NoisyOptions{Flood: spec.PerSecond, AppendFlood: spec.PerSecond, Progress: os.Stderr}
	o.defaults()
	n := &noisy{o: o}
	n.setURL(spec.URL)
	a, err := n.client("tenant-a", "tenant-a-secret")
	if err != nil {
		return nil, err
	}
	res := &FloodResult{}
	if spec.Kind == floodAppends {
		af := &appendFlood{refused: map[string]int64{}}
		n.appendFlood(ctx, a, af)
		res.Sent, res.Stored, res.Failed, res.Refused, res.Bytes = af.sent.Load(), af.stored.Load(), af.failed.Load(), af.counts(), n.aBytes.Load()
	} else {
		n.flood(ctx, a)
		res.Sent, res.Stored, res.Failed, res.Refused = n.sent.Load(), n.stored.Load(), n.failed.Load(), n.refusedCounts()
		created := int64(0)
		n.counted.Range(func(k, _ any) bool {
			res.Created = append(res.Created, k.(string))
			created += textBytes(floodSession(k.(string)))
			return true
		})
		res.Bytes = n.aBytes.Load() - created
	}
	res.Seconds = n.sending.Seconds()
	n.mu.Lock()
	res.Errors = n.errors
	n.mu.Unlock()
	return res, nil
}

// elsewhere is a flood of kind at perSecond sent from a process of its
// own until its context ends; what it counted is added to the run's (to
// af's for appends).
func (n *noisy) elsewhere(kind string, perSecond int, af *appendFlood) func(context.Context) {
	return func(ctx context.Context) {
		res, err := n.floodProcess(ctx, FloodSpec{URL: n.serverURL, Kind: kind, PerSecond: perSecond})
		if err != nil {
			n.fail(err)
			return
		}
		for _, e := range res.Errors {
			n.fail(errors.New(e))
		}
		if af != nil {
			n.appendFloodFor.Add(int64(res.Seconds * float64(time.Second)))
			af.sent.Add(res.Sent)
			af.stored.Add(res.Stored)
			af.failed.Add(res.Failed)
			af.mu.Lock()
			for q, c := range res.Refused {
				af.refused[q] += c
			}
			af.mu.Unlock()
			n.aBytes.Add(res.Bytes)
			return
		}
		n.floodFor.Add(int64(res.Seconds * float64(time.Second)))
		n.sent.Add(res.Sent)
		n.stored.Add(res.Stored)
		n.failed.Add(res.Failed)
		for q, c := range res.Refused {
			v, _ := n.refused.LoadOrStore(q, new(atomic.Int64))
			v.(*atomic.Int64).Add(c)
		}
		for _, sid := range res.Created {
			if !n.created(sid) {
				n.aSessions.Add(1)
				n.aBytes.Add(textBytes(floodSession(sid)))
			}
		}
		n.aBytes.Add(res.Bytes)
	}
}

// floodProcess runs spec in `compactor chaos --tenant-a-flood` until ctx ends, then
// stops it (SIGTERM: it waits for its answers, at most bWait) and reads
// what it counted.
func (n *noisy) floodProcess(ctx context.Context, spec FloodSpec) (*FloodResult, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(n.dir, "flood.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	var out bytes.Buffer
	cmd := exec.Command(n.o.Binary, "chaos", "--tenant-a-flood", string(b))
	cmd.Stdout, cmd.Stderr = &out, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start tenant A's flood: %w", err)
	}
	yieldCPU(cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return nil, fmt.Errorf("tenant A's flood ended before its phase: %v", err)
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			return nil, fmt.Errorf("tenant A's flood: %v (its log: %s)", err, logf.Name())
		}
	case <-time.After(bWait + 10*time.Second):
		_ = cmd.Process.Kill()
		<-done
		return nil, errors.New("tenant A's flood did not stop")
	}
	var res FloodResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("tenant A's flood said %q: %w", out.String(), err)
	}
	return &res, nil
}

// floodNice is the scheduling priority tenant A's flood runs at: the
// lowest. Tenant A's runtimes run on their own hosts, not on the
// service's; here they share its two cores, and a flood of a thousand
// requests a second took a fifth of one of them from the server and the
// replicas whose isolation the run measures (tenant B's append p50 went
// from 3.7 to 8.1 ms). At the lowest priority the flood still sends at
// its rate (paced keeps to it; the report says what it sent) from the time
// the service leaves.
const floodNice = 19

// yieldCPU sets the flood process pid (the leader of its own process
// group) and every thread in it to floodNice, twice: a thread its runtime
// starts while the first pass runs is caught by the second, and those
// started later take their starter's priority.
func yieldCPU(pid int) {
	for range 2 {
		_ = syscall.Setpriority(syscall.PRIO_PGRP, pid, floodNice)
		time.Sleep(200 * time.Millisecond)
	}
}
