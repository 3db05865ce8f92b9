package tfcheck

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/encoding/protowire"
)

const (
	runnerOverride = "zz_backend_override.tf"
	statePath      = "state/terraform.tfstate" // relative: terraform creates its folder in the test's own temporary folder
)

// runnerBackend is the override file a runner writes so that the plan records its local state file.
var runnerBackend = fmt.Sprintf("terraform {\n  backend \"local\" {\n    path = %q\n  }\n}\n", statePath)

func planOpts() Options {
	o := testOpts
	o.Backend.Type = "local"
	o.Backend.Path = statePath
	o.RunnerFiles = map[string][]byte{runnerOverride: []byte(runnerBackend)}
	return o
}

var (
	realPlanOnce sync.Once
	realPlan     []byte
	realPlanErr  string
)

// savedPlan is a plan that real terraform wrote for a workspace with outputs only (no provider is
// needed, so it plans offline) and the runner's backend override. Terraform records the backend
// (local, path) and copies both files into the plan's configuration snapshot.
func savedPlan(t *testing.T) []byte {
	t.Helper()
	tf := newTF(t, map[string]string{
		"main.tf":      "variable \"name\" {\n  type    = string\n  default = \"demo\"\n}\n\noutput \"greeting\" {\n  value = \"hello ${upper(var.name)}\"\n}\n",
		runnerOverride: runnerBackend,
	})
	realPlanOnce.Do(func() {
		out, err := tf.run("init", "-input=false", "-no-color")
		if err != nil {
			realPlanErr = out
			return
		}
		if out, err = tf.run("plan", "-input=false", "-no-color", "-out=saved.tfplan"); err != nil {
			realPlanErr = out
			return
		}
		realPlan, _ = readFile(tf.dir + "/saved.tfplan")
	})
	if realPlan == nil {
		t.Fatalf("terraform could not make a plan:\n%s", realPlanErr)
	}
	return realPlan
}

func TestCheckPlanReal(t *testing.T) {
	plan := savedPlan(t)
	if err := CheckPlan(plan, planOpts()); err != nil {
		t.Fatalf("a plan of a good workspace with the runner's backend was refused:\n%v", err)
	}

	// The same plan, judged without knowing the runner's override file: the override is refused.
	o := planOpts()
	o.RunnerFiles = nil
	if err := CheckPlan(plan, o); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "override files") {
		t.Errorf("override file in the snapshot not refused: %v", err)
	}
	// The runner's override file with other content is refused.
	o = planOpts()
	o.RunnerFiles = map[string][]byte{runnerOverride: []byte("# something else\n")}
	if err := CheckPlan(plan, o); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "differs from the runner's") {
		t.Errorf("changed runner file not refused: %v", err)
	}
	// Another state path than the runner's.
	o = planOpts()
	o.Backend.Path = "/elsewhere/terraform.tfstate"
	if err := CheckPlan(plan, o); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not the runner's") {
		t.Errorf("other state path not refused: %v", err)
	}
	// Another workspace.
	o = planOpts()
	o.Backend.Workspace = "prod"
	if err := CheckPlan(plan, o); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "backend workspace") {
		t.Errorf("other workspace not refused: %v", err)
	}
}

// TestCheckPlanImplicitBackend: a workspace planned without any backend block records the local
// backend with every setting null; that matches a Backend with an empty Path.
func TestCheckPlanImplicitBackend(t *testing.T) {
	tf := newTF(t, map[string]string{"main.tf": "output \"x\" {\n  value = \"ok\"\n}\n"})
	plan := tf.plan()
	o := testOpts
	if err := CheckPlan(plan, o); err != nil {
		t.Fatalf("implicit local backend refused: %v", err)
	}
	o.Backend.Path = statePath
	if err := CheckPlan(plan, o); !errors.Is(err, ErrRefused) {
		t.Fatalf("a plan without the runner's path was accepted")
	}
}

