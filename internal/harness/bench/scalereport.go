package bench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Missed returns the goals the run did not meet.
func (r *ScaleReport) Missed() []Goal {
	var out []Goal
	for _, g := range r.Goals {
		if !g.Met {
			out = append(out, g)
		}
	}
	return out
}

// Markdown renders the report as docs/SCALE.md.
func (r *ScaleReport) Markdown() string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("# Scale")
	w("")
	w("Written by `%s` (%.0f s) on %s, %d cores, %s, %s; figures from that run only. Ratios compare with a floor measured in the same run, on the same server. The machine-readable report is `scale.json` beside this file.", r.Command, r.Seconds, r.Machine.CPU, r.Machine.Cores, r.Machine.Memory, r.Machine.Go)
	w("")
	where := "a nats-server in its own process (its CPU and memory read from /proc)"
	if !r.Separate {
		where = "a nats-server in this process (server CPU and memory not told apart)"
	}
	w("The store: %d shards, each a records bucket and a data stream (see docs/DESIGN.md). The server: %s. Messages: the bundled tau-bench agent run, in order, %.0f bytes of JSON each on average.", r.Shards, where, r.MsgBytes)
	w("")
	w("## Goals")
	w("")
	w("| goal | want | got | |")
	w("| --- | --- | --- | --- |")
	for _, g := range r.Goals {
		mark := "met"
		if !g.Met {
			mark = "**missed**"
		}
		w("| %s | %s | %s | %s |", g.What, g.Want, g.Got, mark)
	}
	w("")
	w("## Appends in process against raw KV puts")
	w("")
	w("Each runtime appends one message at a time to its own session through the session use case (token counting, ids, the store); the floor puts the same bytes as KV values, one key each. CPU is milliseconds per operation.")
	w("")
	w("| runtimes | KV puts/s | appends/s | ratio | server CPU, put | server CPU, append | client CPU, put | service CPU, append | appends per shard |")
	w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, a := range r.Appends {
		w("| %d | %.0f | %.0f | %.2f | %.3f | %.3f | %.3f | %.3f | %v |", a.Runtimes, a.Floor, a.Appends, a.Ratio, a.FloorServerMS, a.ServerMS, a.FloorClientMS, a.ServiceMS, a.PerShardAppends)
	}
	w("")
	for _, section := range []func(func(string, ...any)){r.mdEndpoint, r.mdDurability, r.mdPerMessage, r.mdSweep, r.mdCompactions, r.mdCluster, r.mdEval, r.mdSizing} {
		section(w)
	}
	return b.String()
}

// mdEndpoint writes the section of the appends through the endpoint, and at lengths.
func (r *ScaleReport) mdEndpoint(w func(string, ...any)) {
	if len(r.Endpoint) > 0 {
		w("## Appends as a runtime makes them")
		w("")
		w("Each runtime appends one message at a time through `compactor.session.append` (the Go client: a request and its reply) to `compactor serve` as it runs (its endpoints, preparer and consumer, in the benchmark's process, a model that answers at once), against raw KV puts and the session use case in process, measured in the same run on the same server. *Below*: sessions far below prepare_at (a new gpt-4.1 session every %d messages: nothing to prepare). *Passing*: one gpt-4o session each (128k window), which passes prepare_at and its limit within seconds, so the preparer's work is in the figure. Process CPU is the benchmark process's (the runtimes' client and the service) per append, against its CPU per KV put (the client alone) and per append in process. *Relay* is the floor of any endpoint that takes an append: a NATS micro endpoint on the same server that puts each request's body (the same bodies) as one KV value and replies, nothing else; an append through an endpoint crosses the server twice (the request and its reply, then the write and its acknowledgement) where a raw KV put crosses it once, so where the server's CPU is what limits the relay runs well below the raw puts' rate (the table says how far).", endpointSessionMessages)
		w("")
		w("| sync | runtimes | KV puts/s | relay/s | in process/s | below/s | ratio | ÷ relay | passing/s | ratio | prepared | process CPU, put | in process | below | passing | server CPU, below |")
		w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
		for _, e := range r.Endpoint {
			w("| %s | %d | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.0f | %.2f | %d | %.3f | %.3f | %.3f | %.3f | %.3f |", e.Sync, e.Runtimes, e.Floor, e.Relay, e.InProcess, e.Below, e.BelowRatio, e.RelayRatio,
				e.Passing, e.PassingRatio, e.Prepared, e.FloorClientMS, e.InProcessMS, e.BelowProcessMS, e.PassingProcessMS, e.BelowServerMS)
		}
		w("")
		if len(r.Lengths) > 0 {
			w("One runtime appending to a session that holds some messages already (gpt-4.1, below prepare_at; the second server):")
			w("")
			w("| messages in the session | appends/s | ms per append | process CPU | server CPU |")
			w("| ---: | ---: | ---: | ---: | ---: |")
			for _, l := range r.Lengths {
				w("| %d | %.0f | %.3f | %.3f | %.3f |", l.Messages, l.Appends, l.MSPer, l.ProcessMS, l.ServerMS)
			}
			w("")
		}
	}
}

