package sandbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// TestStopAndCollect: a call that ends early (cancelled) deletes its Job first and then reads what the
// credential agent reports as it stops, so its credential.issued and credential.revoked reach the audit.
func TestStopAndCollect(t *testing.T) {
	var deleted atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/ns/pods":
			pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Status: corev1.PodStatus{
				InitContainerStatuses: []corev1.ContainerStatus{{Name: contract.CredentialAgentContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
			_ = json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: []corev1.Pod{pod}})
		case r.Method == http.MethodDelete && r.URL.Path == "/apis/batch/v1/namespaces/ns/jobs/j":
			deleted.Store(true)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Success"})
		case r.URL.Path == "/api/v1/namespaces/ns/pods/p/log" && r.URL.Query().Get("follow") == "true":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintln(w, `{"event":"credential.issued","lease_id":"l1","ttl_seconds":600}`)
			w.(http.Flusher).Flush()
			if !deleted.Load() {
				// Without the SIGTERM of the deletion the agent would not revoke: the stream stays open.
				<-r.Context().Done()
				return
			}
			fmt.Fprintln(w, `{"event":"credential.revoked","lease_id":"l1"}`)
		default:
			http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{Client: c, Namespace: "ns"}
	events := r.StopAndCollect("j")
	if !deleted.Load() {
		t.Error("the Job was not deleted")
	}
	if len(events) != 2 || events[0]["event"] != "credential.issued" || events[1]["event"] != "credential.revoked" {
		t.Fatalf("events %v, want credential.issued and credential.revoked", events)
	}
}
