package cel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/agent-sandbox/agent-sandbox/test/corpus/cases"
)

// compileDefault compiles DefaultRules or stops the test.
func compileDefault(tb testing.TB) *Program {
	tb.Helper()
	p, err := Compile(DefaultRules(), "default")
	if err != nil {
		tb.Fatalf("Compile(DefaultRules()):\n%v", err)
	}
	return p
}

// ruleNames returns the sorted names of the violated rules.
func ruleNames(vs []Violation) []string {
	names := make([]string, 0, len(vs))
	for _, v := range vs {
		names = append(names, v.Rule)
	}
	slices.Sort(names)
	return names
}

func TestDefaultRulesShape(t *testing.T) {
	rules := DefaultRules()
	if len(rules) < 20 {
		t.Fatalf("DefaultRules() has %d rules, want at least 20", len(rules))
	}
	for i, r := range rules {
		if want := fmt.Sprintf("spec.admissionRules[%d]", i); r.Path != want {
			t.Errorf("rule %d: Path = %q, want %q", i, r.Path, want)
		}
		if r.Name == "" || strings.ToLower(r.Name) != r.Name || strings.ContainsAny(r.Name, " _") {
			t.Errorf("%s: name %q is not kebab-case", r.Path, r.Name)
		}
		if r.Message == "" || strings.ContainsAny(r.Message, "\n\r") {
			t.Errorf("%s (%s): message must be one non-empty line, got %q", r.Path, r.Name, r.Message)
		}
	}
	if compileDefault(t).all == nil {
		t.Error("the default rules compiled without the conjunction fast path")
	}
}

// mutation breaks (or, with want empty, harmlessly changes) the good Job.
type mutation struct {
	name   string
	mutate func(*batchv1.Job)
	want   []string
}

// podSpec, tool and agent address the parts of the Job that mutations change.
func podSpec(j *batchv1.Job) *corev1.PodSpec { return &j.Spec.Template.Spec }
func tool(j *batchv1.Job) *corev1.Container  { return &j.Spec.Template.Spec.Containers[0] }
func agent(j *batchv1.Job) *corev1.Container { return &j.Spec.Template.Spec.InitContainers[0] }

// ruleSet is the set of the default rules' names.
func ruleSet() map[string]bool {
	names := map[string]bool{}
	for _, r := range DefaultRules() {
		names[r.Name] = true
	}
	return names
}

// celRules returns, sorted, the rules a corpus refusal names when they are all rules of the policy (the
// webhook names several failed rules joined by commas), or nil when the refusal is not the rules' (an
// exactness check, say).
func celRules(refusal string, names map[string]bool) []string {
	rules := strings.Split(refusal, ",")
	for _, r := range rules {
		if !names[r] {
			return nil
		}
	}
	slices.Sort(rules)
	return rules
}

// jobMutations lists variations of the good Job: each rule broken at least once, in the tool container
// and in the sidecar init container, plus changes that must stay allowed. The unsafe Jobs are the
// adversarial corpus's (test/corpus/cases), every one whose refusal the rules make: the fixture has the
// shape of the corpus's Job after the injection (the tool container first, the credential agent the
// first init container, the same volume names). The integration tests submit the same cases to a real API
// server. unitMutations are the few the corpus cannot hold.
func jobMutations() []mutation {
	names := ruleSet()
	var out []mutation
	for _, c := range cases.Jobs() {
		if want := celRules(c.Rule, names); want != nil {
			out = append(out, mutation{c.Class + "/" + c.Name, c.Mutate, want})
		}
	}
	return append(out, unitMutations()...)
}

