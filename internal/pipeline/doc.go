// Package pipeline is the compaction core. A compaction is a sequence of
// named steps, each a separate, mostly pure function: overflow (is one
// needed), select (where the raw tail starts), reduce (the ladder: clear
// old tool results, then summarise, each only while the context is still
// over its target), assemble (the compaction message and the context it
// leaves), verify (its invariants), progress (it cut enough), commit. The
// Service composes them (Service.attempt, in that order) over the small
// interfaces the package declares (SessionStore, BreakerStore, Summarizer).
//
// One file per job: types.go (requests, results, the interfaces), config.go,
// compact.go (the orchestrator: Service.Compact and its attempt), overflow.go,
// select.go, plan.go (the plan a reduction works from), clear.go and
// prune.go (clearing tool output), summarise.go, prompt.go and
// instructions.go (what the summary model is sent), ledger.go (the facts a
// summary must keep), verify.go (the invariants), prepare.go (making a
// compaction ahead, in the background) and fromprepared.go (answering a
// request from one), errors.go.
package pipeline
