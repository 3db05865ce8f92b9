package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// stdioPeer is a client speaking raw lines to ServeIO over pipes, as an agent does over stdio.
type stdioPeer struct {
	t    *testing.T
	svc  *fakeService
	in   io.WriteCloser
	out  *bufio.Reader
	done chan error
}

func startStdio(t *testing.T, limits StdioLimits) *stdioPeer {
	t.Helper()
	p, err := policy.LoadFile("../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	svc := &fakeService{p: p}
	server, err := NewServer(svc, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	cr, cw := io.Pipe()
	sr, sw := io.Pipe()
	peer := &stdioPeer{t: t, svc: svc, in: cw, out: bufio.NewReaderSize(sr, 1<<20), done: make(chan error, 1)}
	go func() {
		err := ServeIO(context.Background(), server, cr, sw, limits)
		sw.Close()
		peer.done <- err
	}()
	t.Cleanup(func() {
		cw.Close()
		go io.Copy(io.Discard, sr) // drain whatever the server still writes
		select {
		case <-peer.done:
		case <-time.After(10 * time.Second):
			t.Error("the stdio server did not end after its input closed")
		}
	})
	return peer
}

func (p *stdioPeer) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatalf("write: %v", err)
	}
}

type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Method string `json:"method"`
}

// next reads the next response (notifications skipped), failing when the server has closed its output.
func (p *stdioPeer) next() rpcResponse {
	p.t.Helper()
	type got struct {
		line string
		err  error
	}
	ch := make(chan got, 1)
	go func() {
		for {
			l, err := p.out.ReadString('\n')
			if err != nil {
				ch <- got{l, err}
				return
			}
			var r rpcResponse
			if json.Unmarshal([]byte(l), &r) == nil && r.Method != "" {
				continue // a notification
			}
			ch <- got{l, nil}
			return
		}
	}()
	select {
	case g := <-ch:
		if g.err != nil {
			p.t.Fatalf("the server stopped answering (it ended its session): %v", g.err)
		}
		var r rpcResponse
		if err := json.Unmarshal([]byte(g.line), &r); err != nil {
			p.t.Fatalf("response %q: %v", g.line, err)
		}
		return r
	case <-time.After(10 * time.Second):
		p.t.Fatal("no response in 10 s")
	}
	return rpcResponse{}
}

func (p *stdioPeer) initialize() {
	p.t.Helper()
	p.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if r := p.next(); r.Error != nil || len(r.Result) == 0 {
		p.t.Fatalf("initialize: %+v", r)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// toolsListWorks asks tools/list with id and checks the answer lists the policy's tools.
func (p *stdioPeer) toolsListWorks(id int) {
	p.t.Helper()
	p.send(`{"jsonrpc":"2.0","id":` + itoa(id) + `,"method":"tools/list"}`)
	r := p.next()
	if r.Error != nil || string(r.ID) != itoa(id) || !strings.Contains(string(r.Result), `"k8s_get_pod_status"`) {
		p.t.Fatalf("tools/list after the hostile line: %s %+v", r.ID, r.Error)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestStdioSurvivesHostileMessages sends what ended the SDK's stdio session (a message nested 1,000 deep,
// in a request and bare, invalid JSON, a non-message, a batch, an over-size line) and checks each gets a
// JSON-RPC error and that the next call is still answered.
func TestStdioSurvivesHostileMessages(t *testing.T) {
	const maxBytes = 64 << 10
	p := startStdio(t, StdioLimits{MaxMessageBytes: maxBytes})
	p.initialize()
	p.toolsListWorks(1)

	deep := strings.Repeat("[", 1000) + strings.Repeat("]", 1000)
	for i, tc := range []struct {
		name, line string
		code       int
		id         string
		says       string
	}{
		{"1000 deep in a tool call", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"k8s_get_pod_status","arguments":{"a":` + deep + `}}}`, -32600, "7", "nested deeper than 64"},
		{"1000 deep, bare", deep, -32600, "null", "nested deeper than 64"},
		{"1000 deep objects", strings.Repeat(`{"a":`, 1000) + "1" + strings.Repeat("}", 1000), -32600, "null", "nested deeper"},
		{"invalid JSON", `{"jsonrpc":"2.0","id":8,"method":`, -32700, "null", "not valid JSON"},
		{"not JSON at all", `hello`, -32700, "null", "parse error"},
		{"a JSON string", `"tools/list"`, -32600, "null", "JSON object"},
		{"no version tag", `{"id":9,"method":"tools/list"}`, -32600, "9", "version"},
		{"a batch", `[{"jsonrpc":"2.0","id":10,"method":"tools/list"}]`, -32600, "null", "batches are not supported"},
		{"an empty batch", `[]`, -32600, "null", "batches"},
		{"an object id", `{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}`, -32600, "null", "invalid request"},
		{"over-size line", `{"jsonrpc":"2.0","id":11,"method":"tools/list","params":{"x":"` + strings.Repeat("a", maxBytes) + `"}}`, -32600, "null", "longer than 65536 bytes"},
	} {
		p.send(tc.line)
		r := p.next()
		if r.Error == nil || r.Error.Code != tc.code || string(r.ID) != tc.id || !strings.Contains(r.Error.Message, tc.says) {
			t.Errorf("%s: got id %s error %+v, want id %s code %d saying %q", tc.name, r.ID, r.Error, tc.id, tc.code, tc.says)
		}
		p.toolsListWorks(100 + i)
	}
	// A line just under the limit passes through to the SDK (which answers it).
	p.send(`{"jsonrpc":"2.0","id":12,"method":"tools/list","params":{"x":"` + strings.Repeat("a", maxBytes-80) + `"}}`)
	if r := p.next(); string(r.ID) != "12" {
		t.Errorf("a message under the limit: %+v", r)
	}
	// Valid messages the server has no use for get the SDK's own answer, or none, and the session goes on.
	p.send(`{"jsonrpc":"2.0","id":13,"result":{}}`)
	p.send(`{"jsonrpc":"2.0","method":"notifications/nonsense","params":{"a":[1,2]}}`)
	p.send(`   `)
	p.send(`{"jsonrpc":"2.0","id":14,"method":"no/such/method"}`)
	if r := p.next(); string(r.ID) != "14" || r.Error == nil {
		t.Errorf("unknown method: %+v", r)
	}
	// And a tool call still runs.
	p.send(`{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"k8s_get_pod_status","arguments":{"namespace":"demo-app"}}}`)
	if r := p.next(); string(r.ID) != "15" || !strings.Contains(string(r.Result), "web-1") {
		t.Errorf("tool call after the hostile lines: %s %s %+v", r.ID, r.Result, r.Error)
	}
	// The call names its client for the audit budget per client.
	p.svc.mu.Lock()
	defer p.svc.mu.Unlock()
	if len(p.svc.clients) != 1 || p.svc.clients[0] != "stdio" {
		t.Errorf("the service saw clients %q, want [stdio]", p.svc.clients)
	}
}

func TestStdioDepthCount(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`{}`, 1}, {`{"a":[1,{"b":2}]}`, 3}, {`"[[[["`, 0}, {`{"a":"\"[[[["}`, 1}, {`[[]][[[]]]`, 3},
	} {
		if got := depth([]byte(tc.in), 100); got != tc.want {
			t.Errorf("depth(%s) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