// mdDurability writes the section of the appends at each way of syncing the store.
func (r *ScaleReport) mdDurability(w func(string, ...any)) {
	if len(r.Durability) > 0 {
		w("## Durability")
		w("")
		w("What an acknowledged write survives depends on when the server syncs its store to disk (fsync). `always` (nats.conf, the embedded server of `compactor serve`): a write is on disk before it is acknowledged, and survives a power loss or kernel panic. `1s` (deploy/nats-cluster.conf): a write is acknowledged once a quorum of its stream's replicas holds it, and on their disks within a second; it is lost only if two of three nodes fail within that second, so the nodes must fail apart (separate hosts or zones). nats-server's default, `2m0s`, loses the last two minutes' writes of a node that loses power. 8 runtimes appending, and raw KV puts, on one node per row (the tables above run on `always`):")
		w("")
		w("| sync | KV puts/s | appends/s | appends against `always` |")
		w("| --- | ---: | ---: | ---: |")
		base := r.Durability[0].Appends
		for _, d := range r.Durability {
			w("| %s | %.0f | %.0f | %.2fx |", d.Sync, d.Floor, d.Appends, d.Appends/max(base, 1))
		}
		w("")
	}
}

// mdPerMessage writes the section of what a message costs.
func (r *ScaleReport) mdPerMessage(w func(string, ...any)) {
	p := r.PerMsg
	w("## What a message costs")
	w("")
	w("%d messages in %d sessions of 100, appended one at a time by 64 runtimes, against the same bytes as KV values, one key each.", p.Messages, p.Sessions)
	w("")
	w("| per message | store | KV, a key per message |")
	w("| --- | ---: | ---: |")
	w("| stream subjects | %.3f | %.3f |", p.Subjects, p.FloorSubjects)
	w("| stream bytes | %.0f | %.0f |", p.Bytes, p.FloorBytes)
	if p.MemoryMeasurable {
		w("| nats-server memory (live heap) | %.0f B | %.0f B |", p.ServerMemory, p.FloorMemory)
	}
	w("")
	if p.MemoryMeasurable {
		w("Memory is measured apart, on a fresh server: its live heap after a full collection, before the writes, after the KV values and after the sessions, each once the block caches of the writes have expired (11 s), divided by the messages. It is what the server keeps for the data (chiefly its index of subjects), not the garbage or the caches of the writes.")
		w("")
	}
	w("A session holds %.1f subjects (its record, its log, its compactions and preparation when it has them); its record is %.0f bytes.", p.SubjectsPerSess, p.RecordBytes)
	w("")
}

// mdSweep writes the section of the idle sweep.
func (r *ScaleReport) mdSweep(w func(string, ...any)) {
	w("## The idle sweep")
	w("")
	w("One sweep with nothing to delete (every record read once, by the replica holding the sweep lease) against reading as many records from a bucket of records only.")
	w("")
	w("| sessions | sweep | records only | ratio | µs per session | peak server memory growth |")
	w("| ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range r.Sweeps {
		w("| %d | %.0f ms | %.0f ms | %.2f | %.1f | %.1f MB |", s.Sessions, s.SweepMS, s.FloorMS, s.Ratio, s.PerSessionUS, s.PeakGrowthMB)
	}
	w("")
}

