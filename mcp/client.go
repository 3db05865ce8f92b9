package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Client is a small MCP client over a server process's stdio or over streamable HTTP, for the demo and the
// tests: it talks to `agent-sandbox mcp` exactly as Claude or Cursor would.
type Client struct {
	session *sdk.ClientSession
	// OnProgress, when set, receives each progress notification's message.
	OnProgress func(message string, progress, total float64)
}

// Result is one tool call's outcome.
type Result struct {
	IsError bool
	// Text is the text content (the one-line reason for an error).
	Text string
	// Structured is the structured content, JSON-encoded.
	Structured json.RawMessage
}

// Decode unmarshals the structured content into v.
func (r *Result) Decode(v any) error { return json.Unmarshal(r.Structured, v) }

// DialCommand starts cmd as an MCP server and initializes a session with it.
func DialCommand(ctx context.Context, cmd *exec.Cmd) (*Client, error) {
	c := &Client{}
	s, err := c.sdkClient().Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cmd.Path, err)
	}
	c.session = s
	return c, nil
}

// The MCP protocol versions a client can ask DialHTTPVersion for.
const (
	// ProtocolVersion20260728 is stateless MCP (SEP-2575): the client probes with server/discover and
	// every request carries its protocol version and client in _meta; there is no initialize and no
	// session.
	ProtocolVersion20260728 = "2026-07-28"
	// ProtocolVersion20251125 is the last version with the initialize handshake and sessions.
	ProtocolVersion20251125 = "2025-11-25"
)

// DialHTTP connects to the streamable HTTP server at endpoint (http://HOST:PORT/mcp), presenting token as
// its bearer token, at the newest protocol version both sides speak.
func DialHTTP(ctx context.Context, endpoint, token string) (*Client, error) {
	return DialHTTPVersion(ctx, endpoint, token, "")
}

// DialHTTPVersion is DialHTTP offering protocolVersion ("" for the newest this SDK speaks): a 2026-07-28
// client discovers the server (and falls back to initialize when the server does not serve 2026-07-28),
// an older one initializes a session. ProtocolVersion says what was agreed.
func DialHTTPVersion(ctx context.Context, endpoint, token, protocolVersion string) (*Client, error) {
	c := &Client{}
	hc := &http.Client{Transport: bearerTransport{token: token, next: http.DefaultTransport}}
	s, err := c.sdkClient().Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1},
		&sdk.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	c.session = s
	return c, nil
}

// ProtocolVersion is the protocol version the client and the server agreed on.
func (c *Client) ProtocolVersion() string {
	if r := c.session.InitializeResult(); r != nil {
		return r.ProtocolVersion
	}
	return ""
}

func (c *Client) sdkClient() *sdk.Client {
	return sdk.NewClient(&sdk.Implementation{Name: "agent-sandbox-demo-client", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			if c.OnProgress != nil {
				c.OnProgress(r.Params.Message, r.Params.Progress, r.Params.Total)
			}
		},
	})
}

// bearerTransport adds the bearer token to every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// ServerName is the name and version the server reported at initialization.
func (c *Client) ServerName() string {
	r := c.session.InitializeResult()
	if r == nil || r.ServerInfo == nil {
		return ""
	}
	return r.ServerInfo.Name + " " + r.ServerInfo.Version
}

// ToolNames lists the server's tools.
func (c *Client) ToolNames(ctx context.Context) ([]string, error) {
	res, err := c.session.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(res.Tools))
	for i, t := range res.Tools {
		names[i] = t.Name
	}
	return names, nil
}

// OutputSchemas lists the output schema of every tool that declares one, JSON-encoded, by tool name.
func (c *Client) OutputSchemas(ctx context.Context) (map[string]json.RawMessage, error) {
	res, err := c.session.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]json.RawMessage{}
	for _, t := range res.Tools {
		if t.OutputSchema == nil {
			continue
		}
		if out[t.Name], err = json.Marshal(t.OutputSchema); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Call calls a tool with progress notifications requested.
func (c *Client) Call(ctx context.Context, name string, args map[string]any) (*Result, error) {
	p := &sdk.CallToolParams{Name: name, Arguments: args}
	p.SetProgressToken(name)
	res, err := c.session.CallTool(ctx, p)
	if err != nil {
		return nil, err
	}
	out := &Result{IsError: res.IsError}
	var texts []string
	for _, ct := range res.Content {
		if t, ok := ct.(*sdk.TextContent); ok {
			texts = append(texts, t.Text)
		}
	}
	out.Text = strings.Join(texts, "\n")
	if res.StructuredContent != nil {
		if out.Structured, err = json.Marshal(res.StructuredContent); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Close ends the session and waits for the server process to exit.
func (c *Client) Close() error { return c.session.Close() }
