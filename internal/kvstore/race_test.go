//go:build race

package kvstore_test

// raceEnabled scales the large-session test down under the race detector;
// make test runs it in full without.
const raceEnabled = true
