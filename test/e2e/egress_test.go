//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/preflight"
)

// egressProbeTool is a tool, for this test's policy only, whose program is the image's own network probe
// (`agent-sandbox preflight probe connect`): it dials the API server and Vault as the policy gives them to
// sandboxes, then addresses the sandbox namespace's NetworkPolicies do not allow — the kubelet on each
// of the two node addresses, the API server's port on the address only Vault is allowed on, and a Pod named
// by the peer parameter. Its Job is rendered and admitted
// like any tool's, so its Pod is an admitted sandbox Pod in the sandbox namespace, under gVisor, with the
// chart's default-deny egress.
const egressProbeToolName = "sandbox_egress_probe"

// egressTargets are the probe's fixed targets, from the policy's credential-agent settings: the allowed
// ones first, then the forbidden ones.
type egressTargets struct{ allowed, forbidden []string }

func egressTargetsOf(t *testing.T, doc map[string]any) egressTargets {
	t.Helper()
	ca := doc["spec"].(map[string]any)["sandbox"].(map[string]any)["credentialAgent"].(map[string]any)
	hostPort := func(raw string) (string, string) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("policy address %q: %v", raw, err)
		}
		return u.Hostname(), u.Port()
	}
	apiHost, apiPort := hostPort(ca["apiServer"].(string))
	vaultHost, vaultPort := hostPort(ca["vaultAddress"].(string))
	if apiHost == vaultHost {
		t.Fatalf("the policy gives the API server and Vault one address %s; this test needs two", apiHost)
	}
	return egressTargets{
		allowed: []string{net.JoinHostPort(apiHost, apiPort), net.JoinHostPort(vaultHost, vaultPort)},
		forbidden: []string{
			net.JoinHostPort(apiHost, "10250"),   // the kubelet, on the API server's allowed address
			net.JoinHostPort(vaultHost, apiPort), // the API server's port, on the address only Vault is allowed on
			net.JoinHostPort(vaultHost, "10250"), // the kubelet, on the address only Vault is allowed on
		},
	}
}

// egressProbeTool is the tool's policy entry.
func egressProbeTool(targets egressTargets) map[string]any {
	argv := []any{"/agent-sandbox", "preflight", "probe", "connect", "--timeout=4s"}
	for _, a := range append(append([]string{}, targets.allowed...), targets.forbidden...) {
		argv = append(argv, a)
	}
	argv = append(argv, "{{peer}}")
	return map[string]any{
		"name": egressProbeToolName, "title": "Egress probe (test)", "tier": "read", "scope": "service-lister",
		"description":        "Dial a few addresses from a sandbox and report which connected. Test policy only.",
		"namespaces":         []any{"demo-app"},
		"namespaceParameter": "namespace",
		"image":              "localhost/agent-sandbox:dev",
		"command":            argv,
		"parameters": []any{
			map[string]any{"name": "namespace", "type": "string", "description": "Namespace.", "required": true,
				"pattern": "[a-z0-9]([-a-z0-9]*[a-z0-9])?", "maxLength": 63},
			map[string]any{"name": "peer", "type": "string", "description": "A Pod's IP:port.", "required": true,
				"pattern": `[0-9]{1,3}(\.[0-9]{1,3}){3}:[0-9]{1,5}`, "maxLength": 21},
		},
		"deadline":  "2m",
		"resources": map[string]any{"cpu": "100m", "memory": "64Mi"},
		"result":    map[string]any{"kind": "json", "maxBytes": 65536, "schema": map[string]any{"type": "object"}},
	}
}

// checkSandboxEgress runs the probe tool's admitted Job (rendered by render, created with the admin
// client: the webhook admits the exact Job whoever creates it) and reads what its tool container saw: the
// API server and Vault connected, every forbidden address timed out (its packets dropped, not refused), and
// each forbidden address is reachable from this host, where no NetworkPolicy applies, so the drop is the
// policy's.
func checkSandboxEgress(t *testing.T, ctx context.Context, cs kubernetes.Interface, targets egressTargets, peer string, job *batchv1.Job) {
	t.Helper()
	forbidden := append(append([]string{}, targets.forbidden...), peer)
	for _, a := range forbidden {
		c, err := net.DialTimeout("tcp", a, 3*time.Second)
		if err != nil {
			t.Fatalf("control: %s is not reachable from this host either (%v), so a drop in the sandbox would prove nothing", a, err)
		}
		_ = c.Close()
	}
	created, err := cs.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the probe's exact Job was refused: %v", err)
	}
	defer func() {
		_ = cs.BatchV1().Jobs(job.Namespace).Delete(context.Background(), created.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	}()
	pod, err := waitJobPodDone(ctx, cs, created)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName == "" {
		t.Fatalf("the probe Pod %s has no runtime class", pod.Name)
	}
	logs, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: contract.ToolContainer}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("the probe's output: %v", err)
	}
	var rep preflight.ConnectReport
	if err := json.Unmarshal(logs, &rep); err != nil {
		t.Fatalf("the probe's output is not its report: %v: %q", err, logs)
	}
	got := map[string]preflight.ConnectOutcome{}
	for _, o := range rep.Targets {
		got[o.Target] = o
	}
	var lines []string
	for _, a := range targets.allowed {
		o, ok := got[a]
		if !ok || !o.Connected {
			t.Errorf("from the admitted sandbox Pod %s, %s (allowed) did not connect: %+v", pod.Name, a, o)
		}
		lines = append(lines, fmt.Sprintf("%s connected in %d ms", a, o.Millis))
	}
	for _, a := range forbidden {
		o, ok := got[a]
		if !ok || o.Connected || !strings.Contains(o.Error, "timeout") {
			t.Errorf("from the admitted sandbox Pod %s, %s (forbidden) was not dropped: %+v", pod.Name, a, o)
		}
		lines = append(lines, fmt.Sprintf("%s dropped (%s after %d ms)", a, o.Error, o.Millis))
	}
	t.Logf("egress from admitted sandbox Pod %s (runtime class %s): %s", pod.Name, *pod.Spec.RuntimeClassName, strings.Join(lines, "; "))
}

// waitJobPodDone waits for the Job's Pod to finish and returns it.
func waitJobPodDone(ctx context.Context, cs kubernetes.Interface, job *batchv1.Job) (*corev1.Pod, error) {
	sel := labels.SelectorFromSet(map[string]string{"batch.kubernetes.io/job-name": job.Name}).String()
	var last string
	for ctx.Err() == nil {
		pods, err := cs.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				last = fmt.Sprintf("%s %s", p.Name, p.Status.Phase)
				for _, st := range p.Status.ContainerStatuses {
					if st.Name == contract.ToolContainer && st.State.Terminated != nil {
						return p, nil
					}
				}
			}
		}
		time.Sleep(time.Second)
	}
	return nil, fmt.Errorf("the probe Job %s's tool container did not finish (last seen: %s): %w", job.Name, last, ctx.Err())
}

// webhookPeer is a webhook Pod's IP and port: a Pod in another namespace that listens, which no sandbox
// may reach.
func webhookPeer(t *testing.T, ctx context.Context, cs kubernetes.Interface) string {
	t.Helper()
	pods, err := cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=agent-sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				if port.Protocol == corev1.ProtocolTCP || port.Protocol == "" {
					return net.JoinHostPort(p.Status.PodIP, fmt.Sprint(port.ContainerPort))
				}
			}
		}
	}
	t.Fatalf("no running webhook Pod with a port in %s", releaseNS)
	return ""
}
