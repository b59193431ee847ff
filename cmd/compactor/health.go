package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// runHealth is `compactor health [URL]`: one probe of the service's HTTP
// address (default its /readyz on the metrics address), for a container
// healthcheck on an image with no shell or curl: exit 0 on a 2xx answer,
// 1 with what it said otherwise.
func runHealth(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	pos, err := parseFlags(fs, args, stdout, "health [URL] (default http://127.0.0.1:9464/readyz)")
	if err != nil {
		return err
	}
	url := "http://127.0.0.1:9464/readyz"
	switch len(pos) {
	case 0:
	case 1:
		url = pos[0]
	default:
		return fmt.Errorf("%w: one URL at most", errUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	_, err = fmt.Fprintf(stdout, "%s: %s\n", url, strings.TrimSpace(string(body)))
	return err
}
