package sandboxed

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// testPod is the Pod the test claims are (or are not) signed for.
var testPod = sandbox.PodIdentity{Namespace: "agent-sandbox", Name: "as-k8s-get-pod-status-w0123456789a-abcde", UID: "a1b2c3d4-0000-4000-8000-000000000001"}

// testSigningKey stands in for the admission webhook's claim signing key.
var testSigningKey = func() ed25519.PrivateKey {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}()

func testClaimKeys() string {
	return sandbox.FormatClaimKeys([]ed25519.PublicKey{testSigningKey.Public().(ed25519.PublicKey)})
}

// testClaimSpec is a spec whose command template is argv, with the one parameter namespace (demo-app).
func testClaimSpec(tool string, argv ...string) policy.ClaimSpec {
	return policy.ClaimSpec{Tool: tool, Command: argv, Namespaces: []string{"demo-app"}, NamespaceParameter: "namespace",
		Parameters: []policy.Parameter{{Name: "namespace", Type: policy.TypeString, Required: true, Pattern: "[a-z0-9]([-a-z0-9]*[a-z0-9])?", MaxLength: 63}}}
}

// writeSignedClaim writes a claim volume into dir as the kubelet does: the claim, its signature (the test
// key's for testPod when signed) and the Pod's identity. It returns the --claim-keys value and the claim
// file's path.
func writeSignedClaim(t *testing.T, dir, claim string, signed bool) (string, string) {
	t.Helper()
	sig := ""
	if signed {
		var err error
		if sig, err = sandbox.SignClaim(testSigningKey, testPod, claim); err != nil {
			t.Fatal(err)
		}
	}
	writeClaimVolume(t, dir, claim, sig, testPod)
	return testClaimKeys(), filepath.Join(dir, "claim")
}

func writeClaimVolume(t *testing.T, dir, claim, sig string, pod sandbox.PodIdentity) {
	t.Helper()
	for name, content := range map[string]string{"claim": claim, contract.ClaimSignatureFile: sig,
		contract.PodNamespaceFile: pod.Namespace, contract.PodNameFile: pod.Name, contract.PodUIDFile: pod.UID} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

const podStatusClaim = `{"requestID":"req-0123456789ab","tool":"k8s_get_pod_status","namespace":"demo-app","params":{"namespace":"demo-app"},"argv":["/agent-sandbox","run","pod-status","--namespace=demo-app"],"auditHead":"` +
	"5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a" + `"}`

func podStatusSpec() policy.ClaimSpec {
	return testClaimSpec("k8s_get_pod_status", "/agent-sandbox", "run", "pod-status", "--namespace={{namespace}}")
}

// TestClaimVerifier: the warm Pod's check before anything is minted or run. Only the webhook's signature of
// exactly this claim for exactly this Pod passes, and only with the tool's rendering of the parameters.
func TestClaimVerifier(t *testing.T) {
	v, err := newClaimVerifier(testClaimKeys(), podStatusSpec().String())
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k ed25519.PrivateKey, pod sandbox.PodIdentity, claim string) string {
		s, err := sandbox.SignClaim(k, pod, claim)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	otherPod := testPod
	otherPod.UID = "a1b2c3d4-0000-4000-8000-000000000002"
	withArgv := strings.Replace(podStatusClaim, `"--namespace=demo-app"]`, `"--namespace=demo-app","--all-namespaces"]`, 1)
	otherNS := strings.Replace(podStatusClaim, `"namespace":"demo-app","params"`, `"namespace":"kube-system","params"`, 1)
	kubeSystem := strings.ReplaceAll(podStatusClaim, "demo-app", "kube-system")
	otherTool := strings.Replace(podStatusClaim, `"tool":"k8s_get_pod_status"`, `"tool":"k8s_describe"`, 1)
	tests := []struct {
		name, claim, sig, want string
	}{
		{"signed by the webhook for this Pod", podStatusClaim, sign(testSigningKey, testPod, podStatusClaim), ""},
		{"unsigned (written through pods/status)", podStatusClaim, "", "no signature"},
		{"signed with another key", podStatusClaim, sign(otherKey, testPod, podStatusClaim), "not the admission webhook's"},
		{"signed for another Pod", podStatusClaim, sign(testSigningKey, otherPod, podStatusClaim), "not the admission webhook's"},
		{"claim edited after signing", withArgv, sign(testSigningKey, testPod, podStatusClaim), "not the admission webhook's"},
		{"the dry-run marker", podStatusClaim, sandbox.DryRunClaimSignature, "not the admission webhook's"},
		// Signed, but not the tool's rendering: whatever signed it, the Pod does not run it.
		{"signed, argv not the rendering", withArgv, sign(testSigningKey, testPod, withArgv), "not the tool's rendering"},
		{"signed, namespace not its parameters'", otherNS, sign(testSigningKey, testPod, otherNS), "targets namespace"},
		{"signed, namespace not allowed", kubeSystem, sign(testSigningKey, testPod, kubeSystem), "not allowed"},
		{"signed, another tool", otherTool, sign(testSigningKey, testPod, otherTool), "this Pod runs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeClaimVolume(t, dir, tt.claim, tt.sig, testPod)
			c, err := v.verify(filepath.Join(dir, "claim"), tt.claim)
			if tt.want == "" {
				if err != nil || c == nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "refused the claim") {
				t.Fatalf("got %v, want a refusal containing %q", err, tt.want)
			}
		})
	}
	t.Run("no identity files", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "claim"), []byte(podStatusClaim), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := v.verify(filepath.Join(dir, "claim"), podStatusClaim); err == nil {
			t.Fatal("verified without the Pod's identity")
		}
	})
	for _, bad := range [][2]string{{"", podStatusSpec().String()}, {testClaimKeys(), ""}, {"xyz", podStatusSpec().String()}, {testClaimKeys(), "{"}} {
		if _, err := newClaimVerifier(bad[0], bad[1]); err == nil {
			t.Errorf("verifier made from keys %q spec %q", bad[0], bad[1])
		}
	}
}

