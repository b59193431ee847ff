package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/mcpserver"
)

// runMCP serves the recall tools for one session as an MCP server: over
// stdio (an agent CLI starts it), or over streamable HTTP with --http
// (/mcp for --session, /mcp/{session_id} for any of the user's tenant).
func runMCP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	sid := fs.String("session", "", "the `SESSION` id whose history the tools search and expand (with --http, optional: /mcp/{session_id} names one)")
	addr := fs.String("http", "", "serve streamable HTTP on `ADDR` (host:port) instead of stdio")
	pos, err := parseFlags(fs, args, stdout, "mcp --session ID [--http ADDR] [--nats-url URL] [--nats-creds FILE]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *sid == "" && *addr == "" {
		return fmt.Errorf("%w: --session is needed over stdio", errUsage)
	}
	if *sid != "" {
		if err := contract.CheckSessionID(*sid); err != nil {
			return fmt.Errorf("%w: --session: %v", errUsage, err)
		}
	}
	conn, err := nf.connect(ctx, "compactor-mcp", "the recall tools need the runtime user (compactor.session.search and .expand)")
	if err != nil {
		return err
	}
	defer conn.Close()
	c, err := client.New(conn.nc, client.WithSource(cliSource))
	if err != nil {
		return err
	}
	if *addr == "" {
		return mcpserver.New(c, *sid, buildVersion()).Run(conn.ctx, &mcp.StdioTransport{})
	}
	return serveMCPHTTP(conn.ctx, *addr, mcpserver.Handler(c, *sid, buildVersion()), stderr)
}

// serveMCPHTTP serves h on addr until ctx ends.
func serveMCPHTTP(ctx context.Context, addr string, h http.Handler, stderr io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	mux.Handle("/mcp/", h)
	fmt.Fprintf(stderr, "compactor mcp: streamable HTTP on http://%s/mcp\n", ln.Addr())
	return serveUntil(ctx, ln, mux, 5*time.Second)
}

// serveUntil serves h on ln until ctx ends, then lets the calls in flight
// finish within grace.
func serveUntil(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
