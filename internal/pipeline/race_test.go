//go:build race

package pipeline_test

// raceEnabled scales the heavy tests down under the race detector, which
// slows tokenising tenfold; `make test` runs them in full without it.
const raceEnabled = true