// TestCheckPlanTampered rewrites a real plan the way a compromised MCP server could, and shows
// each rewrite is refused.
func TestCheckPlanTampered(t *testing.T) {
	plan := savedPlan(t)
	entries := unzipPlan(t, plan)
	backend := func(typ string, config []byte, ws string) []byte {
		var dyn []byte
		dyn = protowire.AppendTag(dyn, fieldDynMsgpack, protowire.BytesType)
		dyn = protowire.AppendBytes(dyn, config)
		var b []byte
		b = protowire.AppendTag(b, fieldBackendType, protowire.BytesType)
		b = protowire.AppendString(b, typ)
		b = protowire.AppendTag(b, fieldBackendConfig, protowire.BytesType)
		b = protowire.AppendBytes(b, dyn)
		b = protowire.AppendTag(b, fieldBackendWS, protowire.BytesType)
		b = protowire.AppendString(b, ws)
		return b
	}
	goodConfig := msgpackMap(t, "path", statePath, "workspace_dir", nil)

	tests := []struct {
		name   string
		edit   func(e *planEntries)
		reason string
	}{
		{"untouched", func(e *planEntries) {}, ""},
		{"rebuilt backend, same values", func(e *planEntries) {
			e.set("tfplan", replaceBackend(t, e.get("tfplan"), backend("local", goodConfig, "default")))
		}, ""},
		{"backend of another type", func(e *planEntries) {
			e.set("tfplan", replaceBackend(t, e.get("tfplan"), backend("s3", msgpackMap(t, "bucket", "attacker"), "default")))
		}, `backend "s3" is not allowed`},
		{"kubernetes backend with exec", func(e *planEntries) {
			e.set("tfplan", replaceBackend(t, e.get("tfplan"), backend("kubernetes", msgpackMap(t, "secret_suffix", "x", "exec", []any{map[string]any{"command": "id"}}), "default")))
		}, `backend "kubernetes" is not allowed`},
		{"an extra backend setting", func(e *planEntries) {
			e.set("tfplan", replaceBackend(t, e.get("tfplan"), backend("local", msgpackMap(t, "path", statePath, "workspace_dir", "/tmp/evil"), "default")))
		}, `setting "workspace_dir" is not allowed`},
		{"the path setting twice", func(e *planEntries) {
			e.set("tfplan", replaceBackend(t, e.get("tfplan"), backend("local", msgpackMap(t, "path", "/tmp/evil", "path", statePath), "default")))
		}, "not the runner's"},
		{"the path setting twice, good one first", func(e *planEntries) {
			e.set("tfplan", replaceBackend(t, e.get("tfplan"), backend("local", msgpackMap(t, "path", statePath, "path", "/tmp/evil"), "default")))
		}, "appears twice"},
		{"path of another type", func(e *planEntries) {
			e.set("tfplan", replaceBackend(t, e.get("tfplan"), backend("local", msgpackMap(t, "path", 42), "default")))
		}, "path is not a string"},
		{"bytes after the config", func(e *planEntries) {
			e.set("tfplan", replaceBackend(t, e.get("tfplan"), backend("local", append(bytes.Clone(goodConfig), 0xc0), "default")))
		}, "bytes after the settings"},
		{"the backend twice (protobuf merges them)", func(e *planEntries) {
			b := e.get("tfplan")
			b = protowire.AppendTag(b, fieldPlanBackend, protowire.BytesType)
			b = protowire.AppendBytes(b, backend("s3", msgpackMap(t, "bucket", "x"), "default"))
			e.set("tfplan", b)
		}, "backend is set twice"},
		{"a field unknown to Terraform v1.11", func(e *planEntries) {
			b := protowire.AppendTag(e.get("tfplan"), 99, protowire.VarintType)
			e.set("tfplan", protowire.AppendVarint(b, 1))
		}, "unknown field 99"},
		{"no backend", func(e *planEntries) {
			e.set("tfplan", replaceBackend(t, e.get("tfplan"), nil))
		}, "records no backend"},
		{"an extra module", func(e *planEntries) {
			e.set("tfconfig/modules.json", []byte(`[{"Key":"","Dir":"."},{"Key":"m","Source":"git::https://attacker.example/m.git","Dir":".terraform/modules/m"}]`))
			e.set("tfconfig/m-m/main.tf", []byte("resource \"terraform_data\" \"x\" {}\n"))
		}, "root module alone"},
		{"files of an unlisted module", func(e *planEntries) {
			e.set("tfconfig/m-m/main.tf", []byte("output \"x\" {\n  value = 1\n}\n"))
		}, "a module other than the root module"},
		{"a manifest key in other case", func(e *planEntries) {
			e.set("tfconfig/modules.json", []byte(`[{"Key":"","Dir":".","dir":"/tmp"}]`))
		}, `unknown key "dir"`},
		{"a manifest with a repeated key", func(e *planEntries) {
			e.set("tfconfig/modules.json", []byte(`[{"Key":"","Dir":".","Dir":"/tmp"}]`))
		}, "duplicate key"},
		{"a root module with a source", func(e *planEntries) {
			e.set("tfconfig/modules.json", []byte(`[{"Key":"","Source":"git::https://x/y.git","Dir":"."}]`))
		}, "only the root module"},
		{"a config file with a provider exec block", func(e *planEntries) {
			e.set("tfconfig/m-/main.tf", []byte("provider \"kubernetes\" {\n  exec {\n    api_version = \"client.authentication.k8s.io/v1beta1\"\n    command     = \"id\"\n  }\n}\n"))
		}, "tfconfig/m-/main.tf:2,3: exec block in provider"},
		{"an extra config file", func(e *planEntries) {
			e.set("tfconfig/m-/evil.tf.json", []byte(`{"resource": {"null_resource": {"x": {"provisioner": {"local-exec": {"command": "id"}}}}}}`))
		}, `resource "null_resource"`},
		{"a config file in a subfolder", func(e *planEntries) {
			e.set("tfconfig/m-/sub/main.tf", []byte("output \"x\" {\n  value = 1\n}\n"))
		}, "not a workspace file of the root module"},
		{"a path that climbs out", func(e *planEntries) {
			e.set("tfconfig/m-/../../main.tf", []byte("output \"x\" {\n  value = 1\n}\n"))
		}, "not a workspace file of the root module"},
		{"an unknown entry", func(e *planEntries) {
			e.set("tfconfig/extra", []byte("x"))
		}, "unknown entry"},
		{"an entry twice", func(e *planEntries) {
			e.add("tfconfig/m-/main.tf", []byte("resource \"terraform_data\" \"x\" {}\n"))
		}, "entry appears twice"},
		{"a lock file for another provider", func(e *planEntries) {
			e.set(".terraform.lock.hcl", []byte("provider \"registry.terraform.io/hashicorp/external\" {\n  version = \"2.3.4\"\n  hashes = [\"h1:x\"]\n}\n"))
		}, "lock file provider"},
		{"no tfplan", func(e *planEntries) { e.remove("tfplan") }, "no tfplan entry"},
		{"not a zip", func(e *planEntries) { e.raw = []byte("tfplan, honest") }, "not a plan file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := entries.clone()
			tt.edit(e)
			err := CheckPlan(e.zip(t), planOpts())
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("not refused (err %v)", err)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("refused, but not for %q:\n%v", tt.reason, err)
			}
		})
	}
}

