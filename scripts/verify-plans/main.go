// Command verify-plans runs the harmful-plan corpus (test/corpus/harmful, issue 21) against the live cluster
// and prints the "Harmful plans" section of `make verify`: variants of the demo workspace that pass the
// workspace allowlist but deploy something that takes the node or the cluster. Each must be refused by a
// plan rule of the policy three times over: by terraform_plan, called through a real MCP client against
// `agent-sandbox mcp`; in the apply sandbox's check container, before the credential agent starts, when its
// saved plan (made here, outside any sandbox, with the admin kubeconfig) is published and approved as a
// compromised MCP server would; and on the approval screen. It needs the demo workspace applied (its state
// is what the plans are made against): scripts/verify.sh runs scripts/demo-setup.sh first.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
)

type options struct {
	kubeconfig, mcpKubeconfig, policyFile, binary, keyFile, passFile, mirror, terraform, only string
	parallel                                                                                  int
	timeout                                                                                   time.Duration
}

func main() {
	var o options
	fs := flag.NewFlagSet("verify-plans", flag.ExitOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig of the cluster: observes, cleans up and makes the saved plans")
	fs.StringVar(&o.mcpKubeconfig, "mcp-kubeconfig", "", "the MCP server's kubeconfig: the server runs with it, and the apply attempts are made with it")
	fs.StringVar(&o.policyFile, "policy", "policy/policy.yaml", "the policy the webhook enforces")
	fs.StringVar(&o.binary, "binary", "bin/agent-sandbox", "the agent-sandbox binary, run as `agent-sandbox mcp`")
	fs.StringVar(&o.keyFile, "key", "", "the verify approver's private key (trusted by the webhook)")
	fs.StringVar(&o.passFile, "passphrase-file", "", "its passphrase")
	fs.StringVar(&o.mirror, "provider-mirror", os.Getenv("AGENT_SANDBOX_TF_PROVIDER_MIRROR"), "filesystem mirror of the kubernetes provider, for the local plans")
	fs.StringVar(&o.terraform, "terraform", "terraform", "terraform binary (the image's version, 1.11.4)")
	fs.StringVar(&o.only, "only", "", "comma-separated case names to run (default: all)")
	fs.IntVar(&o.parallel, "parallel", 3, "cases run at once (each holds a plan and then an apply sandbox)")
	fs.DurationVar(&o.timeout, "timeout", 40*time.Minute, "for the whole section")
	_ = fs.Parse(os.Args[1:])
	ok, err := run(o)
	if err != nil {
		fmt.Printf("  FAIL: %s\n", scrub.String(err.Error()))
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(o options) (bool, error) {
	fmt.Println("== 5. Harmful plans (allowed workspaces that deploy harm; each refused at plan, at apply and on the approval screen) ==")
	cases, err := corpus.HarmfulPlans()
	if err != nil {
		return false, err
	}
	if o.only != "" {
		want := strings.Split(o.only, ",")
		cases = slices.DeleteFunc(cases, func(c corpus.HarmfulPlan) bool { return !slices.Contains(want, c.Name) })
		if len(cases) != len(want) {
			return false, fmt.Errorf("-only %s: %d of the names are cases of the corpus", o.only, len(cases))
		}
	}
	p, err := policy.LoadFile(o.policyFile)
	if err != nil {
		return false, err
	}
	key, err := corpus.LoadApprover(o.keyFile, o.passFile)
	if err != nil {
		return false, err
	}
	if o.binary, err = filepath.Abs(o.binary); err != nil {
		return false, err
	}
	if _, err := os.Stat(o.binary); err != nil {
		return false, fmt.Errorf("the agent-sandbox binary: %w (make build)", err)
	}
	admin, err := client(o.kubeconfig)
	if err != nil {
		return false, err
	}
	mcpClient, err := client(o.mcpKubeconfig)
	if err != nil {
		return false, err
	}
	work, err := os.MkdirTemp("", "verify-plans-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	apply, err := p.Tool("terraform_apply")
	if err != nil {
		return false, err
	}
	target := apply.Namespaces[0] // the policy gives the Terraform tools one target namespace: the demo's
	env := &corpus.Env{Policy: p, Approver: key, Identities: &corpus.Identities{Admin: admin, MCP: mcpClient}, Run: rand.String(5)}
	r := &corpus.HarmfulRun{Env: env, Binary: o.binary, PolicyFile: o.policyFile, MCPKubeconfig: o.mcpKubeconfig, WorkDir: work,
		TargetNamespace: target, Planner: &corpus.LocalPlanner{Terraform: o.terraform, ProviderMirror: o.mirror, Kubeconfig: o.kubeconfig, Admin: admin,
			Namespace: target, Workspace: "k8s-demo", TempDir: work}}
	fmt.Printf("     %d harmful plans, %d at a time\n", len(cases), o.parallel)
	start := time.Now()
	outcomes, err := r.Run(ctx, cases, o.parallel)
	if err != nil {
		return false, err
	}
	lines, verdict, ok := corpus.HarmfulReport(outcomes)
	for _, l := range lines {
		fmt.Println(scrub.String(l))
	}
	fmt.Printf("     (%s)\n", time.Since(start).Round(time.Second))
	// The verdict is this program's own words, counts and the corpus's case names: not scrubbed, since the
	// scrubber reads "PASS: 27/27" as a password and its value.
	fmt.Println("  " + verdict)
	// The section ends as an operator would: audit verify --against-cluster on the logs its MCP servers wrote.
	logs, _ := filepath.Glob(filepath.Join(work, "*", "audit.jsonl"))
	summary, err := corpus.AuditAgainstCluster(ctx, o.binary, o.kubeconfig, start, logs)
	if err != nil {
		fmt.Println("  FAIL: " + scrub.String(err.Error()))
		return false, nil
	}
	fmt.Println("  audit verify --against-cluster: " + summary)
	return ok, nil
}

func client(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := corpus.ClientConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
