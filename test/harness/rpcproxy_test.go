package harness

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// TestPeekRPC: a single request and a batch give their methods, the tool of a tools/call and the first
// request's _meta protocol version; a body that is not JSON-RPC gives nothing.
func TestPeekRPC(t *testing.T) {
	methods, tool, meta := PeekRPC([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"terraform_plan","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`))
	if !slices.Equal(methods, []string{"tools/call"}) || tool != "terraform_plan" || meta != "2026-07-28" {
		t.Errorf("request: %q %q %q", methods, tool, meta)
	}
	methods, tool, meta = PeekRPC([]byte(` [{"method":"initialize"},{"method":"notifications/initialized","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"x"}}}]`))
	if !slices.Equal(methods, []string{"initialize", "notifications/initialized"}) || tool != "" || meta != "" {
		t.Errorf("batch: %q %q %q", methods, tool, meta)
	}
	if methods, tool, meta = PeekRPC([]byte("not json")); methods != nil || tool != "" || meta != "" {
		t.Errorf("not JSON-RPC: %q %q %q", methods, tool, meta)
	}
}

// TestStatusRecorder: the status is 200 until the handler writes one, and a flush reaches the client's
// writer.
func TestStatusRecorder(t *testing.T) {
	w := httptest.NewRecorder()
	s := NewStatusRecorder(w)
	if s.Status != http.StatusOK {
		t.Errorf("before a header: %d", s.Status)
	}
	s.WriteHeader(http.StatusMethodNotAllowed)
	s.Flush()
	if s.Status != http.StatusMethodNotAllowed || w.Code != http.StatusMethodNotAllowed || !w.Flushed {
		t.Errorf("status %d, written %d, flushed %v", s.Status, w.Code, w.Flushed)
	}
}

// TestNewMCPRequest: a POST carries the initialize request, a GET nothing; both the transport's headers,
// with the caller's on top.
func TestNewMCPRequest(t *testing.T) {
	req, err := NewMCPRequest(http.MethodPost, "http://127.0.0.1/mcp", map[string]string{"Authorization": "Bearer x", "Content-Type": "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(req.Body)
	if methods, _, _ := PeekRPC(body); !slices.Equal(methods, []string{"initialize"}) {
		t.Errorf("POST body %s: methods %q", body, methods)
	}
	if req.Header.Get("Content-Type") != "text/plain" || req.Header.Get("Accept") != "application/json, text/event-stream" || req.Header.Get("Authorization") != "Bearer x" {
		t.Errorf("headers %v", req.Header)
	}
	if req, err = NewMCPRequest(http.MethodGet, "http://127.0.0.1/mcp", nil); err != nil || req.Body != nil {
		t.Errorf("GET: body %v, %v", req.Body, err)
	}
	if _, err := NewMCPRequest("bad method", "http://127.0.0.1/mcp", nil); err == nil {
		t.Error("a bad method was taken")
	}
}
