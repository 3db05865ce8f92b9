// Command verify-admission submits the adversarial admission corpus (test/corpus) to a live cluster and its
// Vault, as someone who bypasses the MCP server would, and prints the "Admission check" section of `make
// verify`. It signs the corpus's approval tokens with a dedicated verify approver key that `make deploy`
// adds to the webhook's trusted keys on the local cluster only, and the Vault-direct cases' tokens with the
// cluster's service-account signing key (a token "obtained elsewhere"). Every Job it gets admitted is
// deleted again; every case that would change the namespace or its policies is a server-side dry run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
)

type options struct {
	kubeconfig, policyFile, keyFile, passFile, vaultAddr, saKey, mcpSA string
	key2File, pass2File                                                string
	verbose, allWorkspaces, skipTerraform                              bool
}

func main() {
	var o options
	// Its own flag set: controller-runtime, imported through the webhook package, registers a global
	// -kubeconfig flag.
	fs := flag.NewFlagSet("verify-admission", flag.ExitOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig of the cluster (system:masters)")
	fs.StringVar(&o.policyFile, "policy", "policy/policy.yaml", "the policy the webhook enforces")
	fs.StringVar(&o.keyFile, "key", "", "the verify approver's private key")
	fs.StringVar(&o.passFile, "passphrase-file", "", "its passphrase")
	fs.StringVar(&o.key2File, "key2", "", "a second trusted approver's private key, for the two-person rule's cases (distinct approvers)")
	fs.StringVar(&o.pass2File, "passphrase2-file", "", "its passphrase")
	fs.StringVar(&o.vaultAddr, "vault-addr", os.Getenv("VAULT_ADDR"), "Vault's address")
	fs.StringVar(&o.saKey, "sa-signing-key", "", "the cluster's service-account signing key (PEM), for the Vault-direct cases")
	fs.StringVar(&o.mcpSA, "mcp-service-account", "agent-sandbox-mcp", "the MCP server's ServiceAccount in the sandbox namespace")
	fs.BoolVar(&o.verbose, "v", false, "print every refusal")
	fs.BoolVar(&o.allWorkspaces, "all-workspaces", false, "submit every malicious workspace of the corpus, not the default sample")
	fs.BoolVar(&o.skipTerraform, "skip-terraform", false, "skip section 4 (the Terraform inputs, ~10 min), e.g. while working on admission")
	_ = fs.Parse(os.Args[1:])
	failed, err := run(o)
	if err != nil {
		fmt.Printf("  FAIL: %s\n", scrub.String(err.Error()))
		os.Exit(1)
	}
	if failed > 0 {
		os.Exit(1)
	}
}

// tally prints the PASS and FAIL lines of the sections and counts the failures.
type tally struct{ failed int }

// check prints "PASS: pass" when ok, else "FAIL: fail", counted.
func (t *tally) check(ok bool, pass, fail string) {
	if ok {
		fmt.Println("  PASS: " + pass)
	} else {
		fmt.Println("  FAIL: " + fail)
		t.failed++
	}
}

func run(o options) (int, error) {
	fmt.Println("== 3. Admission check ==")
	p, err := policy.LoadFile(o.policyFile)
	if err != nil {
		return 0, err
	}
	key, err := corpus.LoadApprover(o.keyFile, o.passFile)
	if err != nil {
		return 0, err
	}
	other, err := approval.GenerateKey("not-trusted")
	if err != nil {
		return 0, err
	}
	cfg, err := corpus.ClientConfig(o.kubeconfig)
	if err != nil {
		return 0, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	issuer, err := issuerOf(ctx, cs)
	if err != nil {
		return 0, err
	}
	signer, err := corpus.NewTokenSigner(o.saKey, issuer)
	if err != nil {
		return 0, fmt.Errorf("the cluster's service-account signing key: %w", err)
	}
	ids, err := corpus.Provision(ctx, cfg, p.Spec.Sandbox.Namespace, o.mcpSA)
	if err != nil {
		return 0, err
	}
	defer ids.Close(context.Background())
	var second *approval.PrivateKey
	if o.key2File != "" {
		if second, err = corpus.LoadApprover(o.key2File, o.pass2File); err != nil {
			return 0, err
		}
	}
	env := &corpus.Env{Policy: p, Approver: key, Second: second, Other: other, Identities: ids, Run: rand.String(5),
		Vault:     corpus.VaultTarget{Addr: o.vaultAddr, AuthMount: p.Spec.Sandbox.CredentialAgent.VaultAuthMount, Sign: signer},
		FinishJob: waitFinished(cs)}
	defer env.Cleanup(context.Background())

	var res tally

	job, err := env.SafeJob(ctx, false)
	res.check(err == nil, "safe Job admitted and mutated (submitted with the MCP server's identity)", fmt.Sprint(err))
	if job == nil {
		return res.failed, nil
	}
	pod, err := env.WaitForPod(ctx, job)
	if err != nil {
		res.check(false, "", fmt.Sprintf("the safe Job's Pod did not appear: %v", err))
		return res.failed, nil
	}
	err = env.BoundLoginWorks(ctx)
	res.check(err == nil, "Vault accepts a token bound to a sandbox Pod of the tool (the control for the Vault cases)", fmt.Sprint(err))

	cases := env.All(job, pod)
	outcomes := corpus.Run(ctx, cases)
	rejected := 0
	byClass := map[string][2]int{}
	for _, o2 := range outcomes {
		n := byClass[o2.Case.Class]
		n[1]++
		if o2.Passed {
			rejected++
			n[0]++
			if o.verbose {
				fmt.Printf("     refused  %-70s %s\n", o2.Case.Name+":", firstDenial(o2.Err))
			}
		} else {
			fmt.Printf("     NOT refused as expected: %s (want rule %s): %v\n", o2.Case.Name, o2.Case.Rule, scrub.String(fmt.Sprint(o2.Err)))
		}
		byClass[o2.Case.Class] = n
	}
	classes := make([]string, 0, len(byClass))
	for c := range byClass {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	parts := make([]string, len(classes))
	for i, c := range classes {
		parts[i] = fmt.Sprintf("%s %d/%d", c, byClass[c][0], byClass[c][1])
	}
	fmt.Printf("     by class: %s\n", strings.Join(parts, ", "))
	res.check(rejected == len(outcomes), fmt.Sprintf("%d/%d unsafe objects rejected", rejected, len(outcomes)),
		fmt.Sprintf("%d/%d unsafe objects rejected", rejected, len(outcomes)))

	raceOnReplicas(ctx, &res, env, cs)
	err = env.DryRunThenCreate(ctx)
	res.check(err == nil, "dry runs consumed no approval (real create admitted afterwards)", fmt.Sprint(err))

	warmTwins(ctx, &res, env, cfg, pod)
	webhookIdentity(ctx, &res, ids)

	// The Jobs admitted above hold CPU the Terraform Pods below need.
	env.Cleanup(ctx)
	if o.skipTerraform {
		fmt.Println("  (section 4, the Terraform inputs, skipped: -skip-terraform)")
		return res.failed, nil
	}
	terraformInputs(ctx, &res, env, cs, o.allWorkspaces, o.verbose)
	return res.failed, nil
}

// warmTwins submits the warm-pool twins of the corpus (docs/design/warm-pool.md) to the live pool: forged,
// edited and misplaced claims and warm Jobs not made by the pool as dry runs, then one real claim and what
// must follow it (no second claim, no edit, no removal, no replay of its request ID on the next warm Pod).
func warmTwins(ctx context.Context, res *tally, env *corpus.Env, admin *rest.Config, cold *corev1.Pod) {
	warm, err := env.WaitWarmPod(ctx, 3*time.Minute)
	if err != nil {
		res.check(false, "", err.Error())
		return
	}
	pool, err := corpus.Impersonating(admin, "system:serviceaccount:"+releaseNamespace+":"+webhookServiceAccount)
	if err != nil {
		res.check(false, "", err.Error())
		return
	}
	cases := env.WarmCases(warm, cold, pool)
	outcomes := corpus.Run(ctx, cases)
	rejected := 0
	for _, o := range outcomes {
		if o.Passed {
			rejected++
		} else {
			fmt.Printf("     NOT refused as expected: %s (want rule %s): %v\n", o.Case.Name, o.Case.Rule, scrub.String(fmt.Sprint(o.Err)))
		}
	}
	res.check(rejected == len(outcomes), fmt.Sprintf("warm pool: %d/%d forged claims and warm Jobs not made by the pool rejected", rejected, len(outcomes)),
		fmt.Sprintf("warm pool: %d/%d forged claims and warm Jobs not made by the pool rejected", rejected, len(outcomes)))
	passed, err := env.ClaimOnceOnly(ctx, warm)
	res.check(err == nil, fmt.Sprintf("warm pool: one real claim admitted, then refused: %s", strings.Join(passed, "; ")), fmt.Sprintf("warm pool: %v", err))
	_ = env.DeleteWarmJob(context.Background(), warm)
	// Issue 22 (starvation): a deleted or evicted warm Pod's Job gets no second Pod; the pool replaces it.
	for _, evict := range []bool{false, true} {
		how := map[bool]string{false: "a deleted", true: "an evicted"}[evict]
		took, err := env.WarmReplacement(ctx, evict, warmReplacementLimit)
		res.check(err == nil && took < warmReplacementLimit,
			fmt.Sprintf("warm pool: %s warm Pod was replaced by a running one in %.1f s (< %s)", how, took.Seconds(), warmReplacementLimit),
			fmt.Sprintf("warm pool: %s warm Pod was not replaced within %s (%.1f s): %v", how, warmReplacementLimit, took.Seconds(), err))
	}
}

// The release make deploy installs: its namespace, the webhook's ServiceAccount and the name of its two
// webhook configurations.
const (
	releaseNamespace      = "agent-sandbox-system"
	webhookServiceAccount = "agent-sandbox-webhook"
	webhookConfigurations = "agent-sandbox"
)

// webhookIdentity acts as a user with the built-in edit role of the release namespace, who may impersonate
// the webhook's ServiceAccount, and tries to turn the webhook configurations against the cluster (dry runs):
// the chart's admission policy must refuse each change but a new caBundle.
func webhookIdentity(ctx context.Context, res *tally, ids *corpus.Identities) {
	as, err := ids.EditImpersonating(ctx, releaseNamespace, webhookServiceAccount)
	if err != nil {
		res.check(false, "", fmt.Sprintf("webhook configurations: %v", err))
		return
	}
	attacks, caBundle := corpus.WebhookIdentityAttempts(ctx, as, webhookConfigurations, 30*time.Second)
	refused := 0
	for _, a := range attacks {
		if a.Refused {
			refused++
		} else {
			fmt.Printf("     NOT refused as expected: %s: %v\n", a.Name, scrub.String(fmt.Sprint(a.Err)))
		}
	}
	what := fmt.Sprintf("webhook configurations: %d/%d changes by the webhook's ServiceAccount (acted as by an edit user of %s) refused by the chart's admission policy",
		refused, len(attacks), releaseNamespace)
	res.check(refused == len(attacks), what, what)
	res.check(caBundle == nil, "webhook configurations: a new caBundle alone admitted (the webhook's CA injection still works)",
		fmt.Sprintf("webhook configurations: a new caBundle alone was refused: %v", caBundle))
}

// warmReplacementLimit is issue 22's bound on replacing a deleted warm Pod.
const warmReplacementLimit = 30 * time.Second

// terraformInputs submits the malicious-workspace corpus and a forged, approved saved plan straight to the
// cluster with the MCP server's identity, and checks that each is refused before the credential agent
// starts — and that Vault minted no Terraform credential meanwhile.
func terraformInputs(ctx context.Context, res *tally, env *corpus.Env, cs kubernetes.Interface, all, verbose bool) {
	fmt.Println("== 4. Terraform inputs (straight to the cluster, as the MCP server) ==")
	cases, err := tfcheck.Corpus("internal/tfcheck/testdata")
	if err != nil {
		res.check(false, "", err.Error())
		return
	}
	if !all {
		cases = sample(cases, corpus.LiveWorkspaceSample)
		fmt.Printf("     %d of the corpus's workspaces (VERIFY_ALL_WORKSPACES=1 for all; the integration tests run all)\n", len(cases))
	}
	start := time.Now().Add(-time.Second)
	outcomes := env.MaliciousWorkspaces(ctx, cases, 2)
	refused, byStage := 0, map[string]int{}
	for _, w := range outcomes {
		if w.Refused {
			refused++
			byStage[w.Stage]++
			if verbose {
				fmt.Printf("     refused at %-9s %-45s %s\n", w.Stage, w.Name+":", w.Detail)
			}
		} else {
			fmt.Printf("     NOT refused before the credential: %s: %s\n", w.Name, w.Detail)
		}
	}
	fmt.Printf("     by stage: check %d, publish %d, admission %d\n", byStage[corpus.StageCheck], byStage[corpus.StagePublish], byStage[corpus.StageAdmission])
	line := fmt.Sprintf("%d/%d malicious workspaces refused before any credential was issued", refused, len(outcomes))
	res.check(refused == len(outcomes) && len(outcomes) >= 25, line, line)

	plan, err := os.ReadFile("internal/tfcheck/testdata/plans/implicit-backend.tfplan")
	if err != nil {
		res.check(false, "", err.Error())
		return
	}
	f := env.ForgedPlanApply(ctx, plan)
	res.check(f.Refused && f.Stage == corpus.StageCheck,
		"an approved saved plan whose configuration was swapped for apply-time exec was refused before the apply credential",
		fmt.Sprintf("the forged saved plan: %s", f.Detail))

	minted, err := vaultMintedSince(ctx, cs, start)
	res.check(err == nil && len(minted) == 0, "Vault minted no credential for any of them",
		fmt.Sprintf("Vault minted credentials meanwhile: %v %v", minted, err))
}

// sample keeps the malicious cases named in names; a name the corpus lacks is kept as a case that fails.
func sample(cases []tfcheck.Case, names []string) []tfcheck.Case {
	byName := map[string]tfcheck.Case{}
	for _, c := range cases {
		byName[strings.TrimPrefix(c.Name, "malicious/")] = c
	}
	var out []tfcheck.Case
	for _, n := range names {
		c, ok := byName[n]
		if !ok || !c.Malicious {
			// Submitted as it is, an unknown name fails visibly instead of shrinking the sample.
			c = tfcheck.Case{Name: "malicious/" + n + " (not in the corpus)", Malicious: true, Reason: "no such workspace in the corpus",
				Files: map[string][]byte{"main.tf": []byte("output \"x\" { value = 1 }\n")}}
		}
		out = append(out, c)
	}
	return out
}

// vaultMintedSince lists ServiceAccounts the Vault secrets engine created since start, in any namespace.
func vaultMintedSince(ctx context.Context, cs kubernetes.Interface, start time.Time) ([]string, error) {
	sas, err := cs.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=HashiCorp-Vault"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sa := range sas.Items {
		if !sa.CreationTimestamp.Time.Before(start.Truncate(time.Second)) {
			out = append(out, sa.Namespace+"/"+sa.Name)
		}
	}
	return out, nil
}

func issuerOf(ctx context.Context, cs kubernetes.Interface) (string, error) {
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/.well-known/openid-configuration").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("the cluster's service-account issuer: %w", err)
	}
	var d struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return "", err
	}
	return d.Issuer, nil
}