// unitMutations are the variations of the good Job that are not corpus cases: those the rules must allow
// (the corpus holds only refusals, and the webhook refuses most of these Jobs anyway, as not what the
// policy renders), the fixture's own boundaries and node placement (the shipped policy that the corpus
// runs under sets no nodeSelector or tolerations), and Jobs the API server refuses before any webhook
// sees them, kept because the rules must not lean on the API server's validation.
func unitMutations() []mutation {
	return []mutation{
		// Allowed variations: no rule may fire.
		{"explicit false host namespaces", func(j *batchv1.Job) {
			podSpec(j).HostNetwork, podSpec(j).HostPID, podSpec(j).HostIPC = false, false, false
		}, nil},
		{"runAsNonRoot only per container", func(j *batchv1.Job) { podSpec(j).SecurityContext.RunAsNonRoot = nil }, nil},
		{"runAsNonRoot only at pod level", func(j *batchv1.Job) {
			tool(j).SecurityContext.RunAsNonRoot, agent(j).SecurityContext.RunAsNonRoot = nil, nil
		}, nil},
		{"seccomp only per container", func(j *batchv1.Job) { podSpec(j).SecurityContext.SeccompProfile = nil }, nil},
		{"seccomp only at pod level", func(j *batchv1.Job) {
			tool(j).SecurityContext.SeccompProfile, agent(j).SecurityContext.SeccompProfile = nil, nil
		}, nil},
		{"no pod security context but hardened containers", func(j *batchv1.Job) { podSpec(j).SecurityContext = nil }, nil},
		{"deadline at the maximum", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = new(testMaxDeadline) }, nil},
		{"pod deadline within the maximum", func(j *batchv1.Job) { podSpec(j).ActiveDeadlineSeconds = new(int64(60)) }, nil},
		{"token-like name from fieldRef", func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "TOKEN_AUDIENCE_FIELD", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}})
		}, nil},
		{"token-like name with empty value", func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "GITHUB_TOKEN"})
		}, nil},
		{"configMap and downwardAPI projections", func(j *batchv1.Job) {
			v := &podSpec(j).Volumes[1]
			if v.Name != testTokenVolume {
				panic("the fixture's second volume is not the Vault token")
			}
			v.Projected.Sources = append(v.Projected.Sources,
				corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}}},
				corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{}})
		}, nil},
		{"dnsPolicy Default", func(j *batchv1.Job) { podSpec(j).DNSPolicy = corev1.DNSDefault }, nil},
		{"extra node selector", func(j *batchv1.Job) { podSpec(j).NodeSelector["zone"] = "a" }, nil},
		{"explicit default proc mount", func(j *batchv1.Job) {
			agent(j).SecurityContext.ProcMount = new(corev1.DefaultProcMount)
		}, nil},
		{"extra toleration with seconds", func(j *batchv1.Job) {
			podSpec(j).Tolerations = append(podSpec(j).Tolerations, corev1.Toleration{
				Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(30))})
		}, nil},
		{"apparmor localhost allowed", func(j *batchv1.Job) {
			podSpec(j).SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: new("p")}
		}, nil},
		{"selinux container_t allowed", func(j *batchv1.Job) {
			tool(j).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t"}
		}, nil},
		{"local probe allowed", func(j *batchv1.Job) {
			tool(j).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}}}
		}, nil},

		// The fixture's boundary: one second above its maxDeadlineSeconds.
		{"job deadline above maximum", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = new(testMaxDeadline + 1) }, []string{"deadline"}},
		// node-placement: the fixture's settings ask for a node selector and a toleration.
		{"no node selector", func(j *batchv1.Job) { podSpec(j).NodeSelector = nil }, []string{"node-placement"}},
		{"other node pool", func(j *batchv1.Job) { podSpec(j).NodeSelector[testNodeLabel] = "false" }, []string{"node-placement"}},
		{"no tolerations", func(j *batchv1.Job) { podSpec(j).Tolerations = nil }, []string{"node-placement"}},
		{"toleration operator Equal instead of Exists", func(j *batchv1.Job) {
			podSpec(j).Tolerations[0].Operator = corev1.TolerationOpEqual
		}, []string{"node-placement"}},

		// The API server refuses these Jobs itself: privileged with allowPrivilegeEscalation false (the
		// corpus's privileged cases set both), a hostProcess container in a Pod that is not all hostProcess on
		// the host network, ephemeral containers in a pod template (they arrive only through the
		// ephemeralcontainers subresource, which the webhook refuses by its own rule).
		{"privileged tool, escalation still off", func(j *batchv1.Job) { tool(j).SecurityContext.Privileged = new(true) }, []string{"not-privileged"}},
		{"privileged sidecar, escalation still off", func(j *batchv1.Job) { agent(j).SecurityContext.Privileged = new(true) }, []string{"not-privileged"}},
		{"hostProcess sidecar", func(j *batchv1.Job) {
			agent(j).SecurityContext.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: new(true)}
		}, []string{"no-host-process"}},
		{"hardened ephemeral container", func(j *batchv1.Job) {
			podSpec(j).EphemeralContainers = []corev1.EphemeralContainer{{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon(*tool(j).DeepCopy()),
			}}
			podSpec(j).EphemeralContainers[0].Name = "debugger"
			podSpec(j).EphemeralContainers[0].VolumeMounts = nil
		}, []string{"no-ephemeral-containers"}},
		{"bare ephemeral container", func(j *batchv1.Job) {
			podSpec(j).EphemeralContainers = []corev1.EphemeralContainer{{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"},
			}}
		}, []string{
			"drop-all-capabilities", "no-ephemeral-containers", "no-privilege-escalation",
			"read-only-root-filesystem", "resource-limits", // seccomp and non-root come from the pod
		}},
	}
}

