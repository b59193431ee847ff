package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// chatOf is a chat body of n turns, each a user message of some 80 words
// and an assistant's answer.
func chatOf(n int) []byte {
	msgs := []map[string]any{{"role": "system", "content": "You are a helpful assistant."}}
	for i := range n {
		msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("turn %d: %s", i, strings.Repeat("please check the build logs again ", 12))},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("answer %d: %s", i, strings.Repeat("the tests pass now ", 10))})
	}
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs})
	return b
}

// BenchmarkRead is what reading a call costs per turn: its body parsed,
// its messages made the session's and chained.
func BenchmarkRead(b *testing.B) {
	for _, n := range []int{10, 120, 500} {
		body := chatOf(n)
		b.Run(fmt.Sprintf("turns=%d", n), func(b *testing.B) {
			ec := newElementCache(64 << 20)
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := chatAPI.read(body, ec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
