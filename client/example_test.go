package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/client"
)

// The runtime loop against the service at NATS_URL: keep the session in
// the service, send the model its context, and when the context is over
// budget ask for a compaction and wait for its one result.
func Example() {
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithSource("urn:example:runtime"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const sid, limit = "trip-42", 1500
	// A session of this id left by an earlier run goes first.
	if _, err := c.Delete(ctx, sid); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Create(ctx, sid, client.NewSession{Model: "gpt-4o", ContextLimit: limit,
		Messages: []client.Message{client.Text("sys", client.System, "You are a travel agent. Keep answers short.")}}); err != nil {
		log.Fatal(err)
	}
	compactions := 0
	for turn := range 30 {
		// Ids make every append safe to repeat after a timeout.
		if _, err := c.Append(ctx, sid, []client.Message{
			client.Text(fmt.Sprintf("u%d", turn), client.User, fmt.Sprintf("Day %d: which museum should I visit in Lisbon, and how do I get there from the hotel?", turn+1)),
			client.Text(fmt.Sprintf("a%d", turn), client.Assistant, fmt.Sprintf("On day %d visit museum number %d; take tram 28 from the hotel, it takes about twenty minutes.", turn+1, turn+1)),
		}); err != nil {
			log.Fatal(err)
		}
		view, err := c.Context(ctx, sid)
		if err != nil {
			log.Fatal(err)
		}
		if view.Tokens <= limit {
			continue // send view.Messages to the model
		}
		res, err := c.Compact(ctx, sid, client.CompactRequest{ContextLimit: limit, RequestedTokens: view.Tokens})
		var failed *client.FailedError
		switch {
		case errors.As(err, &failed):
			log.Fatalf("compaction failed: %s: %s (retryable: %v)", failed.Reason, failed.Error(), failed.Retryable)
		case err != nil:
			log.Fatal(err) // no result: send the same RequestID again
		}
		if res.Outcome == client.OutcomeCompacted {
			compactions++
		}
	}
	view, err := c.Context(ctx, sid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("compacted:", compactions > 0)
	fmt.Println("fits:", view.Tokens <= limit)
	fmt.Println("starts with the system prompt, then the summary:", view.Messages[0].Role == client.System && view.Messages[1].IsCompaction)
	fmt.Println("the last turn is kept raw:", view.Messages[len(view.Messages)-1].ID == "a29")
	// Output:
	// compacted: true
	// fits: true
	// starts with the system prompt, then the summary: true
	// the last turn is kept raw: true
}
