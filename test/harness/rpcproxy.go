package harness

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// StatusRecorder is the http.ResponseWriter a test's proxy in front of MCP server replicas hands each
// replica, so that it can log the status the replica answered with. It passes flushes on, so each event of
// a call's SSE stream (its progress) reaches the client when the replica writes it.
type StatusRecorder struct {
	http.ResponseWriter
	// Status is the status code the handler wrote; 200 until it writes one, as net/http answers.
	Status int
}

// NewStatusRecorder wraps w, with Status 200 until the handler writes a header.
func NewStatusRecorder(w http.ResponseWriter) *StatusRecorder {
	return &StatusRecorder{ResponseWriter: w, Status: http.StatusOK}
}

// WriteHeader records code and writes it to the wrapped writer.
func (s *StatusRecorder) WriteHeader(code int) {
	s.Status = code
	s.ResponseWriter.WriteHeader(code)
}

// Flush flushes the wrapped writer if it can be flushed.
func (s *StatusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// PeekRPC reads what a test's proxy logs of an MCP request body, one JSON-RPC message or a batch: the
// methods of its messages, the tool a tools/call names, and the protocol version the first message, a
// request, names in its _meta (io.modelcontextprotocol/protocolVersion). A body that is not JSON-RPC
// yields nothing.
func PeekRPC(body []byte) (methods []string, tool, meta string) {
	type message struct {
		Method string `json:"method"`
		Params struct {
			Name string         `json:"name"`
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	var msgs []message
	if bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")) {
		_ = json.Unmarshal(body, &msgs)
	} else {
		var m message
		if json.Unmarshal(body, &m) == nil {
			msgs = []message{m}
		}
	}
	for i, m := range msgs {
		if m.Method == "" {
			continue
		}
		methods = append(methods, m.Method)
		if m.Method == "tools/call" {
			tool = m.Params.Name
		}
		if v, ok := m.Params.Meta["io.modelcontextprotocol/protocolVersion"].(string); ok && i == 0 {
			meta = v
		}
	}
	return methods, tool, meta
}

// RawInitialize is an MCP initialize request as the first POST of any client, for tests that speak MCP's
// HTTP transport without the SDK (the protocol version is one every supported server still accepts).
const RawInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// NewMCPRequest is a request to an MCP endpoint with the headers the streamable HTTP transport asks for,
// and set on top: a POST carries RawInitialize, any other method no body.
func NewMCPRequest(method, url string, set map[string]string) (*http.Request, error) {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(RawInitialize)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range set {
		req.Header.Set(k, v)
	}
	return req, nil
}
