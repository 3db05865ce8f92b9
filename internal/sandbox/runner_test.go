package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// logServer serves the credential agent's log of Pod "p" in namespace "ns" as a follow stream: the lines,
// flushed one by one, then (with hold) a stream that stays open until the request ends, as the kubelet's
// follow does while the container runs.
func logServer(t *testing.T, lines []string, hold bool) kubernetes.Interface {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path != "/api/v1/namespaces/ns/pods/p/log" || q.Get("container") != contract.CredentialAgentContainer || q.Get("follow") != "true" {
			http.Error(w, "unexpected request "+r.URL.String(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		for _, l := range lines {
			fmt.Fprintln(w, l)
			w.(http.Flusher).Flush()
		}
		if hold {
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A cold call's run ends when the agent's log carries tool.result — not at another event, not at a line
// that merely mentions it, and not when the stream ends without it (then the Pod's status decides).
func TestWatchResult(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		hold  bool
		want  bool
	}{
		{"tool.result after other events", []string{`{"event":"credential.issued"}`, `not json`, `{"event":"tool.result","exit_code":0}`}, true, true},
		{"only other events, stream open", []string{`{"event":"credential.issued"}`, `{"event":"credential.revoked"}`}, true, false},
		{"tool.result only as text", []string{`{"event":"credential.issued","note":"tool.result"}`, `tool.result`}, true, false},
		{"stream ends without tool.result", []string{`{"event":"credential.issued"}`}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Runner{Client: logServer(t, tt.lines, tt.hold), Namespace: "ns"}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := r.watchResult(ctx, "p", nil).result
			select {
			case <-done:
				if !tt.want {
					t.Fatal("the run was reported over without a tool.result event")
				}
			case <-time.After(500 * time.Millisecond):
				if tt.want {
					t.Fatal("tool.result was not noticed")
				}
			}
		})
	}
}

// TestParseEventsWithheldResult: when Vault failed the revocation, the credential agent reports
// credential.revoke_failed and a tool.result with an error instead of the result (the credential is live,
// so nothing the tool wrote may leave the Pod). The run then has no result and that error as its reason,
// and the revoke_failed event stays among the credential events for the audit chain.
func TestParseEventsWithheldResult(t *testing.T) {
	const withheld = "the credential could not be revoked; the tool's result is withheld"
	log := `{"event":"credential.issued","lease_id":"l1","ttl_seconds":600}` + "\n" +
		`{"event":"credential.revoke_failed","lease_id":"l1","error":"gave up after 8s: Vault is sealed"}` + "\n" +
		`{"event":"tool.result","error":"` + withheld + `"}` + "\n"
	events, result, resultErr := parseEvents([]byte(log))
	if result != nil || resultErr != withheld {
		t.Errorf("result %q, error %q; want none and %q", result, resultErr, withheld)
	}
	if len(events) != 2 || events[1]["event"] != "credential.revoke_failed" {
		t.Errorf("credential events %v; want credential.issued and credential.revoke_failed", events)
	}
}
