//go:build race

package eval_test

// raceEnabled skips the heavy replays under the race detector, which slows
// tokenising tenfold; `make test` runs them without it.
const raceEnabled = true
