// Package wire converts between the service's own types and the public
// client's by their JSON, which is the contract both follow: a session's
// messages read from a file into the client's messages, a client's result
// into the pipeline's, for the service's tools and tests.
package wire

import (
	"encoding/json"
	"fmt"
)

// Convert returns from as a To, through its JSON.
func Convert[To, From any](from From) (To, error) {
	var to To
	b, err := json.Marshal(from)
	if err != nil {
		return to, fmt.Errorf("wire: %T: %w", from, err)
	}
	if err := json.Unmarshal(b, &to); err != nil {
		return to, fmt.Errorf("wire: %T as %T: %w", from, to, err)
	}
	return to, nil
}

// Must is Convert for values that always convert (the service's own
// types into the client's); it panics otherwise.
func Must[To, From any](from From) To {
	to, err := Convert[To](from)
	if err != nil {
		panic(err)
	}
	return to
}
