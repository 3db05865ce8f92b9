package tfcheck

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestIsWorkspaceFile(t *testing.T) {
	tests := map[string]bool{
		"main.tf": true, "main.tf.json": true, "terraform.tfvars": true, "x.auto.tfvars.json": true,
		".terraform.lock.hcl": true, "a-b_c.1.tf": true,
		"override.tf": false, "override.tf.json": false, "main_override.tf": false, "x_override.tf.json": false,
		"main.TF": false, "main.tf.yaml": false, "README.md": false, ".hidden.tf": false, "": false,
		"../main.tf": false, "a/main.tf": false, "a..b.tf": false, "ma in.tf": false, "mаin.tf": false,
		"x.tftest.hcl": false, "x.tfquery.hcl": false, "terraform.tfstate": false, ".terraform.lock.hcl.bak": false,
		"-x.tf": false, "main.tf~": false,
	}
	for name, want := range tests {
		if got := IsWorkspaceFile(name); got != want {
			t.Errorf("IsWorkspaceFile(%q) = %v, want %v", name, got, want)
		}
	}
}

// check runs Check on one file and returns the error text ("" if accepted).
func check(t *testing.T, name, src string) string {
	t.Helper()
	files := map[string][]byte{name: []byte(src)}
	if !strings.HasSuffix(name, ".tf") && !strings.HasSuffix(name, ".tf.json") {
		files["main.tf"] = []byte(okTF)
	}
	err := Check(files, testOpts)
	if err == nil {
		return ""
	}
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("error does not wrap ErrRefused: %v", err)
	}
	return err.Error()
}

func out(expr string) string { return fmt.Sprintf("output \"x\" {\n  value = %s\n}\n", expr) }

