//go:build race

package main

// raceEnabled: the race detector is on; tests that build binaries or run
// heavy work leave it to make test's second pass.
const raceEnabled = true
