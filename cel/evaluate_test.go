package cel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	celgo "github.com/google/cel-go/cel"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func mustCompile(tb testing.TB, rules []Rule, opts ...Option) *Program {
	tb.Helper()
	p, err := Compile(rules, "test", opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func TestNewInput(t *testing.T) {
	jobJSON, err := json.Marshal(goodJob())
	if err != nil {
		t.Fatal(err)
	}
	u := unstructured.Unstructured{Object: map[string]any{}}
	if err := json.Unmarshal(jobJSON, &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetAPIVersion("batch/v1")
	u.SetKind("Job")

	tests := []struct {
		name           string
		obj            runtime.Object
		wantKind       string
		wantContainers []string
		wantErr        error
	}{
		{"typed Job", goodJob(), "Job", []string{testAgentName, "tool"}, nil},
		{"typed Pod", goodPod(), "Pod", []string{testAgentName, "tool"}, nil},
		{"unstructured Job", &u, "Job", []string{testAgentName, "tool"}, nil},
		{"Pod with ephemeral container", func() runtime.Object {
			p := goodPod()
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}}
			return p
		}(), "Pod", []string{testAgentName, "tool", "debug"}, nil},
		{"ConfigMap", &corev1.ConfigMap{}, "", nil, ErrUnsupportedKind},
		{"unstructured CronJob", &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "CronJob"}}, "", nil, ErrUnsupportedKind},
		{"unstructured Job of another group", &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Job"}}, "", nil, ErrUnsupportedKind},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, err := NewInput(tc.obj, testSettings(), "CREATE")
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if in.Kind != tc.wantKind || in.Operation != "CREATE" {
				t.Errorf("Kind, Operation = %q, %q", in.Kind, in.Operation)
			}
			if in.Object["kind"] != tc.wantKind {
				t.Errorf("object.kind = %v, want %s", in.Object["kind"], tc.wantKind)
			}
			if in.PodSpec["runtimeClassName"] != testRuntimeClass {
				t.Errorf("PodSpec is not the pod spec: %v", in.PodSpec)
			}
			var names []string
			for _, c := range in.Containers {
				names = append(names, c.(map[string]any)["name"].(string))
			}
			if !slices.Equal(names, tc.wantContainers) {
				t.Errorf("containers = %q, want %q", names, tc.wantContainers)
			}
		})
	}
}

// TestEvaluateFailsClosed checks that every way a rule can fail to produce true or false
// is reported as a violation of that rule.
func TestEvaluateFailsClosed(t *testing.T) {
	big := make([]any, 2000)
	for i := range big {
		big[i] = int64(i)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name    string
		expr    string
		opts    []Option
		ctx     context.Context
		timeout time.Duration
		want    string // substring of the violation message
	}{
		{"false", "kind == 'Pod'", nil, nil, 0, "the message"},
		{"missing field without has", "object.spec.nope == 1", nil, nil, 0, "could not be evaluated, so the object is denied: no such key: nope"},
		{"runtime type error", "podSpec.runtimeClassName > 3", nil, nil, 0, "could not be evaluated, so the object is denied: no such overload"},
		{"missing setting", "settings.nothere == 'x'", nil, nil, 0, "no such key: nothere"},
		{"cost limit", "settings.big.all(x, x >= 0)", []Option{WithCostLimit(1000)}, nil, 0, "cost limit exceeded"},
		{"cancelled context", "true", nil, cancelled, 0, "could not be evaluated, so the object is denied: evaluation not started: context canceled"},
		{"deadline inside a comprehension", "settings.big.all(x, settings.big.all(y, settings.big.all(z, x + y + z >= 0)))",
			[]Option{WithCostLimit(math.MaxUint64)}, nil, 20 * time.Millisecond, "interrupted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustCompile(t, []Rule{{Path: "spec.admissionRules[0]", Name: "r", Expression: tc.expr, Message: "the message"}}, tc.opts...)
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			settings := testSettings()
			settings["big"] = big
			in, err := NewInput(goodJob(), settings, "CREATE")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			vs := p.Evaluate(ctx, in)
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("evaluation took %v; the context did not stop it", d)
			}
			if len(vs) != 1 || vs[0].Rule != "r" || vs[0].Path != "spec.admissionRules[0]" {
				t.Fatalf("want one violation of r, got %+v", vs)
			}
			if msg := vs[0].Message; !strings.Contains(msg, tc.want) || strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("message = %q, want one line containing %q", msg, tc.want)
			}
		})
	}
}

