package ledger

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

const (
	testRequestID = "req-0123456789ab"
	testMCPUser   = "system:serviceaccount:agent-sandbox:agent-sandbox-mcp"
)

var testHead = strings.Repeat("5a", 32)

// TestAnchorConfigMapRoundTrip: what RecordAnchor stores, AnchorFromConfigMap reads back; a record whose
// name does not match its contents, or that is malformed, is refused.
func TestAnchorConfigMapRoundTrip(t *testing.T) {
	a := audit.Anchor{RequestID: testRequestID, Head: testHead, Tool: "k8s_get_pod_status", Job: "as-k8s-get-pod-status-0123456789ab", User: testMCPUser,
		Admitted: time.Date(2026, 11, 30, 12, 0, 0, 123, time.UTC), Deadline: 90 * time.Second}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: AnchorName(a.RequestID, a.Job), Labels: map[string]string{contract.LabelAuditAnchor: "true"}},
		Data: map[string]string{anchorKeyRequestID: a.RequestID, anchorKeyHead: a.Head, anchorKeyTool: a.Tool, anchorKeyJob: a.Job, anchorKeyUser: a.User,
			anchorKeyAdmitted: a.Admitted.Format(time.RFC3339Nano), anchorKeyDeadline: a.Deadline.String()}}
	got, err := AnchorFromConfigMap(cm)
	a.Name = cm.Name
	if err != nil || got != a {
		t.Fatalf("read back %+v, %v; want %+v", got, err, a)
	}
	for _, tc := range []struct {
		name string
		mut  func(cm *corev1.ConfigMap)
	}{
		{"another Job than the name's", func(cm *corev1.ConfigMap) { cm.Data[anchorKeyJob] = "as-other" }},
		{"bad head", func(cm *corev1.ConfigMap) { cm.Data[anchorKeyHead] = "x" }},
		{"bad request ID", func(cm *corev1.ConfigMap) { cm.Data[anchorKeyRequestID] = "x" }},
		{"bad time", func(cm *corev1.ConfigMap) { cm.Data[anchorKeyAdmitted] = "yesterday" }},
		{"bad deadline", func(cm *corev1.ConfigMap) { cm.Data[anchorKeyDeadline] = "soon" }},
	} {
		c := cm.DeepCopy()
		tc.mut(c)
		if _, err := AnchorFromConfigMap(c); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
