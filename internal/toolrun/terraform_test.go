package toolrun

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTerraformEnv(t *testing.T) {
	base := []string{
		"PATH=/usr/bin", "HOME=/tmp", "TF_CLI_CONFIG_FILE=/etc/terraform.rc", "TF_PLUGIN_CACHE_DIR=/tmp/c",
		"TF_LOG=trace", "TF_LOG_PROVIDER=debug", "TF_CLI_ARGS_apply=-lock=false", "TF_WORKSPACE=other", "TF_VAR_replicas=9",
		"TF_DATA_DIR=/x", "KUBE_TOKEN=abc", "KUBE_HOST=https://evil", "KUBECONFIG=/old", "KUBE_CONFIG_PATH=/old", "CHECKPOINT_DISABLE=",
	}
	got := TerraformEnv(base, "/run/kubeconfig")
	want := []string{
		"PATH=/usr/bin", "HOME=/tmp", "TF_CLI_CONFIG_FILE=/etc/terraform.rc", "TF_PLUGIN_CACHE_DIR=/tmp/c",
		"KUBECONFIG=/run/kubeconfig", "KUBE_CONFIG_PATH=/run/kubeconfig", "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestDiagnostics(t *testing.T) {
	out := "Initializing...\n\nError: Saved plan is stale\n\nThe given plan file...\n│ Error: Unauthorized\n╵\nWarning: x\n"
	got := diagnostics(out)
	if !slices.Equal(got, []string{"Error: Saved plan is stale", "Error: Unauthorized"}) {
		t.Errorf("%q", got)
	}
}

// fakeTerraform writes a shell script that stands in for terraform.
func fakeTerraform(t *testing.T, script string) *terraform {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "terraform")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	return &terraform{bin: bin, dir: dir, env: []string{"PATH=/usr/bin:/bin"}, stderr: &stderr}
}

func TestTerraformRun(t *testing.T) {
	ctx := context.Background()
	tf := fakeTerraform(t, `echo "out $*"; echo "err" >&2; [ "$1" = show ] && echo '{"json":1}'; exit 0`)
	so, text, err := tf.run(ctx, true, "show", "-json", "p")
	if err != nil || string(so) != "out show -json p\n{\"json\":1}\n" || text != "err\n" {
		t.Errorf("captured stdout: %q %q %v", so, text, err)
	}
	so, text, err = tf.run(ctx, false, "plan")
	if err != nil || so != nil && len(so) != 0 || !strings.Contains(text, "out plan") || !strings.Contains(text, "err") {
		t.Errorf("streamed: %q %q %v", so, text, err)
	}
	if s := tf.stderr.(*strings.Builder).String(); !strings.Contains(s, "out plan") {
		t.Errorf("not streamed to stderr: %q", s)
	}

	stale := fakeTerraform(t, `printf '\nError: Saved plan is stale\n\nThe given plan file can no longer be applied\n'; exit 1`)
	_, _, err = stale.run(ctx, false, "apply", "plan.tfplan")
	var terr *TerraformError
	if !errors.Is(err, ErrStalePlan) || !errors.As(err, &terr) || terr.Command != "apply" || !slices.Equal(terr.Diagnostics, []string{"Error: Saved plan is stale"}) {
		t.Errorf("stale: %v", err)
	}
	failed := fakeTerraform(t, `echo "Error: Unsupported argument" >&2; exit 1`)
	if _, _, err = failed.run(ctx, false, "plan"); errors.Is(err, ErrStalePlan) || err == nil ||
		err.Error() != "terraform plan: Error: Unsupported argument (exit status 1)" {
		t.Errorf("failed: %v", err)
	}
}

// A cancelled run interrupts Terraform (so that it releases the state lock) rather than killing it.
func TestTerraformRunInterrupts(t *testing.T) {
	dir := t.TempDir()
	marker, started := filepath.Join(dir, "interrupted"), filepath.Join(dir, "started")
	tf := fakeTerraform(t, `trap 'echo interrupted > `+marker+`; exit 130' INT; touch `+started+`; while :; do sleep 0.05; done`)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Wait until the script has set its trap.
		for {
			if _, err := os.Stat(started); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	start := time.Now()
	_, _, err := tf.run(ctx, false, "apply")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err %v", err)
	}
	if _, serr := os.Stat(marker); serr != nil {
		t.Errorf("terraform was not interrupted: %v", serr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
}

// TestTerraformOutputIsScrubbedByTheIssuedToken has Terraform print the per-action token, which has no
// shape a pattern knows, in its human output and in a saved plan's text; neither the streamed output, nor
// the text returned, nor the plan text may hold it.
func TestTerraformOutputIsScrubbedByTheIssuedToken(t *testing.T) {
	const token = "opaque9Vw3LmQ7rTz2"
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://192.0.2.1:6443\n" +
		"users:\n- name: u\n  user:\n    token: " + token + "\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := KubeconfigScrubber(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The token is printed in two halves, and without a final newline, to stderr and stdout.
	tf := fakeTerraform(t, `printf 'using opaque9Vw3' >&2; sleep 0.05; printf 'LmQ7rTz2 now\nplan for `+token+`\nlast `+token+`'`)
	tf.scrub = sc
	_, text, err := tf.run(context.Background(), false, "plan")
	if err != nil {
		t.Fatal(err)
	}
	streamed := tf.stderr.(*strings.Builder).String()
	for name, s := range map[string]string{"streamed output": streamed, "returned output": text} {
		if strings.Contains(s, token) || strings.Count(s, "<redacted:secret>") != 3 || !strings.HasPrefix(s, "using ") {
			t.Errorf("%s not scrubbed by the token: %q", name, s)
		}
	}
	show := fakeTerraform(t, `echo "  + token = `+token+`"`)
	show.scrub = sc
	w := &workdir{tf: show, dir: show.dir}
	so, _, err := w.tf.run(context.Background(), true, "show", "-no-color", "p")
	if err != nil || !strings.Contains(string(so), token) {
		t.Fatalf("captured stdout is the tool's own: %q, %v", so, err)
	}
	if got := w.tf.scrubText(so); strings.Contains(got, token) {
		t.Errorf("plan text not scrubbed: %q", got)
	}
}

func TestKubeconfigScrubberRefusesAnUnreadableCredential(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(bad, []byte("users: [{name: u, user: {token: short}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := KubeconfigScrubber(bad); err == nil {
		t.Error("a token too short to scrub by value was accepted")
	}
	if _, err := KubeconfigScrubber(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing kubeconfig was accepted")
	}
}