// TestRunWarmRefusesUnsignedClaim: the warm entry point given a claim that admission did not sign (the
// pods/status forgery) runs nothing, says why, and writes the done marker so the agent stops.
func TestRunWarmRefusesUnsignedClaim(t *testing.T) {
	sh, err := filepathLook("sh")
	if err != nil {
		t.Skip("no sh on this machine")
	}
	for _, signed := range []bool{false, true} {
		dir := t.TempDir()
		ran := filepath.Join(dir, "ran")
		argv := []string{sh, "-c", "touch " + ran}
		claim, _ := json.Marshal(map[string]any{"requestID": "req-test", "tool": "k8s_describe", "namespace": "demo-app",
			"params": map[string]string{"namespace": "demo-app"}, "argv": argv})
		sig := ""
		if signed {
			// Mis-signed: a key that is not the webhook's.
			_, other, _ := ed25519.GenerateKey(rand.Reader)
			sig, _ = sandbox.SignClaim(other, testPod, string(claim))
		}
		writeClaimVolume(t, dir, string(claim), sig, testPod)
		done := filepath.Join(dir, "done")
		code, _, stderr := testMain.Capture("run", "warm", "--tool=k8s_describe", "--claim-file="+filepath.Join(dir, "claim"),
			"--claim-keys="+testClaimKeys(), "--claim-spec="+testClaimSpec("k8s_describe", argv...).String(),
			"--kubeconfig="+filepath.Join(dir, "kubeconfig"), "--done-file="+done, "--deadline=30s", "--idle-timeout=5s", "--credential-wait=1s")
		if code != 1 || !strings.Contains(stderr, "refused the claim") {
			t.Errorf("signed=%v: exit %d, stderr %q; want 1 and the refusal", signed, code, stderr)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Errorf("signed=%v: the refused claim's argv ran", signed)
		}
		if m, err := os.ReadFile(done); err != nil || string(m) != "1" {
			t.Errorf("signed=%v: done marker %q (%v), want \"1\"", signed, m, err)
		}
	}
	// Without keys the entry point does not even start.
	if code, stdout, stderr := testMain.Capture("run", "warm", "--tool=k8s_describe", "--claim-spec="+podStatusSpec().String()); code == 0 || !strings.Contains(stdout+stderr, "claim-keys") {
		t.Errorf("no --claim-keys: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestCredAgentRefusesUnsignedClaim: the credential agent given a claim that admission did not sign, or
// signed for another Pod, reports credential.failed with the reason and never contacts Vault: nothing is
// minted.
func TestCredAgentRefusesUnsignedClaim(t *testing.T) {
	var calls atomic.Int32
	vault := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer vault.Close()
	otherPod := testPod
	otherPod.Name += "x"
	for name, sig := range map[string]func() string{
		"unsigned":               func() string { return "" },
		"signed for another Pod": func() string { s, _ := sandbox.SignClaim(testSigningKey, otherPod, podStatusClaim); return s },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeClaimVolume(t, dir, podStatusClaim, sig(), testPod)
			for _, f := range []string{"token", "ca.crt"} {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			code := testMain(ctx, []string{"cred-agent", "--vault-addr=" + vault.URL, "--auth-role=r", "--secrets-role=s",
				"--claim-file=" + filepath.Join(dir, "claim"), "--claim-keys=" + testClaimKeys(), "--claim-spec=" + podStatusSpec().String(),
				"--token-file=" + filepath.Join(dir, "token"), "--api-server=https://x", "--api-ca-file=" + filepath.Join(dir, "ca.crt"),
				"--out=" + filepath.Join(dir, "kubeconfig"), "--done-file=" + filepath.Join(dir, "done")}, strings.NewReader(""), &out, &errOut)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errOut.String())
			}
			if !strings.Contains(out.String(), `"event":"`+EventCredentialFailed+`"`) || !strings.Contains(out.String(), "refused the claim") {
				t.Errorf("events %q: want credential.failed with the refusal", out.String())
			}
			if strings.Contains(out.String(), "claim.accepted") {
				t.Errorf("the refused claim was accepted: %q", out.String())
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("the agent called Vault %d times for a refused claim", n)
			}
			if _, err := os.Stat(filepath.Join(dir, "kubeconfig")); err == nil {
				t.Error("a kubeconfig was written")
			}
		})
	}
	// Without --claim-keys the agent does not start.
	code, _, stderr := testMain.Capture("cred-agent", "--vault-addr="+vault.URL, "--auth-role=r", "--secrets-role=s",
		"--claim-file=/nonexistent/claim", "--claim-spec="+podStatusSpec().String(), "--api-server=https://x")
	if code != 1 || !strings.Contains(stderr, "claim-keys") {
		t.Errorf("no --claim-keys: exit %d, stderr %q", code, stderr)
	}
}
