// Package demo bundles the real conversation that `compactor demo` and the
// README's walk-through use: one GPT-4o airline-agent run from tau-bench
// (task 2, trial 1; MIT licence, © 2024 Sierra, in LICENSE.tau-bench beside
// this file). testdata/ links to the same files.
package demo

import _ "embed"

// Trajectory is the run as {"source": ..., "messages": [...]}: a policy
// system prompt, 62 messages, tool calls and results, 10,163 tokens.
//
//go:embed tau-bench-airline-task2.json
var Trajectory []byte

// License is tau-bench's MIT licence, which the trajectory is under.
//
//go:embed LICENSE.tau-bench
var License string

// Name is the trajectory's file name.
const Name = "tau-bench-airline-task2.json"
