// Package mcpserver is `compactor mcp`: the recall tools (search_history,
// expand_history; contract.RecallTools) as a Model Context Protocol
// server, over stdio or streamable HTTP, on the official Go SDK. Its
// tools answer for one session, through the service's endpoints, as the
// NATS user it connects as: a tenant's credentials reach that tenant's
// sessions only (nats.conf's imports), whatever a model asks.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
)

// Runner runs a recall tool call for a session: client.Client.RunTool.
type Runner interface {
	RunTool(ctx context.Context, sessionID, name string, args json.RawMessage) (string, error)
}

// New is an MCP server whose tools answer for session sid through r.
func New(r Runner, sid, version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "compactor", Title: "compactor recall", Version: version}, &mcp.ServerOptions{
		Instructions: "The conversation's earlier part was compacted: its summary stands for messages the model no longer sees. " +
			"search_history finds them (and cleared tool output) by words, names or identifiers; expand_history reads them back whole.",
	})
	for _, t := range contract.RecallTools {
		tool := &mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: t.Parameters,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}}
		s.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			text, err := r.RunTool(ctx, sid, t.Name, req.Params.Arguments)
			if err != nil {
				// The model is told what was wrong (a bad query, an
				// unknown compaction), as a tool error it can act on.
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: toolError(err)}}}, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
		})
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// toolError is err as the model reads it.
func toolError(err error) string {
	var e *client.Error
	switch {
	case errors.As(err, &e) && e.Code == 404:
		return "Not found: " + e.Message
	case errors.As(err, &e) && e.Code == 400:
		return "The arguments were refused: " + e.Message
	}
	return "The history could not be read now: " + err.Error()
}

// Handler serves the MCP server over streamable HTTP: at /mcp for session
// sid (when set), and at /mcp/{session_id} for the session the path
// names.
func Handler(r Runner, sid, version string) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(req *http.Request) *mcp.Server {
		s := sid
		if rest, ok := strings.CutPrefix(req.URL.Path, "/mcp/"); ok && rest != "" {
			s = rest
		}
		if contract.CheckSessionID(s) != nil {
			return nil
		}
		return New(r, s, version)
	}, nil)
}