// planEntries is a plan's zip entries in order, to edit.
type planEntries struct {
	names []string
	data  [][]byte
	raw   []byte // if set, the plan is these bytes
}

func unzipPlan(t *testing.T, plan []byte) *planEntries {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(plan), int64(len(plan)))
	if err != nil {
		t.Fatal(err)
	}
	e := &planEntries{}
	for _, f := range zr.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		e.names = append(e.names, f.Name)
		e.data = append(e.data, b)
	}
	return e
}

func (e *planEntries) clone() *planEntries {
	return &planEntries{names: append([]string(nil), e.names...), data: append([][]byte(nil), e.data...)}
}

func (e *planEntries) get(name string) []byte {
	for i, n := range e.names {
		if n == name {
			return bytes.Clone(e.data[i])
		}
	}
	return nil
}

func (e *planEntries) set(name string, b []byte) {
	for i, n := range e.names {
		if n == name {
			e.data[i] = b
			return
		}
	}
	e.add(name, b)
}

func (e *planEntries) add(name string, b []byte) {
	e.names = append(e.names, name)
	e.data = append(e.data, b)
}

func (e *planEntries) remove(name string) {
	for i, n := range e.names {
		if n == name {
			e.names = append(e.names[:i], e.names[i+1:]...)
			e.data = append(e.data[:i], e.data[i+1:]...)
			return
		}
	}
}

func (e *planEntries) zip(t *testing.T) []byte {
	t.Helper()
	if e.raw != nil {
		return e.raw
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for i, n := range e.names {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Deflate})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(e.data[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// replaceBackend returns the tfplan protobuf with its backend field replaced (dropped if nil).
func replaceBackend(t *testing.T, tfplan, backend []byte) []byte {
	t.Helper()
	var out []byte
	for len(tfplan) > 0 {
		num, typ, n := protowire.ConsumeTag(tfplan)
		if n < 0 {
			t.Fatal(protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, tfplan[n:])
		if m < 0 {
			t.Fatal(protowire.ParseError(m))
		}
		if num != fieldPlanBackend {
			out = append(out, tfplan[:n+m]...)
		}
		tfplan = tfplan[n+m:]
	}
	if backend != nil {
		out = protowire.AppendTag(out, fieldPlanBackend, protowire.BytesType)
		out = protowire.AppendBytes(out, backend)
	}
	return out
}

// msgpackMap encodes key, value pairs as a msgpack map in the given order (repeats allowed).
func msgpackMap(t *testing.T, kv ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if err := enc.EncodeMapLen(len(kv) / 2); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(kv); i += 2 {
		if err := enc.EncodeString(kv[i].(string)); err != nil {
			t.Fatal(err)
		}
		if err := enc.Encode(kv[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// TestCheckPlanFixtures checks the plans in testdata/plans, which terraform v1.11.4 wrote (so the
// check runs where terraform is not installed): runner-backend.tfplan for a workspace with a
// variable and an output plus the runner's override (backend "local", path
// "state/terraform.tfstate"), implicit-backend.tfplan for an output and no backend block.
func TestCheckPlanFixtures(t *testing.T) {
	b, err := readFile("testdata/plans/runner-backend.tfplan")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPlan(b, planOpts()); err != nil {
		t.Errorf("runner-backend.tfplan: %v", err)
	}
	b, err = readFile("testdata/plans/implicit-backend.tfplan")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPlan(b, testOpts); err != nil {
		t.Errorf("implicit-backend.tfplan: %v", err)
	}
}
