//go:build !race

package kvstore_test

const raceEnabled = false
