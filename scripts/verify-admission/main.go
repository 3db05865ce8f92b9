// Command verify-admission submits the adversarial admission corpus (test/corpus) to a live cluster, as
// someone who bypasses the MCP server would, and prints the "Admission check" section of `make verify`.
// It signs the corpus's approval tokens with a dedicated verify approver key that `make deploy` adds to
// the webhook's trusted keys. Every Job it gets admitted is deleted again.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
)

func main() {
	var kubeconfig, policyFile, keyFile, passFile string
	var verbose bool
	// Its own flag set: controller-runtime, imported through the webhook package, registers a global
	// -kubeconfig flag.
	fs := flag.NewFlagSet("verify-admission", flag.ExitOnError)
	fs.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig of the cluster")
	fs.StringVar(&policyFile, "policy", "policy/policy.yaml", "the policy the webhook enforces")
	fs.StringVar(&keyFile, "key", "", "the verify approver's private key")
	fs.StringVar(&passFile, "passphrase-file", "", "its passphrase")
	fs.BoolVar(&verbose, "v", false, "print every refusal")
	_ = fs.Parse(os.Args[1:])
	failed, err := run(kubeconfig, policyFile, keyFile, passFile, verbose)
	if err != nil {
		fmt.Printf("  FAIL: %s\n", scrub.String(err.Error()))
		os.Exit(1)
	}
	if failed > 0 {
		os.Exit(1)
	}
}

func run(kubeconfig, policyFile, keyFile, passFile string, verbose bool) (int, error) {
	fmt.Println("== 3. Admission check ==")
	p, err := policy.LoadFile(policyFile)
	if err != nil {
		return 0, err
	}
	pass, err := os.ReadFile(passFile)
	if err != nil {
		return 0, err
	}
	key, err := approval.LoadPrivateKey(keyFile, []byte(strings.TrimSpace(string(pass))))
	if err != nil {
		return 0, err
	}
	other, err := approval.GenerateKey("not-trusted")
	if err != nil {
		return 0, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return 0, err
	}
	// The corpus triggers Pod Security warnings on purpose; the refusals are what is checked.
	cfg.WarningHandler = rest.NoWarnings{}
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := &corpus.Env{Policy: p, Approver: key, Client: cs, Run: rand.String(5)}
	defer env.Cleanup(context.Background())

	failed := 0
	check := func(ok bool, pass, fail string) {
		if ok {
			fmt.Println("  PASS: " + pass)
		} else {
			fmt.Println("  FAIL: " + fail)
			failed++
		}
	}

	job, err := env.SafeJob(ctx, false)
	check(err == nil, "safe Job admitted and mutated", fmt.Sprint(err))
	cases := env.Unsafe(other)
	if job != nil {
		if pod, err := env.WaitForPod(ctx, job); err == nil {
			cases = append(cases, env.PodActions(job, pod)...)
		} else {
			check(false, "", fmt.Sprintf("the safe Job's Pod did not appear: %v", err))
		}
	}
	outcomes := corpus.Run(ctx, cases)
	rejected := 0
	for _, o := range outcomes {
		if o.Passed {
			rejected++
			if verbose {
				fmt.Printf("     rejected %-45s %s\n", o.Case.Name+":", firstDenial(o.Err))
			}
			continue
		}
		fmt.Printf("     NOT rejected as expected: %s (want rule %s): %v\n", o.Case.Name, o.Case.Rule, scrub.String(fmt.Sprint(o.Err)))
	}
	check(rejected == len(outcomes), fmt.Sprintf("%d/%d unsafe objects rejected", rejected, len(outcomes)),
		fmt.Sprintf("%d/%d unsafe objects rejected", rejected, len(outcomes)))

	admitted, _ := env.Race(ctx, 8)
	check(admitted == 1, "one approval admitted exactly one of 8 racing Jobs", fmt.Sprintf("one approval admitted %d of 8 racing Jobs", admitted))
	err = env.DryRunThenCreate(ctx)
	check(err == nil, "dry runs consumed no approval (real create admitted afterwards)", fmt.Sprint(err))
	return failed, nil
}

func firstDenial(err error) string {
	s := err.Error()
	if i := strings.Index(s, "agent-sandbox denied this: "); i >= 0 {
		s = s[i+len("agent-sandbox denied this: "):]
	}
	if len(s) > 110 {
		s = s[:107] + "..."
	}
	return s
}
