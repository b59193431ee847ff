package bench

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strings"

	"github.com/compactor/compactor/internal/harness/eval"
)

// Markdown renders the report as docs/BENCHMARKS.md; chart is the SVG's
// file name beside it.
func (r *Report) Markdown(chart string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Benchmarks\n\n")
	w("Written by `make bench` (`%s`) on %s in %.0f s. Do not edit: run it again.\n\n", r.Command, r.Started.Format("2006-01-02 15:04 UTC"), r.Seconds)
	m := r.Machine
	w("Machine: %s, %d cores, %s memory, %s, %s. One process holds an embedded nats-server (JetStream, file storage, R1), "+
		"the service as `serve` wires it (8 workers, the durable consumer, KV stores), the floor and the clients.\n\n", m.CPU, m.Cores, m.Memory, m.Go, m.OS)
	w("![Overhead and model cost against session length](%s)\n\n", chart)

	for _, section := range []func(func(string, ...any)){r.mdOverhead, r.mdThroughput, r.mdModelCost, r.mdScale, r.mdLadder, r.mdPrepared, r.mdLong, r.mdWindow, r.mdDrift} {
		section(w)
	}
	w("\n## Against the thresholds\n\n")
	for _, f := range r.Flags() {
		w("- %s\n", f)
	}
	return b.String()
}

// mdOverhead writes the section of the overhead per compaction against the floor.
func (r *Report) mdOverhead(w func(string, ...any)) {
	w("## 1. Overhead per compaction\n\n")
	w("A runtime publishes a `ContextOverBudget` event for a session that has outgrown its %d-token window (two thirds of a shorter one) and waits for the "+
		"`CompactionCompleted` event. *End to end* is that wait; *model* is the time inside the summariser (the offline `extractive` one); "+
		"*overhead* is end to end less model: everything the service adds. The *floor* is a minimal program doing only the JetStream work "+
		"one compaction needs, driven by the same client the same way: pull the request, read the session's record and messages in one "+
		"batched direct get, create the compaction message and compare-and-set the record, publish the result, double-ack. Service and "+
		"floor requests alternate, each on a fresh session of real text (the bundled tau-bench run, cycled to length).\n\n", benchLimit)
	w("| messages | tokens | samples | end to end p50 / p99 (ms) | model p50 (ms) | overhead p50 / p99 (ms) | floor p50 / p99 (ms) | overhead ÷ floor p50 / p99 |\n")
	w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, o := range r.Overhead {
		w("| %d | %d | %d | %.2f / %.2f | %.2f | %.2f / %.2f | %.2f / %.2f | **%.1f×** / %.1f× |\n", o.Messages, o.Tokens, o.Samples,
			o.EndToEnd.P50, o.EndToEnd.P99, o.Model.P50, o.Overhead.P50, o.Overhead.P99, o.Floor.P50, o.Floor.P99, o.RatioP50, o.RatioP99)
	}
}

// mdThroughput writes the section of compactions per second against the floor.
func (r *Report) mdThroughput(w func(string, ...any)) {
	w("\n## 2. Throughput\n\n")
	w("Compactions per second of 50-message sessions with 1, 8 and 64 runtimes each waiting for its result before the next request. " +
		"The service runs with the extractive model (whose CPU time is most of a compaction here) and with an *instant* model that answers " +
		"a fixed summary at once, which isolates the service's own capacity; the floor runs 8 workers like the service.\n\n")
	w("| concurrency | requests | service, extractive (/s) | service, instant model (/s) | floor (/s) | extractive ÷ floor | instant ÷ floor |\n")
	w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, t := range r.Throughput {
		w("| %d | %d | %.0f | %.0f | %.0f | %.2f | **%.2f** |\n", t.Concurrency, t.Requests, t.Service, t.Instant, t.Floor, t.Ratio, t.InstantRatio)
	}
}