// waitFinished waits until the kubelet has run the Job's Pod to the end.
func waitFinished(cs kubernetes.Interface) func(ctx context.Context, job *batchv1.Job) error {
	return func(ctx context.Context, job *batchv1.Job) error {
		for {
			j, err := cs.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
			if err == nil {
				for _, c := range j.Status.Conditions {
					if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
						return nil
					}
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("Job %s did not finish: %w", job.Name, ctx.Err())
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
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

// raceOnReplicas races 8 Jobs carrying one approval through the webhook Service, round after round until
// both webhook replicas decided some of them (each replica's own metrics, scraped from its Pod with a
// scrape identity of the corpus's), and checks that each round admitted exactly one Job.
func raceOnReplicas(ctx context.Context, res *tally, env *corpus.Env, cs kubernetes.Interface) {
	reps, err := corpus.NewReplicas(ctx, cs, "agent-sandbox-system", "agent-sandbox-webhook")
	if err != nil {
		res.check(false, "", "the webhook replicas' metrics: "+err.Error())
		return
	}
	defer reps.Close(context.Background())
	rounds, err := env.RaceAcrossReplicas(ctx, reps, 5, 8)
	for i, r := range rounds {
		fmt.Printf("     race round %d: %s\n", i+1, r)
	}
	res.check(err == nil, fmt.Sprintf("one approval admitted exactly one of 8 racing Jobs in each of %d rounds, decided by both webhook replicas (their own metrics)", len(rounds)),
		fmt.Sprint(err))
}
