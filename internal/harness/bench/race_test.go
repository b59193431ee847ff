//go:build race

package bench

// raceEnabled: the paced comparison runs in make test's second pass,
// without the race detector (it measures nothing under it).
const raceEnabled = true
