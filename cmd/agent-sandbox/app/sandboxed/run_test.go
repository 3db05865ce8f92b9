package sandboxed

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// runTool runs `agent-sandbox run ...` and checks the output contract: stdout is exactly one JSON line.
func runTool(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	code, stdout, stderr := testMain.Capture(append([]string{"run"}, args...)...)
	if strings.Count(stdout, "\n") != 1 || !strings.HasPrefix(stdout, "{") {
		t.Errorf("stdout is not one JSON line: %q", stdout)
	}
	return code, stdout, stderr
}

// toolError decodes the error line and returns its message.
func toolError(t *testing.T, stdout string) string {
	t.Helper()
	_, err := toolrun.DecodeResult[toolrun.PlanResult]([]byte(stdout))
	var te *toolrun.ToolError
	if !errors.As(err, &te) {
		t.Fatalf("not an error line: %q (%v)", stdout, err)
	}
	return te.Message
}

func TestRunFailuresAreErrorLines(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	// A syntactically valid kubeconfig for a server that is not there.
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: "s3cr3t-token-value"}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	okID := strings.Repeat("0a", 32)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"pod-status without namespace", []string{"pod-status"}, []string{"--namespace"}},
		{"pod-status bad selector", []string{"pod-status", "--namespace=demo-app", "--selector=a in (b"}, []string{"--selector"}},
		{"pod-status bad namespace", []string{"pod-status", "--namespace=Demo_App"}, []string{"--namespace \"Demo_App\""}},
		{"pod-status unknown flag", []string{"pod-status", "--namespace=demo-app", "--all-namespaces"}, []string{"unknown flag"}},
		{"pod-status unreachable server", []string{"pod-status", "--namespace=demo-app"}, []string{"list pods in demo-app"}},
		{"pod-status missing kubeconfig", []string{"pod-status", "--namespace=demo-app", "--kubeconfig=" + filepath.Join(dir, "nope")}, []string{"no kubeconfig file at"}},
		{"plan without workspace", []string{"terraform-plan", "--source=" + ws, "--namespace=demo-app"}, []string{"workspace \"\""}},
		{"plan bad workspace and namespace", []string{"terraform-plan", "--workspace=../x", "--source=" + ws, "--namespace=kube.system"}, []string{"workspace \"../x\"", "namespace \"kube.system\""}},
		{"apply without plan id", []string{"terraform-apply", "--workspace=w", "--namespace=demo-app"}, []string{"plan id \"\""}},
		{"apply upper-case plan id", []string{"terraform-apply", "--workspace=w", "--namespace=demo-app", "--plan-id=" + strings.ToUpper(okID)}, []string{"64 lowercase hex digits"}},
		{"apply without its saved plan", []string{"terraform-apply", "--workspace=w", "--namespace=demo-app", "--plan-file=" + filepath.Join(dir, "none"), "--plan-id=" + okID}, []string{"saved plan: open"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runTool(t, tt.args...)
			if code != 1 {
				t.Errorf("exit %d", code)
			}
			msg := toolError(t, stdout)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			if strings.Contains(stdout+stderr, "s3cr3t-token-value") {
				t.Error("the token leaked")
			}
		})
	}
}

func TestRunKubeconfigDefault(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	if got := runKubeconfig(""); got != "/var/run/agent-sandbox/credentials/kubeconfig" {
		t.Errorf("default %q", got)
	}
	t.Setenv("KUBECONFIG", "/k")
	if got := runKubeconfig(""); got != "/k" {
		t.Errorf("env %q", got)
	}
	if got := runKubeconfig("/flag"); got != "/flag" {
		t.Errorf("flag %q", got)
	}
}

// inSandbox makes a temporary folder the credential volume (waited on for up to 30s) for the test, and
// returns it, the path where the credential agent writes the kubeconfig, and a kubeconfig to write there
// (for an API server nobody calls).
func inSandbox(t *testing.T) (dir, path, kubeconfig string) {
	t.Helper()
	dir = t.TempDir()
	oldDir, oldWait := credentialDir, credentialWait
	credentialDir, credentialWait = dir, 30*time.Second
	t.Cleanup(func() { credentialDir, credentialWait = oldDir, oldWait })
	kubeconfig = "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	return dir, filepath.Join(dir, "kubeconfig"), kubeconfig
}

// In a sandbox a runner may start before the credential agent has written the kubeconfig (no postStart
// gate for the project's runners): it waits for the file. Elsewhere a missing kubeconfig fails at once.
func TestToolClientWaitsForTheCredential(t *testing.T) {
	dir, path, kubeconfig := inSandbox(t)
	go func() {
		time.Sleep(100 * time.Millisecond)
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(kubeconfig), 0o400); err == nil {
			_ = os.Rename(tmp, path)
		}
	}()
	if _, err := toolClient(context.Background(), path); err != nil {
		t.Fatalf("in a sandbox, the kubeconfig written after the start: %v", err)
	}

	// Outside the credential volume: no wait, the missing file is the error.
	_, err := toolClient(context.Background(), filepath.Join(t.TempDir(), "missing", "kubeconfig"))
	if err == nil || strings.Contains(err.Error(), "wrote no credential") {
		t.Fatalf("outside a sandbox, a missing kubeconfig: %v", err)
	}

	// In a sandbox, nothing written within the wait: a clear error.
	credentialWait = 200 * time.Millisecond
	_, err = toolClient(context.Background(), filepath.Join(dir, "other"))
	if err == nil || !strings.Contains(err.Error(), "wrote no credential") {
		t.Fatalf("no credential: %v", err)
	}
}

// TestTerraformRunnersWaitForTheCredentialBeforeTheirChecks: in a sandbox the credential agent writes the
// kubeconfig while terraform-plan and terraform-apply start; their flag checks (which read the kubeconfig)
// wait for it, instead of failing a good call with "no kubeconfig file" (seen in make verify under load).
func TestTerraformRunnersWaitForTheCredentialBeforeTheirChecks(t *testing.T) {
	_, path, kubeconfig := inSandbox(t)
	for _, args := range [][]string{
		{"run", "terraform-plan", "--workspace=k8s-demo", "--namespace=demo-app", "--source=" + t.TempDir(), "--kubeconfig=" + path},
		{"run", "terraform-apply", "--workspace=k8s-demo", "--namespace=demo-app", "--plan-id=" + strings.Repeat("a", 64),
			"--plan-file=" + filepath.Join(t.TempDir(), "none"), "--kubeconfig=" + path},
	} {
		_ = os.Remove(path)
		go func() {
			time.Sleep(300 * time.Millisecond)
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, []byte(kubeconfig), 0o400); err == nil {
				_ = os.Rename(tmp, path)
			}
		}()
		var stdout, stderr strings.Builder
		code := testMain(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
		if code == 0 {
			t.Fatalf("%s: succeeded with nothing to plan or apply", args[1])
		}
		if strings.Contains(stdout.String(), "no kubeconfig file") {
			t.Errorf("%s failed before the credential agent wrote the kubeconfig: %s", args[1], stdout.String())
		}
	}
}
