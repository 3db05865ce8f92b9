package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// BenchmarkHandlerManyCalls is BenchmarkHandler over the Jobs of 64 calls of one rendering, as real
// traffic has them: every Job has its own request ID (so its own name and labels) and audit head.
func BenchmarkHandlerManyCalls(b *testing.B) {
	f := newFixture(b)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	m, _ := NewMetrics(prometheus.NewRegistry())
	h := Handlers(scheme, f.c, m)[PathValidateJobs].(*admission.Webhook)
	var reqs []admission.Request
	for i := range 64 {
		t, _ := f.p.Tool("k8s_get_pod_status")
		iv, _ := t.Invoke(podParams())
		j, err := sandbox.RenderJob(f.p, sandbox.JobSpec{Invocation: iv, RequestID: fmt.Sprintf("req-%012x", i), AuditHead: fmt.Sprintf("%064x", i)})
		if err != nil {
			b.Fatal(err)
		}
		Inject(&j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, f.p, iv)
		raw, _ := json.Marshal(asServer(b, j))
		reqs = append(reqs, admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: j.Namespace,
			Kind: metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, Object: runtime.RawExtension{Raw: raw}}})
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if resp := h.Handle(ctx, reqs[i%len(reqs)]); !resp.Allowed {
			b.Fatal(resp.Result)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reviews/s")
}