func TestEvaluateEmptyInputDeniesEverything(t *testing.T) {
	p := compileDefault(t)
	vs := p.Evaluate(context.Background(), Input{})
	if len(vs) == 0 || !slices.Contains(ruleNames(vs), "runtime-class") {
		t.Fatalf("empty input: want violations including runtime-class, got %+v", vs)
	}
}

func TestEvaluateNilProgramDenies(t *testing.T) {
	var p *Program
	if vs := p.Evaluate(context.Background(), Input{}); len(vs) != 1 {
		t.Fatalf("nil program: want one violation, got %+v", vs)
	}
}

func TestEvaluateConcurrent(t *testing.T) {
	p := compileDefault(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			j := goodJob()
			if i%2 == 1 {
				j.Spec.Template.Spec.HostPID = true
			}
			in, err := NewInput(j, testSettings(), "CREATE")
			if err != nil {
				t.Error(err)
				return
			}
			for range 50 {
				if got := len(p.Evaluate(context.Background(), in)); got != i%2 {
					t.Errorf("goroutine %d: %d violations, want %d", i, got, i%2)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkDefaultRulesPerJob(b *testing.B) {
	p := compileDefault(b)
	settings := testSettings()
	job := goodJob()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		in, err := NewInput(job, settings, "CREATE")
		if err != nil {
			b.Fatal(err)
		}
		if vs := p.Evaluate(ctx, in); len(vs) != 0 {
			b.Fatalf("violations: %+v", vs)
		}
	}
}

// BenchmarkNewInput isolates the conversion of the typed Job.
func BenchmarkNewInput(b *testing.B) {
	settings := testSettings()
	job := goodJob()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewInput(job, settings, "CREATE"); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzEvaluate feeds arbitrary JSON as the object: evaluation must neither panic nor fail
// to report a decision for every rule it could not evaluate.
func FuzzEvaluate(f *testing.F) {
	for _, obj := range []any{goodJob(), goodPod()} {
		data, err := json.Marshal(obj)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "Job")
		f.Add(data, "Pod")
	}
	f.Add([]byte(`{"spec":{"template":{"spec":{"containers":[1,"x",null,{"securityContext":[]}],"volumes":{"a":1}}}}}`), "Job")
	f.Add([]byte(`{"spec":{"containers":[{"env":[{"name":5,"value":"x"}],"ports":[{"hostPort":"80"}]}],"runtimeClassName":7}}`), "Pod")
	f.Add([]byte(`{"spec":null}`), "Pod")
	f.Add([]byte(`[]`), "")

	p := compileDefault(f)
	f.Fuzz(func(t *testing.T, data []byte, kind string) {
		var obj map[string]any
		if err := json.Unmarshal(data, &obj); err != nil {
			return
		}
		spec, containers := podSpecOf(obj, kind)
		in := Input{Object: obj, PodSpec: spec, Containers: containers, Settings: testSettings(), Kind: kind, Operation: "CREATE"}
		for _, v := range p.Evaluate(context.Background(), in) {
			if v.Rule == "" || v.Message == "" || strings.ContainsAny(v.Message, "\n\r") {
				t.Fatalf("malformed violation %+v", v)
			}
			if strings.Contains(v.Message, "internal error") {
				t.Fatalf("rule %s panicked: %s", v.Rule, v.Message)
			}
		}
	})
}

// TestDefaultRulesUnstructuredJob evaluates the good Job as the webhook may receive it:
// decoded from JSON, with float64 numbers.
func TestDefaultRulesUnstructuredJob(t *testing.T) {
	data, err := json.Marshal(goodJob())
	if err != nil {
		t.Fatal(err)
	}
	u := unstructured.Unstructured{Object: map[string]any{}}
	if err := json.Unmarshal(data, &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetAPIVersion("batch/v1")
	u.SetKind("Job")
	p := compileDefault(t)
	in, err := NewInput(&u, testSettings(), "CREATE")
	if err != nil {
		t.Fatal(err)
	}
	if vs := p.Evaluate(context.Background(), in); len(vs) != 0 {
		t.Fatalf("want no violations, got %+v", vs)
	}
	if err := unstructured.SetNestedField(u.Object, float64(testMaxDeadline+1), "spec", "activeDeadlineSeconds"); err != nil {
		t.Fatal(err)
	}
	if got := ruleNames(p.Evaluate(context.Background(), in)); !slices.Equal(got, []string{"deadline"}) {
		t.Fatalf("violated rules = %q, want [deadline]", got)
	}
}

// BenchmarkEvaluate isolates the evaluation of the default rules on a prepared Input.
func BenchmarkEvaluate(b *testing.B) {
	p := compileDefault(b)
	in, err := NewInput(goodJob(), testSettings(), "CREATE")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if vs := p.Evaluate(ctx, in); len(vs) != 0 {
			b.Fatalf("violations: %+v", vs)
		}
	}
}

// TestEvaluateConjunction checks the fast path: it must never hide a violation, and
// exceeding the cost limit together must not fail rules that are each within it.
func TestEvaluateConjunction(t *testing.T) {
	big := make([]any, 100)
	for i := range big {
		big[i] = int64(i)
	}
	const loop = "settings.big.all(x, x >= 0)"
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(loop)
	if iss.Err() != nil {
		t.Fatal(iss.Err())
	}
	prg, err := env.Program(ast, celgo.EvalOptions(celgo.OptTrackCost))
	if err != nil {
		t.Fatal(err)
	}
	_, det, err := prg.Eval(map[string]any{VarSettings: map[string]any{"big": big}})
	if err != nil {
		t.Fatal(err)
	}
	oneLoop := *det.ActualCost()

	tests := []struct {
		name    string
		exprs   []string
		opts    []Option
		want    []string
		fastErr bool // the conjunction itself fails to evaluate
	}{
		{"trailing comment", []string{"true // the rest of the line", "kind == 'Pod'"}, nil, []string{"r1"}, false},
		{"false last", []string{"true", "true", "false"}, nil, []string{"r2"}, false},
		{"error hidden by false", []string{"object.nope == 1", "false"}, nil, []string{"r0", "r1"}, false},
		{"together over the limit, each within", []string{loop, loop, loop}, []Option{WithCostLimit(2 * oneLoop)}, nil, true},
		{"one over the limit", []string{loop, "true"}, []Option{WithCostLimit(oneLoop - 1)}, []string{"r0"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rules []Rule
			for i, e := range tc.exprs {
				rules = append(rules, Rule{Path: fmt.Sprintf("p[%d]", i), Name: fmt.Sprintf("r%d", i), Expression: e, Message: "m"})
			}
			p := mustCompile(t, rules, tc.opts...)
			if p.all == nil {
				t.Fatal("no conjunction compiled")
			}
			in, err := NewInput(goodJob(), map[string]any{"big": big}, "CREATE")
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := p.all.ContextEval(context.Background(), p.activation(in)); (err != nil) != tc.fastErr {
				t.Fatalf("conjunction error = %v, want error: %t", err, tc.fastErr)
			}
			if got := ruleNames(p.Evaluate(context.Background(), in)); !slices.Equal(got, tc.want) {
				t.Fatalf("violated rules = %q, want %q", got, tc.want)
			}
		})
	}
}
