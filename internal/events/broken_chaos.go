//go:build chaosbroken

package events

import "sync/atomic"

// A deliberately broken build (go build -tags chaosbroken), for the test
// that shows `compactor chaos` failing: every second result event is
// dropped while its publish reports success, as a service that loses
// results would.
func init() {
	var n atomic.Int64
	dropResult = func() bool { return n.Add(1)%2 == 0 }
}
