package tfcheck

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestAttacksAreReal runs workspaces of the kinds the corpus refuses with real terraform v1.11,
// offline, and shows each attack works: a file is read into the plan, a command runs, a value
// differs between plan and apply. Then it shows Check refuses the very same files. Only built-in
// providers are used (terraform_data), so nothing is downloaded.
func TestAttacksAreReal(t *testing.T) {
	const secret = "TOP-SECRET-TOKEN-4e1f"
	// provePlanShowsSecret plans the workspace and fails unless the plan shows the secret file's content.
	provePlanShowsSecret := func(t *testing.T, tf *tfEnv) {
		t.Helper()
		tf.mustRun("init", "-input=false", "-no-color")
		if out := tf.mustRun("plan", "-input=false", "-no-color"); !strings.Contains(out, secret) {
			t.Fatalf("the plan does not show the file's content:\n%s", out)
		}
	}
	tests := []struct {
		name  string
		files map[string]string // {{DIR}} is the workspace folder, {{SECRET}} a file holding secret
		// prove runs terraform and fails the test unless the attack worked.
		prove  func(t *testing.T, tf *tfEnv)
		reason string
	}{
		{
			name:   "file() reads a local file into the plan",
			files:  map[string]string{"main.tf": "output \"leak\" {\n  value = file(\"{{SECRET}}\")\n}\n"},
			prove:  provePlanShowsSecret,
			reason: "function file()",
		},
		{
			name: "a variable validation probes the file system during plan",
			files: map[string]string{"main.tf": "variable \"x\" {\n  type    = string\n  default = \"a\"\n  validation {\n    condition     = var.x == \"a\" && !fileexists(\"{{SECRET}}\")\n" +
				"    error_message = \"the credential file exists\"\n  }\n}\n"},
			prove: func(t *testing.T, tf *tfEnv) {
				tf.mustRun("init", "-input=false", "-no-color")
				out, err := tf.run("plan", "-input=false", "-no-color")
				if err == nil || !strings.Contains(out, "the credential file exists") {
					t.Fatalf("the validation did not see the file (err %v):\n%s", err, out)
				}
			},
			reason: "function fileexists()",
		},
		{
			name: "a local-exec provisioner runs a command at apply",
			files: map[string]string{"main.tf": "resource \"terraform_data\" \"x\" {\n  provisioner \"local-exec\" {\n" +
				"    command = \"echo pwned > {{DIR}}/marker\"\n  }\n}\n"},
			prove:  proveMarker,
			reason: `resource "terraform_data"`,
		},
		{
			name: "local\\u002dexec is local-exec",
			files: map[string]string{"main.tf": "resource \"terraform_data\" \"x\" {\n  provisioner \"local\\u002dexec\" {\n" +
				"    command = \"echo pwned > {{DIR}}/marker\"\n  }\n}\n"},
			prove:  proveMarker,
			reason: "provisioner block",
		},
		{
			name: "JSON: Terraform reads both of two repeated keys, a map keeps one",
			files: map[string]string{"main.tf.json": `{
  "resource": {"terraform_data": {"evil": {"provisioner": {"local-exec": {"command": "echo pwned > {{DIR}}/marker"}}}}},
  "resource": {"terraform_data": {"harmless": {}}}
}
`},
			prove: func(t *testing.T, tf *tfEnv) {
				src, _ := os.ReadFile(filepath.Join(tf.dir, "main.tf.json"))
				var m map[string]any
				if err := json.Unmarshal(src, &m); err != nil || strings.Contains(string(mustJSON(t, m)), "provisioner") {
					t.Fatalf("encoding/json into a map was expected to keep only the harmless key: %v %s", err, mustJSON(t, m))
				}
				proveMarker(t, tf)
			},
			reason: "duplicate key",
		},
		{
			name: `JSON: "//" inside an object expression is evaluated, not a comment`,
			files: map[string]string{"main.tf.json": `{"output": {"leak": {"value": {"//": "${file(\"{{SECRET}}\")}"}}}}
`},
			prove:  provePlanShowsSecret,
			reason: "function file()",
		},
		{
			// terraform.applying is ephemeral, so Terraform lets it reach only provider
			// configuration, provisioners and checks; a check shows the divergence offline.
			name:  "terraform.applying: a saved plan that passes, whose apply does not",
			files: map[string]string{"main.tf": "check \"phase\" {\n  assert {\n    condition     = !terraform.applying\n    error_message = \"now applying\"\n  }\n}\n"},
			prove: func(t *testing.T, tf *tfEnv) {
				tf.mustRun("init", "-input=false", "-no-color")
				plan := tf.mustRun("plan", "-input=false", "-no-color", "-out=saved.tfplan")
				if strings.Contains(plan, "now applying") {
					t.Fatalf("the check failed already at plan:\n%s", plan)
				}
				apply := tf.mustRun("apply", "-input=false", "-no-color", "saved.tfplan")
				if !strings.Contains(apply, "now applying") {
					t.Fatalf("applying the saved plan did not see terraform.applying change:\n%s", apply)
				}
			},
			// The check block is refused as a whole; the corpus shows terraform.applying refused
			// where a kubernetes workspace would use it (count, dynamic for_each, templates).
			reason: "check block",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tf := newTF(t, nil)
			secretFile := filepath.Join(t.TempDir(), "kubeconfig")
			if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
				t.Fatal(err)
			}
			files := map[string][]byte{}
			for name, content := range tt.files {
				content = strings.NewReplacer("{{DIR}}", tf.dir, "{{SECRET}}", secretFile).Replace(content)
				files[name] = []byte(content)
				if err := os.WriteFile(filepath.Join(tf.dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := Check(files, testOpts)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("Check did not refuse for %q: %v", tt.reason, err)
			}
			tt.prove(t, tf)
		})
	}
}