// TestRules has one good and one bad snippet per allowlist decision; "" means accepted.
func TestRules(t *testing.T) {
	tests := []struct {
		name, file, src, reason string
	}{
		// References.
		{"var local path", "main.tf", out(`"${var.a}${local.b}${path.module}${terraform.workspace}"`), ""},
		{"count each self", "main.tf", "resource \"kubernetes_namespace\" \"n\" {\n  count = 2\n  metadata {\n    name = \"n${count.index}\"\n  }\n  lifecycle {\n    postcondition {\n      condition     = self.id != \"\"\n      error_message = \"x\"\n    }\n  }\n}\n", ""},
		{"resource and data refs", "main.tf", out(`[kubernetes_service.a.id, resource.kubernetes_pod.b.id, data.kubernetes_namespace.c.id]`), ""},
		{"terraform.applying", "main.tf", out(`terraform.applying`), "terraform.applying"},
		{"terraform.applying in a template", "main.tf", out(`"${terraform.applying}"`), "terraform.applying"},
		{"terraform alone", "main.tf", out(`(terraform).applying`), "only terraform.workspace"},
		{"terraform by index", "main.tf", out(`terraform["applying"]`), "only terraform.workspace"},
		{"terraform by computed index", "main.tf", out(`terraform[local.k]`), "only terraform.workspace"},
		{"lookup on terraform", "main.tf", out(`lookup(terraform, "applying", false)`), "only terraform.workspace"},
		{"object key traversal", "main.tf", out(`{ terraform.applying = 1 }`), "terraform.applying"},
		{"object key bare name", "main.tf", out(`{ terraform = 1, module = 2 }`), ""},
		{"object key in parentheses", "main.tf", out(`{ (terraform) = 1 }`), "only terraform.workspace"},
		{"for shadows terraform", "main.tf", out(`[for terraform in [1] : terraform]`), ""},
		{"for collection is outside", "main.tf", out(`[for t in terraform.applying : t]`), "terraform.applying"},
		{"module ref", "main.tf", out(`module.m.x`), "modules are not allowed"},
		{"ephemeral ref", "main.tf", out(`ephemeral.random_password.p.result`), `"ephemeral" is not a known name`},
		{"other resource ref", "main.tf", out(`null_resource.x.id`), `"null_resource" is not a known name`},
		{"refused data ref", "main.tf", out(`data.kubernetes_secret.s.data`), "not an allowed kubernetes data source"},
		{"splat", "main.tf", out(`kubernetes_service.a[*].metadata[0].name`), ""},
		{"legacy splat", "main.tf", out(`kubernetes_service.a.*.id`), ""},
		// Functions.
		{"pure functions", "main.tf", out(`jsonencode({ a = base64encode(sha256(upper(format("%s", try(tostring(1), "x"))))) })`), ""},
		{"timestamp", "main.tf", out(`formatdate("YYYY", timestamp())`), ""},
		{"file", "main.tf", out(`file("x")`), "function file()"},
		{"file in a nested template", "main.tf", out(`"${"${"${file("x")}"}"}"`), "function file()"},
		{"file in a for condition", "main.tf", out(`[for x in [1] : x if fileexists("y")]`), "function fileexists()"},
		{"file in a splat", "main.tf", out(`[{a=1}][*].a[file("x")]`), "function file()"},
		{"file in a heredoc directive", "main.tf", out("<<EOT\n%{ for x in [file(\"y\")] }${x}%{ endfor }\nEOT"), "function file()"},
		{"abspath", "main.tf", out(`abspath(".")`), "function abspath()"},
		{"unknown function", "main.tf", out(`exec("id")`), "not a known pure function"},
		{"core namespace", "main.tf", out(`core::upper("a")`), "namespaced"},
		{"provider function", "main.tf", out(`provider::terraform::encode_tfvars({})`), "provider-defined"},
		// Blocks and arguments.
		{"terraform extras", "main.tf", "terraform {\n  experiments = []\n}\n", "argument experiments in terraform block"},
		{"provider_meta", "main.tf", "terraform {\n  provider_meta \"kubernetes\" {\n  }\n}\n", "provider_meta block"},
		{"provider alias", "main.tf", "provider \"kubernetes\" {\n  alias = \"b\"\n}\n", ""},
		{"provider computed alias", "main.tf", "provider \"kubernetes\" {\n  alias = var.a\n}\n", "only constant values"},
		{"provider nested block", "main.tf", "provider \"kubernetes\" {\n  experiments {\n  }\n}\n", "in provider"},
		{"resource provider other", "main.tf", "resource \"kubernetes_namespace\" \"n\" {\n  provider = local\n}\n", "only kubernetes or kubernetes.ALIAS"},
		{"resource provider alias", "main.tf", "resource \"kubernetes_namespace\" \"n\" {\n  provider = kubernetes.b\n}\n", ""},
		{"lifecycle unknown", "main.tf", "resource \"kubernetes_namespace\" \"n\" {\n  lifecycle {\n    destroy = false\n  }\n}\n", "argument destroy is not allowed in lifecycle"},
		{"data lifecycle ignore_changes", "main.tf", "data \"kubernetes_namespace\" \"n\" {\n  lifecycle {\n    ignore_changes = all\n  }\n}\n", "not allowed in lifecycle"},
		{"dynamic iterator bound in content", "main.tf", "resource \"kubernetes_config_map\" \"c\" {\n  metadata {\n    dynamic \"x\" {\n      for_each = var.m\n      iterator = it\n      labels   = [it.key]\n      content {\n        v = it.value\n      }\n    }\n  }\n}\n", ""},
		{"dynamic iterator not bound in for_each", "main.tf", "resource \"kubernetes_config_map\" \"c\" {\n  dynamic \"x\" {\n    for_each = x.value\n    content {}\n  }\n}\n", `"x" is not a known name`},
		{"dynamic lifecycle", "main.tf", "resource \"kubernetes_config_map\" \"c\" {\n  dynamic \"lifecycle\" {\n    for_each = [1]\n    content {}\n  }\n}\n", `dynamic "lifecycle"`},
		{"dynamic connection", "main.tf", "resource \"kubernetes_config_map\" \"c\" {\n  dynamic \"connection\" {\n    for_each = [1]\n    content {}\n  }\n}\n", `dynamic "connection"`},
		{"dynamic extra argument", "main.tf", "resource \"kubernetes_config_map\" \"c\" {\n  dynamic \"x\" {\n    for_each = [1]\n    provisioner = 1\n    content {}\n  }\n}\n", "not allowed in a dynamic block"},
		{"variable type", "main.tf", "variable \"v\" {\n  type = map(object({ a = optional(list(string), []), b = tuple([number, bool]) }))\n}\n", ""},
		{"variable type call", "main.tf", "variable \"v\" {\n  type = file(\"x\")\n}\n", "not a type constructor"},
		{"variable type optional default call", "main.tf", "variable \"v\" {\n  type = object({ a = optional(string, file(\"x\")) })\n}\n", "only constant values"},
		{"variable unknown argument", "main.tf", "variable \"v\" {\n  command = \"x\"\n}\n", "argument command is not allowed in variable"},
		{"output unknown block", "main.tf", "output \"o\" {\n  value = 1\n  provisioner \"local-exec\" {\n  }\n}\n", "provisioner block"},
		{"non-identifier label", "main.tf", "variable \"a b\" {\n}\n", "not a plain identifier"},
		{"top-level attribute", "main.tf", "x = 1\n", "top-level argument x"},
		{"unknown top block", "main.tf", "foo {\n}\n", "foo block is not allowed in file"},
		{"required_providers legacy string", "main.tf", "terraform {\n  required_providers {\n    kubernetes = \"~> 1.13\"\n  }\n}\n", ""},
		{"required_providers aliases", "main.tf", "terraform {\n  required_providers {\n    kubernetes = {\n      source = \"hashicorp/kubernetes\"\n      configuration_aliases = [kubernetes.a]\n    }\n  }\n}\n", "only constant values"},
		{"required_providers bad constraint", "main.tf", "terraform {\n  required_providers {\n    kubernetes = {\n      version = \"not a version\"\n    }\n  }\n}\n", "version constraint"},
		// Variables files.
		{"tfvars constants", "a.tfvars", "a = \"x\"\nb = [1, -2, { c = true, \"d\" = null }]\nc = <<EOT\nhello\nEOT\n", ""},
		{"tfvars reference", "a.tfvars", "a = var.b\n", "only constant values"},
		{"tfvars template with reference", "a.tfvars", "a = \"${var.b}\"\n", "only constant values"},
		{"tfvars block", "a.tfvars", "a {\n}\n", "a block is not allowed in variables file"},
		{"tfvars conditional", "a.tfvars", "a = true ? 1 : 2\n", "only constant values"},
		// Every kind of expression that computes is refused where only constants are allowed.
		{"tfvars operator", "a.tfvars", "a = 1 + 2\n", "only constant values"},
		{"tfvars not", "a.tfvars", "a = !true\n", "only constant values"},
		{"tfvars index", "a.tfvars", "a = [1][(0)]\n", "only constant values"},
		{"tfvars traversal", "a.tfvars", "a = [1][0]\n", "only constant values"},
		{"tfvars attribute of a value", "a.tfvars", "a = { b = 1 }.b\n", "only constant values"},
		{"tfvars splat", "a.tfvars", "a = [1][*]\n", "only constant values"},
		{"tfvars for", "a.tfvars", "a = [for x in [1] : 1]\n", "only constant values"},
		{"tfvars call", "a.tfvars", "a = upper(\"x\")\n", "function call upper(): only constant values"},
		// Lock file.
		{"lock other version", ".terraform.lock.hcl", "provider \"registry.terraform.io/hashicorp/kubernetes\" {\n  version = \"2.0.0\"\n}\n", "version must be"},
		{"lock extra argument", ".terraform.lock.hcl", "provider \"registry.terraform.io/hashicorp/kubernetes\" {\n  version = \"1.13.4\"\n  source = \"x\"\n}\n", "argument source is not allowed"},
		// Syntax and encoding.
		{"invalid UTF-8", "main.tf", "output \"x\" {\n  value = \"\xff\"\n}\n", "not valid UTF-8"},
		{"BOM", "main.tf.json", "\ufeff{}", "invalid syntax"},
		{"deep template directives", "main.tf", out(`"` + strings.Repeat("%{if true}", 70) + strings.Repeat("%{endif}", 70) + `"`), "nested more than 64 deep"},
		{"directive keyword after a newline", "main.tf", out("<<EOT\n" + strings.Repeat("%{\nif true}", 70) + strings.Repeat("%{endif}", 70) + "\nEOT"), "nested more than 64 deep"},
		{"deep conditionals", "main.tf", out(strings.Repeat("true ? 1 : ", 5000) + "2"), "conditional operators and splats"},
		{"deep splats", "main.tf", out("local.a" + strings.Repeat("[*]", 5000)), "conditional operators and splats"},
		{"deep unary with newlines", "main.tf", out("(" + strings.Repeat("!\n", 100) + "true)"), "nested more than 64 deep"},
		{"index chain", "main.tf", out("local.a" + strings.Repeat("[local.i]", 300)), "expression nested more than 256 deep"},
		{"64 brackets", "main.tf", out(strings.Repeat("[", 60) + strings.Repeat("]", 60)), ""},
		// JSON syntax.
		{"json comments", "main.tf.json", `{"//": "x", "output": {"x": {"//": "y", "value": "ok"}}}`, ""},
		{"json root array", "main.tf.json", `[{"output": {"a": {"value": 1}}}, {"output": {"b": {"value": 2}}}]`, ""},
		{"json root string", "main.tf.json", `"x"`, "must be an object"},
		{"json null block", "main.tf.json", `{"output": {"a": null}}`, ""},
		{"json label null", "main.tf.json", `{"resource": null}`, "missing block label"},
		{"json body not object", "main.tf.json", `{"output": {"a": "x"}}`, "for the block's contents"},
		{"json array of arrays", "main.tf.json", `{"output": {"a": [[{"value": 1}]]}}`, ""},
		{"json array of arrays of strings", "main.tf.json", `{"output": {"a": [["x"]]}}`, "A JSON object is required here"},
		{"json argument twice across bodies", "main.tf.json", `{"output": {"a": [[{"value": 1}, {"value": 2}]]}}`, "set twice"},
		{"json two blocks", "main.tf.json", `{"terraform": [{"required_version": ">= 1"}, {"required_version": ">= 2"}]}`, ""},
		{"json lone surrogate", "main.tf.json", `{"output": {"x\ud800": {"value": 1}}}`, "not a plain identifier"},
		{"json provider ref", "main.tf.json", `{"resource": {"kubernetes_namespace": {"n": {"provider": "kubernetes.b"}}}}`, ""},
		{"json ignore_changes", "main.tf.json", `{"resource": {"kubernetes_namespace": {"n": {"lifecycle": {"ignore_changes": "all"}}}}}`, ""},
		{"json ignore_changes other keyword", "main.tf.json", `{"resource": {"kubernetes_namespace": {"n": {"lifecycle": {"ignore_changes": "file(x)"}}}}}`, "invalid syntax"},
		{"json replace_triggered_by is an expression", "main.tf.json", `{"resource": {"kubernetes_pod": {"p": {"lifecycle": {"replace_triggered_by": ["kubernetes_pod.a[file(\"x\")]"]}}}}}`, "function file()"},
		{"json replace_triggered_by", "main.tf.json", `{"resource": {"kubernetes_pod": {"p": {"lifecycle": {"replace_triggered_by": ["kubernetes_pod.a[count.index].id"]}}}}}`, ""},
		{"json moved", "main.tf.json", `{"moved": {"from": "kubernetes_pod.a", "to": "kubernetes_pod.b"}}`, ""},
		{"json dynamic not an object", "main.tf.json", `{"resource": {"kubernetes_namespace": {"n": {"metadata": {"labels": {"dynamic": "${file(\"x\")}"}}}}}}`, "function file()"},
		{"json escaped template", "main.tf.json", `{"output": {"x": {"value": "$${file(\"x\")}"}}}`, ""},
		{"json template syntax error", "main.tf.json", `{"output": {"x": {"value": "${"}}}`, "invalid syntax"},
		{"json unicode escaped interpolation", "main.tf.json", `{"output": {"x": {"value": "\u0024{file(\"x\")}"}}}`, "function file()"},
		{"json variable type", "main.tf.json", `{"variable": {"v": {"type": "list(object({a = string}))"}}}`, ""},
		{"json variable type not a string", "main.tf.json", `{"variable": {"v": {"type": {"a": "string"}}}}`, "must be a string"},
		{"json number key", "main.tf.json", `{"output": {"x": {"value": {"1": 2}}}}`, ""},
		{"json deep template", "main.tf.json", `{"output": {"x": {"value": "` + strings.Repeat(`${[`, 40) + strings.Repeat(`]}`, 40) + `"}}}`, "nested more than 64 deep"},
		{"tfvars json comment", "a.tfvars.json", `{"//": "x", "a": [1, {"b": null}]}`, ""},
		{"tfvars json not object", "a.tfvars.json", `[{"a": 1}]`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(t, tt.file, tt.src)
			if tt.reason == "" {
				if got != "" {
					t.Fatalf("refused:\n%s", got)
				}
				return
			}
			if got == "" {
				t.Fatalf("accepted; want a refusal for %q", tt.reason)
			}
			if !strings.Contains(got, tt.reason) {
				t.Fatalf("refused, but not for %q:\n%s", tt.reason, got)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	many := map[string][]byte{}
	for i := range MaxFiles + 1 {
		many[fmt.Sprintf("f%d.tf", i)] = []byte(okTF)
	}
	big := map[string][]byte{}
	for i := range 3 {
		big[fmt.Sprintf("f%d.tf", i)] = []byte("#" + strings.Repeat("x", MaxFileSize-10) + "\n")
	}
	items := map[string][]byte{"main.tf": []byte(out("[" + strings.Repeat("1,", MaxItems) + "]"))}
	for name, files := range map[string]map[string][]byte{"files": many, "size": big, "items": items} {
		err := Check(files, testOpts)
		if !errors.Is(err, ErrRefused) {
			t.Errorf("%s: not refused: %v", name, err)
		}
	}
}

func TestProblemFormat(t *testing.T) {
	err := Check(map[string][]byte{"main.tf": []byte("output \"x\" {\n  value = file(\"a\")\n}\n\noutput \"y\" {\n  value = terraform.applying\n}\n")}, testOpts)
	var re *RefusedError
	if !errors.As(err, &re) || len(re.Problems) != 2 {
		t.Fatalf("err = %v", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if lines[0] != "workspace refused:" || !strings.HasPrefix(lines[1], "main.tf:2,11: function file()") || !strings.HasPrefix(lines[2], "main.tf:6,11: reference terraform.applying") {
		t.Fatalf("message:\n%s", err)
	}
}

func TestOptions(t *testing.T) {
	err := Check(map[string][]byte{"main.tf": []byte(okTF)}, Options{})
	if err == nil || errors.Is(err, ErrRefused) {
		t.Fatalf("no provider version: err = %v, want a plain error", err)
	}
	o := testOpts
	o.Backend.Type = "s3"
	if err := CheckPlan(nil, o); err == nil || errors.Is(err, ErrRefused) {
		t.Fatalf("backend type s3 in options: err = %v, want a plain error", err)
	}
}