func TestDefaultRulesGoodJob(t *testing.T) {
	p := compileDefault(t)
	in, err := NewInput(goodJob(), testSettings(), "CREATE")
	if err != nil {
		t.Fatal(err)
	}
	if vs := p.Evaluate(context.Background(), in); len(vs) != 0 {
		t.Fatalf("good Job: want no violations, got %+v", vs)
	}
}

func TestDefaultRulesMutations(t *testing.T) {
	p := compileDefault(t)
	covered := map[string]bool{}
	for _, tc := range jobMutations() {
		t.Run(tc.name, func(t *testing.T) {
			j := goodJob()
			tc.mutate(j)
			in, err := NewInput(j, testSettings(), "CREATE")
			if err != nil {
				t.Fatal(err)
			}
			vs := p.Evaluate(context.Background(), in)
			if got := ruleNames(vs); !slices.Equal(got, tc.want) {
				t.Fatalf("violated rules = %q, want %q\nviolations: %+v", got, tc.want, vs)
			}
			for _, v := range vs {
				covered[v.Rule] = true
				if strings.Contains(v.Message, "could not be evaluated") {
					t.Errorf("%s: want a decision, got an evaluation error: %s", v.Rule, v.Message)
				}
			}
		})
	}
	for _, r := range DefaultRules() {
		if !covered[r.Name] {
			t.Errorf("no mutation breaks rule %s", r.Name)
		}
	}
}

