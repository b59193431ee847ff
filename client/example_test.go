package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
)

// startService runs the compactor on an embedded NATS server, as `compactor
// serve` does, with the offline summariser; a runtime connects to yours.
func startService(dir string) (*app.App, error) {
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil, err
	}
	return app.Start(context.Background(), app.Config{Provision: true, Embedded: embedded.Options{Port: -1, DataDir: dir},
		Pipeline: pipeline.DefaultConfig(), Summarizer: extractive.New(counter)})
}

// The runtime loop: keep the session in the service, send the model its
// context, and when the context is over budget ask for a compaction and
// wait for its one result.
func Example() {
	dir, _ := os.MkdirTemp("", "compactor-example")
	defer os.RemoveAll(dir)
	svc, err := startService(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer svc.Stop()

	nc, err := nats.Connect(svc.URL)
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

	const limit = 1500
	if _, err := c.Create(ctx, client.CreateRequest{SessionID: "trip-42", Model: "gpt-4o", ContextLimit: limit,
		Messages: []client.Message{client.Text("sys", client.System, "You are a travel agent. Keep answers short.")}}); err != nil {
		log.Fatal(err)
	}
	compactions := 0
	for turn := range 30 {
		// Ids make every append safe to repeat after a timeout.
		if _, err := c.Append(ctx, "trip-42", []client.Message{
			client.Text(fmt.Sprintf("u%d", turn), client.User, fmt.Sprintf("Day %d: which museum should I visit in Lisbon, and how do I get there from the hotel?", turn+1)),
			client.Text(fmt.Sprintf("a%d", turn), client.Assistant, fmt.Sprintf("On day %d visit museum number %d; take tram 28 from the hotel, it takes about twenty minutes.", turn+1, turn+1)),
		}); err != nil {
			log.Fatal(err)
		}
		view, err := c.Context(ctx, "trip-42")
		if err != nil {
			log.Fatal(err)
		}
		if view.Tokens <= limit {
			continue // send view.Messages to the model
		}
		res, err := c.Compact(ctx, client.CompactRequest{Data: client.RequestData{SessionID: "trip-42", ContextLimit: limit, RequestedTokens: view.Tokens}})
		if err != nil {
			log.Fatal(err)
		}
		if !res.OK() {
			log.Fatalf("compaction failed: %s: %s", res.Failed.Reason, res.Failed.Error)
		}
		compactions++
	}
	view, err := c.Context(ctx, "trip-42")
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