// mdModelCost writes the section of the model cost over the LoCoMo replay.
func (r *Report) mdModelCost(w func(string, ...any)) {
	w("\n## 3. Model cost\n\n")
	if len(r.ModelCost) == 0 {
		w("%s.\n", r.CostNote)
	} else {
		w("Each LoCoMo conversation replayed through the runtime loop (`compactor eval`'s: messages arrive one by one; whenever the " +
			"context is over the limit the runtime requests a compaction; the context's invariants are checked after each). The floor is " +
			"reading each of the conversation's tokens once; the figures are the summary model's input tokens over it, incremental " +
			"(`enable_incremental`, the default: only what is new since the last compaction, then a merge) and from scratch (everything " +
			"summarised so far, every time). Retention is the LoCoMo measure of the core issue: the share of answers whose evidence was " +
			"summarised that the final context still holds.\n\n")
		w("| limit | conversation | messages | tokens (floor) | incremental input | ÷ floor | compactions | retention | from scratch input | ÷ floor | compactions | retention |\n")
		w("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		type total struct{ tokens, inc, scr, incC, scrC, elig, incK, scrK int }
		totals := map[int]*total{}
		var limits []int
		for _, c := range r.ModelCost {
			w("| %d | %s | %d | %d | %d | %.2f× | %d | %.1f %% | %d | %.2f× | %d | %.1f %% |\n", c.Limit, c.Conversation, c.Messages, c.Tokens,
				c.IncrementalInput, c.IncrementalRatio, c.IncrementalCompac, 100*c.IncrementalKept, c.ScratchInput, c.ScratchRatio, c.ScratchCompac, 100*c.ScratchKept)
			t := totals[c.Limit]
			if t == nil {
				t = &total{}
				totals[c.Limit] = t
				limits = append(limits, c.Limit)
			}
			t.tokens += c.Tokens
			t.inc += c.IncrementalInput
			t.scr += c.ScratchInput
			t.incC += c.IncrementalCompac
			t.scrC += c.ScratchCompac
			t.elig += c.Eligible
			t.incK += c.IncrementalHits
			t.scrK += c.ScratchHits
		}
		sort.Ints(limits)
		for _, l := range limits {
			t := totals[l]
			share := func(k int) float64 { return 100 * float64(k) / float64(max(t.elig, 1)) }
			w("| %d | **all** | | %d | %d | **%.2f×** | %d | %.1f %% | %d | **%.2f×** | %d | %.1f %% |\n", l, t.tokens, t.inc, float64(t.inc)/float64(t.tokens), t.incC,
				share(t.incK), t.scr, float64(t.scr)/float64(t.tokens), t.scrC, share(t.scrK))
		}
	}
}

// mdScale writes the section of one compaction of a long session.
func (r *Report) mdScale(w func(string, ...any)) {
	w("\n## 4. Scale\n\n")
	w("One compaction of a long session on the KV store (its first: everything before the tail is summarised, chunked to the summary " +
		"model's window and merged), with the heap sampled every millisecond while it runs (peak above the heap before it).\n\n")
	w("| messages | tokens | text (KB) | time (ms) | model (ms) | model calls | peak heap (MB) |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range r.Scale {
		w("| %d | %d | %d | %.0f | %.0f | %d | %.1f |\n", s.Messages, s.Tokens, s.Bytes>>10, s.Millis, s.ModelMs, s.LLMCalls, s.PeakHeapMB)
	}
	if n := len(r.Scale); n >= 2 {
		a, z := r.Scale[0], r.Scale[n-1]
		w("\nFrom %d to %d messages (%.1f× the tokens): time %.1f×, peak heap %.1f× — %s.\n", a.Messages, z.Messages,
			float64(z.Tokens)/float64(a.Tokens), z.Millis/a.Millis, z.PeakHeapMB/math.Max(a.PeakHeapMB, 0.1), linearity(float64(z.Tokens)/float64(a.Tokens), z.Millis/a.Millis))
	}
}

// mdLadder writes the section of the reduction ladder against summary only.
func (r *Report) mdLadder(w func(string, ...any)) {
	w("\n## 5. The reduction ladder against summary only\n\n")
	if len(r.Ladder) == 0 {
		w("%s.\n", r.LadderNote)
	} else {
		w("Every conversation replayed through the runtime loop twice in this run, with the ladder (clear old tool results, then summarise: " +
			"the default) and with summary only; the token limit is the only trigger. Summary input is what a model would be charged; " +
			"prefix kept is the leading tokens of the new context identical to the old one (a provider's cached prefix stays valid up to there); " +
			"pinned head kept is the share of the pinned messages before the summary (the system prompt, the task) that stayed in that prefix.\n\n")
		w("| set | limit | sessions | compactions (ladder / summary) | without a model call | summary input (ladder / summary) | ratio | mean prefix kept (ladder / summary) | pinned head kept (ladder / summary) | tokens saved (ladder / summary) | LoCoMo retention (ladder / summary) |\n")
		w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, l := range r.Ladder {
			ret := "-"
			if l.Ladder.Retention != nil && l.Ladder.Retention.Eligible > 0 {
				ret = fmt.Sprintf("%.1f %% / %.1f %%", 100*l.Ladder.Share, 100*l.SummaryOnly.Share)
			}
			ratio := "-"
			if l.SummaryOnly.InputTokens > 0 {
				ratio = fmt.Sprintf("**%.2f×**", l.InputRatio)
			}
			head := "-"
			if l.Ladder.PinnedHead > 0 && l.SummaryOnly.PinnedHead > 0 {
				head = fmt.Sprintf("%.0f %% / %.0f %%", 100*l.Ladder.HeadKept, 100*l.SummaryOnly.HeadKept)
			}
			w("| %s | %d | %d | %d / %d | %d (%.0f %%) | %d / %d | %s | %.0f / %.0f | %s | %d / %d | %s |\n", l.Set, l.Limit, l.Sessions,
				l.Ladder.Compactions, l.SummaryOnly.Compactions, l.Ladder.NoModel, 100*l.Ladder.NoModelShare, l.Ladder.InputTokens, l.SummaryOnly.InputTokens,
				ratio, l.Ladder.MeanPrefixKept, l.SummaryOnly.MeanPrefixKept, head, l.Ladder.TokensSaved, l.SummaryOnly.TokensSaved, ret)
		}
	}
}

// mdPrepared writes the section of prepared compactions against blocking ones.
func (r *Report) mdPrepared(w func(string, ...any)) {
	w("\n## 6. Prepared compactions against blocking ones\n\n")
	if c := r.Prepared; c == nil {
		w("%s.\n", r.PreparedNote)
	} else {
		w("Every conversation and trajectory replayed through the service twice in this run, all sessions at once: with preparations off "+
			"(`prepare_at 0`: the request waits for the summary model) and on (`prepare_at 0.7`). Each runtime appends its messages through "+
			"`compactor.session.append` at %.2f× a real agent loop's pace (an assistant message 0.5 s plus 100 tokens/s, a tool result 0.3 s, "+
			"a user message 0.5 s plus 100 tokens/s), asks for a compaction (`ContextOverBudget`) whenever its context is over %d tokens and waits "+
			"for the result before going on. The summary model is an OpenAI-compatible stand-in whose every call takes %d ms and answers the "+
			"extractive summary of the transcript it is sent. A preparation was *possible* for a request that needed a model (one was called, "+
			"or a prepared summary committed; a compaction that clearing settles is instant in both modes) when its session had passed "+
			"`prepare_at` at least one model call's time before it. Latencies are request to result, in ms.\n\n", c.Pace, c.Prepared.Limit, c.ModelDelayMS)
		preparedTable(w, c)
		var sets []string
		for s := range c.Prepared.BySet {
			sets = append(sets, s)
		}
		sort.Strings(sets)
		if len(sets) > 0 {
			w("\nWhere a preparation was possible, by data set (prepared mode against blocking; p50 / p95 in ms):\n\n| set | requests | from a preparation | prepared p50 / p95 | blocking p50 / p95 |\n| --- | ---: | ---: | ---: | ---: |\n")
			for _, s := range sets {
				p, b := c.Prepared.BySet[s], c.Blocking.BySet[s]
				w("| %s | %d | %d | %.0f / %.0f | %.0f / %.0f |\n", s, p.Possible, p.FromPreparation, p.Latency.P50, p.Latency.P95, b.Latency.P50, b.Latency.P95)
			}
		}
	}
}

// mdLong writes the section of prepared compactions on the long agent runs.
func (r *Report) mdLong(w func(string, ...any)) {
	w("\n## 7. Prepared compactions on long agent runs\n\n")
	if len(r.Long) == 0 {
		w("%s.\n", r.LongNote)
	} else {
		w("The long agent runs of `agent_trajectories/long` (mini-swe-agent and OpenHands, 75k-290k tokens each) replayed as in section 6, "+
			"at windows where agents work, at %gx a real agent loop's pace%s.\n", r.Long[0].Pace, together(r.Long[0], ", one window after the other"))
		for _, c := range r.Long {
			w("\n### %d tokens\n\n", c.Prepared.Limit)
			preparedTable(w, c)
		}
	}
}

// mdWindow writes the section of prepared compactions on the bundled sets at a real pace.
func (r *Report) mdWindow(w func(string, ...any)) {
	w("\n## 8. Prepared compactions on the bundled sets at a real pace\n\n")
	if c := r.Window; c == nil {
		w("%s.\n", r.WindowNote)
	} else {
		w("Section 6's replay again, at %d tokens and %gx a real agent loop's pace%s: the goals of issue 26 on the bundled sets.\n\n", c.Prepared.Limit, c.Pace,
			together(c, ""))
		preparedTable(w, c)
	}
}

// driftFlags are the drift suite's lines against its goals.
func (r *Report) driftFlags() []string {
	var out []string
	for _, d := range r.Drift {
		out = append(out, fmt.Sprintf("Drift at %d tokens: %d compactions, locked decisions, forbidden actions, the latest instruction and the focus after every one, "+
			"no superseded instruction stated current, no finished item stated pending: %s.", d.Limit, d.Compactions, map[bool]string{true: "met", false: "**missed**"}[d.Met()]))
	}
	return out
}

// mdDrift writes the section of the drift suite.
func (r *Report) mdDrift(w func(string, ...any)) {
	w("\n## 9. Drift across many compactions\n\n")
	cases := 0
	if len(r.Drift) > 0 {
		cases = r.Drift[0].Cases
	}
	w("`compactor eval drift`: %d made agent sessions (Claude Code or OpenHands tools, a TodoWrite or task_tracker plan, varied phrasing, values and output sizes) "+
		"with a locked decision, a forbidden action, an instruction a later one supersedes, a plan whose items finish one by one and a focus text the requests carry, "+
		"compacted incrementally by the offline summariser; each fact checked after every compaction that summarised its message.\n\n", cases)
	w("| limit | compactions (fewest in a session) | locked decision | forbidden action | latest instruction | focus | finished plan items stated finished | superseded stated current | done items stated pending | goals |\n")
	w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, d := range r.Drift {
		share := func(k string) string {
			t := d.Scores[k]
			return fmt.Sprintf("%d / %d", t.Kept, t.Checks)
		}
		w("| %d | %d (%d) | %s | %s | %s | %s | %s | %d | %d | %s |\n", d.Limit, d.Compactions, d.MinCompactions, share(eval.DriftLocked), share(eval.DriftForbidden),
			share(eval.DriftLatest), share(eval.DriftFocus), share(eval.DriftPlanStatus), d.SupersededCurrent, d.DonePending, map[bool]string{true: "met", false: "**missed**"}[d.Met()])
	}
}

// together says how a comparison's modes ran, when at once (more says
// what else ran beside them).
func together(c *PreparedComparison, more string) string {
	if !c.Together {
		return ""
	}
	return ", the two modes at the same time" + more + " (each with its own server, service and stand-in model: a replay at this pace mostly waits)"
}

// preparedTable writes a comparison's two modes and their ratios.
func preparedTable(w func(string, ...any), c *PreparedComparison) {
	w("| mode | requests | compacted | from a preparation (no model call) | topped up | no model call at all | p50 | p95 | p99 | where possible: n | p50 | p95 | p99 | model calls (preparations) | summary input tokens (preparations) | wasted tokens | LoCoMo retention |\n")
	w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, m := range []PreparedRow{c.Blocking, c.Prepared} {
		w("| %s | %d | %d | %d | %d | %d | %.0f | %.0f | %.0f | %d | %.0f | %.0f | %.0f | %d (%d) | %d (%d) | %d | %.1f %% |\n", m.Mode, m.Requests, m.Compacted,
			m.FromPreparation, m.TopUps, m.NoModelCall, m.Latency.P50, m.Latency.P95, m.Latency.P99, m.LatencyPossible.N, m.LatencyPossible.P50,
			m.LatencyPossible.P95, m.LatencyPossible.P99, m.ModelCalls, m.PrepCalls, m.InputTokens, m.PrepInputTokens, m.WastedTokens, 100*m.RetentionShare)
	}
	w("\nSummary input, prepared over blocking: **%.2f×** (%.2f× leaving out the preparations of the %d sessions that ended short of their limit, %d input tokens, which blocking never pays); "+
		"p95 where a preparation was possible, blocking over prepared: **%.1f×**.\n", c.InputRatio, c.InputRatioReached, c.Prepared.UnusedAtEnd, c.Prepared.UnusedAtEndInput, c.Speedup)
}

func linearity(growth, cost float64) string {
	if cost <= 1.25*growth {
		return "linear"
	}
	return "super-linear"
}

// Flags lists each figure against the thresholds: overhead at most
// 2× the floor, throughput at least half of it, incremental model cost at
// most 1.5× reading each token once, linear scaling.
func (r *Report) Flags() []string {
	var out []string
	mark := func(ok bool) string {
		if ok {
			return "within"
		}
		return "**over**"
	}
	for _, o := range r.Overhead {
		out = append(out, fmt.Sprintf("Overhead at %d messages: %.1f× the floor (p50): %s 2×.", o.Messages, o.RatioP50, mark(o.RatioP50 <= 2)))
	}
	for _, t := range r.Throughput {
		out = append(out, fmt.Sprintf("Throughput ×%d: the service's own capacity (instant model) is %.2f of the floor's, %.2f with the extractive model: %s half.",
			t.Concurrency, t.InstantRatio, t.Ratio, map[bool]string{true: "at or above", false: "**below**"}[t.InstantRatio >= 0.5]))
	}
	limits := map[int][2]int{}
	for _, c := range r.ModelCost {
		v := limits[c.Limit]
		limits[c.Limit] = [2]int{v[0] + c.Tokens, v[1] + c.IncrementalInput}
	}
	keys := make([]int, 0, len(limits))
	for k := range limits {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, l := range keys {
		v := limits[l]
		ratio := float64(v[1]) / float64(max(v[0], 1))
		out = append(out, fmt.Sprintf("Incremental model cost at %d tokens: %.2f× reading each token once: %s 1.5×.", l, ratio, mark(ratio <= 1.5)))
	}
	if n := len(r.Scale); n >= 2 {
		a, z := r.Scale[0], r.Scale[n-1]
		g := float64(z.Tokens) / float64(a.Tokens)
		out = append(out, fmt.Sprintf("Scale %d → %d messages: time %.1f× for %.1f× the tokens: %s.", a.Messages, z.Messages, z.Millis/a.Millis, g, linearity(g, z.Millis/a.Millis)))
	}
	out = append(out, r.driftFlags()...)
	if c := r.Prepared; c != nil {
		share := 0.0
		if c.Prepared.Compacted > 0 {
			share = float64(c.Prepared.FromPreparation) / float64(c.Prepared.Compacted)
		}
		out = append(out, fmt.Sprintf("Prepared compactions: p95 where a preparation was possible %.0f ms against %.0f ms blocking (%.1f×): %s 50 ms and 40×; %.0f %% of compactions answered from a preparation.",
			c.Prepared.LatencyPossible.P95, c.Blocking.LatencyPossible.P95, c.Speedup, mark(c.Prepared.LatencyPossible.P95 <= 50 && c.Speedup >= 40), 100*share))
		out = append(out, fmt.Sprintf("Prepared compactions: summary input %.2f× blocking's (%.2f× without the sessions that ended short of their limit): %s 1.15×; LoCoMo retention %.1f %% against %.1f %%: %s.",
			c.InputRatio, c.InputRatioReached, mark(c.InputRatio <= 1.15), 100*c.Prepared.RetentionShare, 100*c.Blocking.RetentionShare,
			map[bool]string{true: "no lower", false: "**lower**"}[c.Prepared.RetentionShare >= c.Blocking.RetentionShare]))
	}
	agents := append([]*PreparedComparison{}, r.Long...)
	if r.Window != nil {
		agents = append(agents, r.Window)
	}
	for _, c := range agents {
		from := 0
		for _, s := range c.Prepared.BySet {
			from += s.FromPreparation
		}
		share := 0.0
		if c.Prepared.Possible > 0 {
			share = float64(from) / float64(c.Prepared.Possible)
		}
		out = append(out, fmt.Sprintf("Prepared at %d tokens, %gx pace: %d of %d possible from a preparation (%.0f %%), p95 there %.0f ms: %s 90 %% and 50 ms; "+
			"summary input %.2f× blocking's (%.2f× without the %d sessions that ended short of their limit): %s 1.15×.",
			c.Prepared.Limit, c.Pace, from, c.Prepared.Possible, 100*share, c.Prepared.LatencyPossible.P95,
			mark(share >= 0.9 && c.Prepared.LatencyPossible.P95 <= 50), c.InputRatio, c.InputRatioReached, c.Prepared.UnusedAtEnd, mark(c.InputRatio <= 1.15)))
	}
	for _, l := range r.Ladder {
		switch {
		case l.SummaryOnly.Compactions == 0:
			out = append(out, fmt.Sprintf("Ladder, %s at %d tokens: no session reaches the limit.", l.Set, l.Limit))
		case l.Set == "locomo":
			out = append(out, fmt.Sprintf("Ladder, LoCoMo at %d tokens: retention %.1f %% against %.1f %% with summary only: %s.", l.Limit,
				100*l.Ladder.Share, 100*l.SummaryOnly.Share, map[bool]string{true: "no lower", false: "**lower**"}[l.Ladder.Share >= l.SummaryOnly.Share]))
		default:
			out = append(out, fmt.Sprintf("Ladder, %s at %d tokens: summary input %.2f× summary only's: %s 0.5×; %d of %d compactions without a model call.",
				l.Set, l.Limit, l.InputRatio, mark(l.InputRatio <= 0.5), l.Ladder.NoModel, l.Ladder.Compactions))
		}
	}
	return out
}

// series is one line of a chart.
type series struct {
	name   string
	color  string
	dashed bool
	pts    [][2]float64
}

// SVG draws two panels: time per compaction against session length, and
// model input over the floor against conversation length.
func (r *Report) SVG() string {
	var b strings.Builder
	const W, H = 960, 400
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	var left []series
	e2e := series{name: "service, end to end", color: "#1f77b4"}
	over := series{name: "service overhead (less the model)", color: "#d62728"}
	floor := series{name: "JetStream floor", color: "#2ca02c", dashed: true}
	for _, o := range r.Overhead {
		e2e.pts = append(e2e.pts, [2]float64{float64(o.Messages), o.EndToEnd.P50})
		over.pts = append(over.pts, [2]float64{float64(o.Messages), o.Overhead.P50})
		floor.pts = append(floor.pts, [2]float64{float64(o.Messages), o.Floor.P50})
	}
	left = append(left, e2e, over, floor)
	panel(&b, 70, 40, 380, 290, "Time per compaction (p50)", "session length (messages)", "ms", left, 0)

	colors := map[string]string{"incremental": "#1f77b4", "scratch": "#ff7f0e"}
	byKey := map[string]*series{}
	var keys []string
	for _, c := range r.ModelCost {
		for _, mode := range []string{"incremental", "scratch"} {
			k := fmt.Sprintf("%s, limit %d", mode, c.Limit)
			s := byKey[k]
			if s == nil {
				s = &series{name: k, color: colors[mode], dashed: c.Limit != r.ModelCost[0].Limit}
				byKey[k] = s
				keys = append(keys, k)
			}
			y := c.IncrementalRatio
			if mode == "scratch" {
				y = c.ScratchRatio
			}
			s.pts = append(s.pts, [2]float64{float64(c.Tokens), y})
		}
	}
	var right []series
	for _, k := range keys {
		s := byKey[k]
		sort.Slice(s.pts, func(i, j int) bool { return s.pts[i][0] < s.pts[j][0] })
		right = append(right, *s)
	}
	if len(right) == 0 {
		fmt.Fprintf(&b, `<text x="720" y="180" text-anchor="middle">model cost: %s</text>`+"\n", html.EscapeString(r.CostNote))
	} else {
		panel(&b, 560, 40, 380, 290, "Summary-model input ÷ reading each token once", "conversation length (tokens)", "× floor", right, 1)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// panel draws a log-log chart of series at (x0, y0) sized w×h; hline, when
// positive, draws a reference line at that y.
func panel(b *strings.Builder, x0, y0, w, h float64, title, xlabel, ylabel string, ss []series, hline float64) {
	minX, maxX, minY, maxY := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, p := range s.pts {
			if p[0] <= 0 || p[1] <= 0 {
				continue
			}
			minX, maxX = math.Min(minX, p[0]), math.Max(maxX, p[0])
			minY, maxY = math.Min(minY, p[1]), math.Max(maxY, p[1])
		}
	}
	if hline > 0 {
		minY, maxY = math.Min(minY, hline), math.Max(maxY, hline)
	}
	if math.IsInf(minX, 0) {
		return
	}
	lx0, lx1 := niceLog(minX, false), niceLog(maxX, true)
	ly0, ly1 := niceLog(minY, false), niceLog(maxY, true)
	if lx1 <= lx0 {
		lx1 = lx0 + 1
	}
	if ly1 <= ly0 {
		ly1 = ly0 + 1
	}
	px := func(x float64) float64 { return x0 + w*(math.Log10(x)-lx0)/(lx1-lx0) }
	py := func(y float64) float64 { return y0 + h - h*(math.Log10(y)-ly0)/(ly1-ly0) }
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-size="14" font-weight="bold">%s</text>`+"\n", x0, y0-14, html.EscapeString(title))
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, w, h)
	for _, v := range ticks(lx0, lx1) {
		x := px(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#eee"/><text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%s</text>`+"\n",
			x, y0, x, y0+h, x, y0+h+16, short(v))
	}
	for _, v := range ticks(ly0, ly1) {
		y := py(v)
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n",
			x0, y, x0+w, y, x0-6, y+4, short(v))
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x0+w/2, y0+h+34, html.EscapeString(xlabel))
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle" transform="rotate(-90 %.0f %.0f)">%s</text>`+"\n", x0-44, y0+h/2, x0-44, y0+h/2, html.EscapeString(ylabel))
	if hline > 0 {
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#2ca02c" stroke-dasharray="6 4"/><text x="%.0f" y="%.1f" fill="#2ca02c">floor</text>`+"\n",
			x0, py(hline), x0+w, py(hline), x0+w-34, py(hline)-4)
	}
	for i, s := range ss {
		var pts []string
		for _, p := range s.pts {
			if p[0] > 0 && p[1] > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
			}
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.color, dash)
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], s.color)
		}
		ly := y0 + 14 + float64(i)*16
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="2"%s/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			x0+10, ly-4, x0+30, ly-4, s.color, dash, x0+36, ly, html.EscapeString(s.name))
	}
}

// ticks are the 1-2-5 values between 10^lo and 10^hi.
func ticks(lo, hi float64) []float64 {
	var out []float64
	for e := math.Floor(lo); e <= hi; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if l := math.Log10(v); l >= lo-1e-9 && l <= hi+1e-9 {
				out = append(out, v)
			}
		}
	}
	return out
}

// niceLog is the log10 of the 1-2-5 step at or below v (up: at or above).
func niceLog(v float64, up bool) float64 {
	e := math.Floor(math.Log10(v))
	steps := []float64{1, 2, 5, 10}
	if up {
		for _, m := range steps {
			if m*math.Pow(10, e) >= v*(1-1e-9) {
				return math.Log10(m * math.Pow(10, e))
			}
		}
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i]*math.Pow(10, e) <= v*(1+1e-9) {
			return math.Log10(steps[i] * math.Pow(10, e))
		}
	}
	return e
}

// short writes an axis value: 50, 2k, 1M, 0.5.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}