// TestDefaultRulesPod evaluates the rules on Pods: the corpus's unsafe Pods whose refusal the rules make
// (test/corpus/cases), and Pods the corpus cannot hold: the API server refuses a Pod that names a
// RuntimeClass it does not have (runc, on a node that has only gVisor's) and creates no Pod with ephemeral
// containers, and Pod Security refuses a privileged sidecar, each before any webhook sees the Pod.
func TestDefaultRulesPod(t *testing.T) {
	p := compileDefault(t)
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		want   []string
	}{
		{"good", func(*corev1.Pod) {}, nil},
		{"pod deadline within maximum", func(pod *corev1.Pod) { pod.Spec.ActiveDeadlineSeconds = new(int64(600)) }, nil},
		{"runc", func(pod *corev1.Pod) { pod.Spec.RuntimeClassName = new("runc") }, []string{"runtime-class"}},
		{"privileged sidecar", func(pod *corev1.Pod) { pod.Spec.InitContainers[0].SecurityContext.Privileged = new(true) }, []string{"not-privileged"}},
		{"ephemeral container added", func(pod *corev1.Pod) {
			pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox", SecurityContext: hardened()},
			}}
		}, []string{"no-ephemeral-containers", "resource-limits"}},
	}
	names := ruleSet()
	corpusPods := 0
	for _, c := range cases.Pods() {
		if want := celRules(c.Rule, names); want != nil && c.Mutate != nil {
			tests = append(tests, struct {
				name   string
				mutate func(*corev1.Pod)
				want   []string
			}{"corpus/" + c.Name, c.Mutate, want})
			corpusPods++
		}
	}
	if corpusPods == 0 {
		t.Fatal("no Pod case of the corpus is refused by the rules: is celRules still matching?")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := goodPod()
			tc.mutate(pod)
			in, err := NewInput(pod, testSettings(), "CREATE")
			if err != nil {
				t.Fatal(err)
			}
			if got := ruleNames(p.Evaluate(context.Background(), in)); !slices.Equal(got, tc.want) {
				t.Fatalf("violated rules = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDefaultRulesSettingsShapes checks that settings decoded from JSON or YAML (float64
// numbers, []any and map[string]any) and empty placement settings work as well.
func TestDefaultRulesSettingsShapes(t *testing.T) {
	p := compileDefault(t)
	tests := []struct {
		name   string
		adjust func(map[string]any)
		want   []string
	}{
		{"typed Go values", func(map[string]any) {}, nil},
		{"JSON numbers and terse maps", func(s map[string]any) {
			s["maxDeadlineSeconds"] = float64(testMaxDeadline)
			s["nodeSelector"] = map[string]string{testNodeLabel: "true"}
			s["tolerations"] = []any{map[string]any{"key": testNodeLabel, "operator": "Exists", "effect": "NoSchedule"}}
		}, nil},
		{"Go int", func(s map[string]any) { s["maxDeadlineSeconds"] = int(testMaxDeadline) }, nil},
		{"empty placement", func(s map[string]any) {
			s["nodeSelector"] = map[string]string{}
			s["tolerations"] = []any{}
		}, nil},
		{"no placement keys", func(s map[string]any) {
			delete(s, "nodeSelector")
			delete(s, "tolerations")
		}, nil},
		{"no credential agent name", func(s map[string]any) { delete(s, "credentialAgentContainer") }, nil},
		{"stricter deadline", func(s map[string]any) { s["maxDeadlineSeconds"] = 300 }, []string{"deadline"}},
		{"other toleration required", func(s map[string]any) {
			s["tolerations"] = []any{map[string]any{"key": "gvisor", "operator": "Exists"}}
		}, []string{"node-placement"}},
		{"toleration with another effect required", func(s map[string]any) {
			s["tolerations"] = []any{map[string]any{"key": testNodeLabel, "operator": "Exists", "effect": "NoExecute"}}
		}, []string{"node-placement"}},
		{"toleration with a value required", func(s map[string]any) {
			s["tolerations"] = []any{map[string]any{"key": testNodeLabel, "operator": "", "value": "true", "effect": "NoSchedule"}}
		}, []string{"node-placement"}},
		{"runtime class setting missing fails closed", func(s map[string]any) { delete(s, "runtimeClassName") }, []string{"runtime-class"}},
		{"empty runtime class setting", func(s map[string]any) { s["runtimeClassName"] = "" }, []string{"runtime-class"}},
		{"empty vault audience setting", func(s map[string]any) { s["vaultAudience"] = "" }, []string{"service-account-token"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testSettings()
			tc.adjust(s)
			in, err := NewInput(goodJob(), s, "CREATE")
			if err != nil {
				t.Fatal(err)
			}
			if got := ruleNames(p.Evaluate(context.Background(), in)); !slices.Equal(got, tc.want) {
				t.Fatalf("violated rules = %q, want %q", got, tc.want)
			}
		})
	}
}