// proveMarker applies the workspace and fails unless the command wrote its marker file.
func proveMarker(t *testing.T, tf *tfEnv) {
	t.Helper()
	tf.mustRun("init", "-input=false", "-no-color")
	tf.mustRun("apply", "-input=false", "-no-color", "-auto-approve")
	b, err := os.ReadFile(filepath.Join(tf.dir, "marker"))
	if err != nil || strings.TrimSpace(string(b)) != "pwned" {
		t.Fatalf("the command did not run: %v %q", err, b)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kubernetesMirror returns a CLI configuration that installs the kubernetes provider 1.13.4 from
// a local copy (as the runner's offline mirror would), or skips the test when there is none.
func kubernetesMirror(t *testing.T) string {
	t.Helper()
	home, _ := os.UserHomeDir()
	matches, _ := filepath.Glob(filepath.Join(home, ".cache", "agent-sandbox", "tools", "terraform-provider-kubernetes*"))
	var bin string
	for _, m := range matches {
		fi, err := os.Stat(m)
		switch {
		case err != nil:
		case fi.Mode().IsRegular():
			bin = m
		case fi.IsDir():
			inner, _ := filepath.Glob(filepath.Join(m, "terraform-provider-kubernetes*"))
			for _, in := range inner {
				if st, err := os.Stat(in); err == nil && st.Mode().IsRegular() {
					bin = in
				}
			}
		}
	}
	if bin == "" {
		t.Skip("the kubernetes provider is not available offline (looked for ~/.cache/agent-sandbox/tools/terraform-provider-kubernetes*)")
	}
	mirror := t.TempDir()
	platform := runtime.GOOS + "_" + runtime.GOARCH
	dir := filepath.Join(mirror, "registry.terraform.io", "hashicorp", "kubernetes", "1.13.4", platform)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "terraform-provider-kubernetes_v1.13.4_x4")); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "terraformrc")
	rc := "disable_checkpoint = true\nprovider_installation {\n  filesystem_mirror {\n    path = \"" + mirror + "\"\n  }\n}\n"
	if err := os.WriteFile(config, []byte(rc), 0o600); err != nil {
		t.Fatal(err)
	}
	return config
}

// TestProviderExecIsReal shows that the kubernetes provider's exec credential plugin runs a
// command during plan, and that a dynamic exec block gated on terraform.applying runs one only at
// apply. It needs the kubernetes provider offline, and skips without it.
func TestProviderExecIsReal(t *testing.T) {
	execBlock := func(marker string) string {
		return "    api_version = \"client.authentication.k8s.io/v1beta1\"\n" +
			"    command     = \"/bin/sh\"\n" +
			"    args        = [\"-c\", \"echo ran > " + marker + "; echo '{\\\"apiVersion\\\":\\\"client.authentication.k8s.io/v1beta1\\\",\\\"kind\\\":\\\"ExecCredential\\\",\\\"status\\\":{\\\"token\\\":\\\"x\\\"}}'\"]\n"
	}
	data := "data \"kubernetes_namespace\" \"n\" {\n  metadata {\n    name = \"default\"\n  }\n}\n"
	t.Run("exec runs during plan", func(t *testing.T) {
		tf := newTF(t, nil)
		tf.config = kubernetesMirror(t)
		marker := filepath.Join(tf.dir, "marker")
		src := "provider \"kubernetes\" {\n  host = \"https://127.0.0.1:1\"\n  exec {\n" + execBlock(marker) + "  }\n}\n" + data
		if err := Check(map[string][]byte{"main.tf": []byte(src)}, testOpts); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "exec block in provider") {
			t.Fatalf("Check did not refuse the exec block: %v", err)
		}
		if err := os.WriteFile(filepath.Join(tf.dir, "main.tf"), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		tf.mustRun("init", "-input=false", "-no-color")
		out, _ := tf.run("plan", "-input=false", "-no-color") // the API server is not there; the command runs first
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("the exec command did not run during plan:\n%s", out)
		}
	})
	t.Run("dynamic exec gated on terraform.applying", func(t *testing.T) {
		tf := newTF(t, nil)
		tf.config = kubernetesMirror(t)
		marker := filepath.Join(tf.dir, "marker")
		src := "provider \"kubernetes\" {\n  host = \"https://127.0.0.1:1\"\n  dynamic \"exec\" {\n    for_each = terraform.applying ? [1] : []\n    content {\n" +
			execBlock(marker) + "    }\n  }\n}\n" + data
		if err := Check(map[string][]byte{"main.tf": []byte(src)}, testOpts); !errors.Is(err, ErrRefused) {
			t.Fatalf("Check did not refuse the dynamic exec block: %v", err)
		}
		if err := os.WriteFile(filepath.Join(tf.dir, "main.tf"), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		tf.mustRun("init", "-input=false", "-no-color")
		out, _ := tf.run("plan", "-input=false", "-no-color")
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("the exec command ran during plan; the attack relies on it not running then:\n%s", out)
		}
		t.Logf("plan ran no command; whether apply does needs a reachable API server, which this test does not have")
	})
}
