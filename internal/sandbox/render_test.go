package sandbox

import (
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// kubeletExpand is the kubelet's expansion of a container's command and args (Kubernetes'
// third_party/forked/golang/expansion): $$ is $, $(NAME) is the value of a variable the container defines,
// and any other $ stays.
func kubeletExpand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// Found live (2026-12-07): the shipped plan rules hold '$$' (plan-command-literal); rendered into the plan
// and apply checks' arguments, the kubelet made it '$', and the rule the sandbox enforced let through a plan
// the policy's rule refuses (make verify: command-from-configmap "got through" at plan and at apply, while
// the same rules refused it outside a sandbox). Every container command of a tool's Job, as the kubelet
// expands it with any variables defined, is the policy's rendering exactly.
func TestJobCommandsReachTheProgramAsRendered(t *testing.T) {
	p, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"RUN": "injected", "KUBECONFIG": "/elsewhere", "HOME": "/tmp"}
	sawDollar := false
	for _, tool := range p.Spec.Tools {
		params := map[string]any{}
		switch tool.Name {
		case "terraform_plan":
			params = map[string]any{"workspace": "k8s-demo", "source": "tfws-0123456789abcdef0123"}
		case "terraform_apply":
			params = map[string]any{"workspace": "k8s-demo", "plan_id": strings.Repeat("a", 64)}
		default:
			continue
		}
		pt, err := p.Tool(tool.Name)
		if err != nil {
			t.Fatal(err)
		}
		inv, err := pt.Invoke(params)
		if err != nil {
			t.Fatalf("%s: %v", tool.Name, err)
		}
		job, err := RenderJob(p, JobSpec{Invocation: inv, RequestID: "req-0123456789ab"})
		if err != nil {
			t.Fatal(err)
		}
		spec := job.Spec.Template.Spec
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			want := inv.Argv
			if c.Name == contract.CheckContainer {
				want = inv.CheckArgv
			}
			got := make([]string, len(c.Command))
			for i, a := range c.Command {
				got[i] = kubeletExpand(a, env)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: container %s runs %q, the policy rendered %q", tool.Name, c.Name, got, want)
			}
			sawDollar = sawDollar || slices.ContainsFunc(want, func(a string) bool { return strings.Contains(a, "$$") })
		}
	}
	if !sawDollar {
		t.Fatal("no rendered argument holds $$: the shipped plan rules no longer test what this test is for")
	}
}