// mdCompactions writes the section of compactions per second against the floor.
func (r *ScaleReport) mdCompactions(w func(string, ...any)) {
	if c := r.Compact; c != nil {
		w("## Compactions per second")
		w("")
		w("%d compactions of 50-message sessions, %d at once, through the service with an instant model, against the floor (the same JetStream reads and writes by a minimal program): %.0f/s against %.0f/s, **%.2fx**. With the extractive summariser: %.0f/s (%.2fx).", c.Requests, c.Concurrency, c.Instant, c.Floor, c.InstantRatio, c.Service, c.Ratio)
		w("")
	}
}

// mdCluster writes the section of three nodes against one.
func (r *ScaleReport) mdCluster(w func(string, ...any)) {
	if c := r.Cluster; c != nil {
		t := c.Replicated
		w("## Three nodes against one")
		w("")
		w("%d runtimes appending, on one node (R1) and on a three-node cluster in this process (R3: every write replicated twice more, the leaders balanced over the nodes), each with %d shards. On this machine the three nodes share its %d cores, so the three-node figure cannot be higher for capacity; what shows that the cluster would scale is where the leaders are and how the appends spread over them.", c.Runtimes, r.Shards, r.Machine.Cores)
		w("")
		w("| | appends/s | KV puts/s on the same servers |")
		w("| --- | ---: | ---: |")
		w("| one node | %.0f | |", c.OneNode)
		w("| three nodes, R3 | %.0f (%.2fx) | %.0f |", t.Appends, t.Ratio, t.Floor)
		w("")
		w("Leaders (node of each stream): %s, on %d nodes. Appends per leader node (of the data streams): %s; the busiest took %.2fx an even third.", leadersText(t.Leaders), t.Nodes, perNodeText(t.PerNode), t.Imbalance)
		w("")
	}
}

// mdEval writes the section of eval through the service against in process.
func (r *ScaleReport) mdEval(w func(string, ...any)) {
	if ev := r.Eval; ev != nil {
		w("## eval through the service")
		w("")
		w("`compactor eval` replays %d conversations (the LoCoMo conversations and agent trajectories of the shared data) at a %d-token limit, incrementally, with the extractive summariser: in process, and through the service as a runtime uses it (an embedded server, sessions in the store, requests and results as CloudEvents). The replays alone are timed.", ev.Sessions, ev.Limit)
		w("")
		w("| | seconds | compactions |")
		w("| --- | ---: | ---: |")
		w("| in process | %.1f | %d |", ev.InProcessS, ev.InProcessCompactions)
		w("| through the service | %.1f (%.2fx) | %d |", ev.ServiceS, ev.Ratio, ev.ServiceCompactions)
		w("")
	}
}

// mdSizing writes the section of the sizing model.
func (r *ScaleReport) mdSizing(w func(string, ...any)) {
	w("## Sizing")
	w("")
	w("From the figures above (%s). Memory is the server's live heap per message and disk the stream bytes per message measured above, both per replica; server cores are the whole cluster's.", r.SizingFor)
	w("")
	w("| live sessions | messages | appends/s | disk per replica | server memory per replica | server cores, all nodes | service cores | shards | nodes | sweep | what limits it |")
	w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, s := range r.Sizing {
		w("| %d | %.0e | %.0f | %.1f GB | %.1f GB | %.1f | %.1f | %d | %d | %.0f s | %s |", s.Sessions, s.Messages, s.AppendsPerS, s.DiskGB, s.MemoryGB, s.ServerCores, s.ServiceCores, s.Shards, s.Nodes, s.SweepS, s.Limit)
	}
	w("")
}

// leadersText lists each stream's leader node, by stream.
func leadersText(m map[string]int) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s on node %d", k, m[k]))
	}
	return strings.Join(out, ", ")
}

// perNodeText lists a figure per node, by node.
func perNodeText(m map[int]int) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("node %d: %d", k, m[k]))
	}
	return strings.Join(out, ", ")
}
