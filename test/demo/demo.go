// Package demo drives the scenario agent-sandbox exists for, end to end, through a real MCP client talking
// to `agent-sandbox mcp` over stdio: a clean plan; a one-line label edit that forces replacement of the
// running Deployment; terraform_plan flagging it; terraform_apply stopping for approval; a human approving
// in a terminal; the apply running; and the used approval refused when replayed, both through the server
// and straight at the cluster. `make demo` prints it as a story; the end-to-end tests assert on the Report.
package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	_ "modernc.org/sqlite" // the approvals database, read as an attacker who stole a used token would

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/approval/store"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
	"github.com/agent-sandbox/agent-sandbox/mcp"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// Config says where everything is.
type Config struct {
	Binary          string // the agent-sandbox binary
	Policy          string
	MCPKubeconfig   string // the MCP server's sandbox-only identity
	AdminKubeconfig string // to observe the Deployment and to play the attacker who bypasses the server
	Workspaces      string // folder holding the k8s-demo workspace (a copy: the demo edits it)
	DB, AuditLog    string
	ApproverKey     string
	// PassphraseFile drives the approval prompt through a pseudo-terminal (unattended runs). Empty: the
	// approval runs on this process's terminal and a person types.
	PassphraseFile string
	Audience       string
	Out            io.Writer
}

// Report is what happened, for the tests.
type Report struct {
	Tools                []string
	Pods                 service.PodStatusOutput
	CleanPlan            service.PlanOutput
	ReplacePlan          service.PlanOutput
	ApprovalRequired     service.ApplyOutput
	ApproveTranscript    string
	Applied              service.ApplyOutput
	DeploymentBefore     string // UID
	DeploymentAfter      string
	ReplayThroughServer  service.ApplyOutput
	ReplayAtCluster      error
	PodsAfter            service.PodStatusOutput
	KubeSystemRefusal    string
	AuditVerify          string
	RequestIDs           []string
	ToolResults          []string // every tool result's text, to scan for secrets
	ServerLog            *harness.SyncBuffer
	LeftoverVaultObjects []string
}

const workspace = "k8s-demo"

// markedLine is the demo's one-line edit (see terraform/k8s-demo/main.tf).
var markedLine = regexp.MustCompile(`(?m)^(\s*track\s*=\s*)"stable"`)

// Run plays the scenario. It stops at the first step that does not go as it must.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	d := &driver{cfg: cfg, r: &Report{ServerLog: &harness.SyncBuffer{}}}
	return d.r, d.run(ctx)
}

type driver struct {
	cfg    Config
	r      *Report
	client *mcp.Client
	admin  kubernetes.Interface
	step   int
	// start is when the scenario began: it answers for the credentials minted from then on.
	start time.Time
}

func (d *driver) say(format string, args ...any) { fmt.Fprintf(d.cfg.Out, format+"\n", args...) }

func (d *driver) section(title string) {
	d.step++
	d.say("\n\033[1m── %d. %s\033[0m", d.step, title)
}

func (d *driver) run(ctx context.Context) error {
	var err error
	d.start = time.Now().Truncate(time.Second)
	if d.admin, err = clientFor(d.cfg.AdminKubeconfig); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, d.cfg.Binary, "mcp", "--policy", d.cfg.Policy, "--kubeconfig", d.cfg.MCPKubeconfig,
		"--workspaces", d.cfg.Workspaces, "--db", d.cfg.DB, "--audit-log", d.cfg.AuditLog)
	cmd.Stderr = d.r.ServerLog
	if d.client, err = mcp.DialCommand(ctx, cmd); err != nil {
		return err
	}
	defer d.client.Close()
	d.client.OnProgress = func(msg string, n, total float64) { d.say("     … %s (%.0f/%.0f)", msg, n, total) }

	d.section("An MCP client connects to agent-sandbox mcp (stdio)")
	if d.r.Tools, err = d.client.ToolNames(ctx); err != nil {
		return err
	}
	d.say("   server %s offers: %s", d.client.ServerName(), strings.Join(d.r.Tools, ", "))

	d.section("k8s_get_pod_status(namespace=demo-app): the running app, read from a gVisor sandbox")
	if err := d.call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"}, &d.r.Pods); err != nil {
		return err
	}
	d.printPods(d.r.Pods)
	res, err := d.client.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "kube-system"})
	if err != nil {
		return err
	}
	d.r.ToolResults = append(d.r.ToolResults, res.Text)
	if !res.IsError {
		return errors.New("k8s_get_pod_status(kube-system) was not refused")
	}
	d.r.KubeSystemRefusal = res.Text
	d.say("   kube-system is out of scope: %s", res.Text)

	d.section("terraform_plan(workspace=k8s-demo): the plan is clean")
	if err := d.call(ctx, "terraform_plan", map[string]any{"workspace": workspace}, &d.r.CleanPlan); err != nil {
		return err
	}
	d.say("   %s", planLine(d.r.CleanPlan))
	if !d.r.CleanPlan.NoChanges {
		return fmt.Errorf("the first plan is not clean: %s", planLine(d.r.CleanPlan))
	}

	d.section("A one-line label edit in the workspace")
	if err := d.editLabel(); err != nil {
		return err
	}

	d.section("terraform_plan again: agent-sandbox flags the forced replacement")
	if err := d.call(ctx, "terraform_plan", map[string]any{"workspace": workspace}, &d.r.ReplacePlan); err != nil {
		return err
	}
	p := d.r.ReplacePlan
	d.say("   %s", planLine(p))
	for _, ch := range p.Changes {
		d.say("   %-34s %v%s", ch.Address, ch.Actions, map[bool]string{true: "  ← REPLACE", false: ""}[ch.Replace])
	}
	for _, s := range p.DestructiveSignals {
		d.say("   \033[31mdestructive signal %-20s\033[0m %s", s.Name, s.Line)
	}
	d.say("   next: %s", p.Next)
	if !p.Destructive || p.Summary.Replace == 0 {
		return errors.New("the plan after the label edit is not flagged as a replacement")
	}

	if d.r.DeploymentBefore, err = d.deploymentUID(ctx); err != nil {
		return err
	}
	d.section("terraform_apply(plan_id): stops, approval required")
	args := map[string]any{"workspace": workspace, "plan_id": p.PlanID}
	if err := d.call(ctx, "terraform_apply", args, &d.r.ApprovalRequired); err != nil {
		return err
	}
	d.say("   status %s: %s", d.r.ApprovalRequired.Status, d.r.ApprovalRequired.Message)
	if d.r.ApprovalRequired.Status != service.StatusApprovalRequired {
		return fmt.Errorf("terraform_apply without an approval returned %q", d.r.ApprovalRequired.Status)
	}

	d.section("A human approves in a terminal: " + d.r.ApprovalRequired.ApproveCommand)
	if err := d.approve(ctx, d.r.ApprovalRequired.ApprovalRequest); err != nil {
		return err
	}

	d.section("terraform_apply(plan_id) again: the approved plan is applied")
	if err := d.call(ctx, "terraform_apply", args, &d.r.Applied); err != nil {
		return err
	}
	d.say("   status %s: %s", d.r.Applied.Status, d.r.Applied.Message)
	if d.r.Applied.Status != service.StatusApplied {
		return fmt.Errorf("terraform_apply after approval returned %q: %s", d.r.Applied.Status, d.r.Applied.Message)
	}
	if d.r.DeploymentAfter, err = d.deploymentUID(ctx); err != nil {
		return err
	}
	d.say("   Deployment web: uid %s → %s (replaced)", short(d.r.DeploymentBefore), short(d.r.DeploymentAfter))

	d.section("Replaying the used approval")
	if err := d.call(ctx, "terraform_apply", args, &d.r.ReplayThroughServer); err != nil {
		return err
	}
	d.say("   through the server: %s (a new request %s; the used grant is gone)", d.r.ReplayThroughServer.Status, d.r.ReplayThroughServer.ApprovalRequest)
	if d.r.ReplayThroughServer.Status != service.StatusApprovalRequired {
		return errors.New("the server reused a consumed approval")
	}
	_ = exec.CommandContext(ctx, d.cfg.Binary, "deny", d.r.ReplayThroughServer.ApprovalRequest, "--db", d.cfg.DB, "--reason", "demo: replay check").Run()
	d.r.ReplayAtCluster = d.replayAtCluster(ctx, d.r.ApprovalRequired.ApprovalRequest)
	if d.r.ReplayAtCluster == nil {
		return errors.New("the cluster admitted a Job carrying a used approval")
	}
	d.say("   straight at the cluster with the stolen token: %s", d.r.ReplayAtCluster)

	d.section("k8s_get_pod_status(namespace=demo-app): the new pods")
	if err := d.call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"}, &d.r.PodsAfter); err != nil {
		return err
	}
	d.printPods(d.r.PodsAfter)

	d.section("The audit trail")
	out, err := exec.CommandContext(ctx, d.cfg.Binary, "audit", "verify", "--file", d.cfg.AuditLog).CombinedOutput()
	d.r.AuditVerify = strings.TrimSpace(string(out))
	d.say("   %s", d.r.AuditVerify)
	if err != nil {
		return fmt.Errorf("audit verify: %s", out)
	}
	show, _ := exec.CommandContext(ctx, d.cfg.Binary, "audit", "show", "--file", d.cfg.AuditLog, "--request-id", d.r.Applied.RequestID).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(show)), "\n") {
		d.say("   %s", line)
	}

	d.section("No credential outlives its sandbox")
	d.r.LeftoverVaultObjects = d.vaultLeftovers(ctx)
	if len(d.r.LeftoverVaultObjects) > 0 {
		return fmt.Errorf("Vault-minted objects remain: %v", d.r.LeftoverVaultObjects)
	}
	d.say("   no ServiceAccount, Role or RoleBinding minted by Vault remains in demo-app")
	return nil
}

// call calls a tool and decodes its structured result; a tool error fails the demo.
func (d *driver) call(ctx context.Context, tool string, args map[string]any, out any) error {
	res, err := d.client.Call(ctx, tool, args)
	if err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	d.r.ToolResults = append(d.r.ToolResults, res.Text)
	if res.IsError {
		return fmt.Errorf("%s failed: %s", tool, res.Text)
	}
	if err := res.Decode(out); err != nil {
		return fmt.Errorf("%s: decode result: %w", tool, err)
	}
	var id struct {
		RequestID string `json:"request_id"`
	}
	_ = res.Decode(&id)
	d.r.RequestIDs = append(d.r.RequestIDs, id.RequestID)
	return nil
}

func (d *driver) printPods(p service.PodStatusOutput) {
	d.say("   %-34s %-8s %-6s %-9s %-8s %s", "NAME", "PHASE", "READY", "RESTARTS", "AGE", "NODE")
	for _, pod := range p.Pods {
		d.say("   %-34s %-8s %-6s %-9d %-8s %s", pod.Name, pod.Phase, pod.Ready, pod.Restarts, pod.Age, pod.Node)
	}
	d.say("   (request %s)", p.RequestID)
}

func planLine(p service.PlanOutput) string {
	if p.NoChanges {
		return fmt.Sprintf("No changes. Plan %s (request %s)", short(p.PlanID), p.RequestID)
	}
	return fmt.Sprintf("Plan %s: %d to add, %d to change, %d to destroy, %d replaced (request %s)",
		short(p.PlanID), p.Summary.Add, p.Summary.Change, p.Summary.Destroy, p.Summary.Replace, p.RequestID)
}

func (d *driver) editLabel() error {
	path := filepath.Join(d.cfg.Workspaces, workspace, "main.tf")
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	m := markedLine.FindSubmatch(src)
	if m == nil {
		return fmt.Errorf("%s has no `track = \"stable\"` line to edit", path)
	}
	out := markedLine.ReplaceAll(src, []byte(`${1}"canary"`))
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return err
	}
	d.say("   %s:  - %s\"stable\"", filepath.Base(path), strings.TrimSpace(string(m[1])))
	d.say("   %s:  + %s\"canary\"", filepath.Base(path), strings.TrimSpace(string(m[1])))
	return nil
}

func (d *driver) deploymentUID(ctx context.Context) (string, error) {
	dep, err := d.admin.AppsV1().Deployments("demo-app").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read Deployment demo-app/web: %w", err)
	}
	return string(dep.UID), nil
}

// approve runs `agent-sandbox approve` on a terminal: this process's own when a person is there, otherwise a
// pseudo-terminal that this driver types into. Either way the product's only approval path is used.
func (d *driver) approve(ctx context.Context, id string) error {
	transcript, err := Approve(ctx, d.cfg, id)
	if transcript != "" {
		d.r.ApproveTranscript = transcript
		for _, line := range strings.Split(strings.TrimRight(transcript, "\n"), "\n") {
			d.say("   │ %s", line)
		}
		d.say("   (typed through a pseudo-terminal: this run has no person at the keyboard)")
	}
	return err
}

// Approve runs `agent-sandbox approve ID` for cfg: on this process's terminal when cfg has no passphrase
// file, else on a pseudo-terminal that it types the request ID and the passphrase into; it returns what
// the approver saw there. extra are more flags of approve (--ttl).
func Approve(ctx context.Context, cfg Config, id string, extra ...string) (string, error) {
	// The approver reads the saved plan with their own kubeconfig and describes it with terraform here.
	args := append([]string{"approve", id, "--db", cfg.DB, "--key", cfg.ApproverKey, "--audience", cfg.Audience,
		"--kubeconfig", cfg.AdminKubeconfig, "--policy", cfg.Policy}, extra...)
	if cfg.PassphraseFile == "" {
		cmd := exec.CommandContext(ctx, cfg.Binary, args...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		return "", cmd.Run()
	}
	pass, err := os.ReadFile(cfg.PassphraseFile)
	if err != nil {
		return "", err
	}
	// Every page of a long screen is turned as a reader does: Enter at each "-- more: ... --".
	term, err := harness.StartTerminalCommand(exec.CommandContext(ctx, cfg.Binary, args...), harness.TurnPages())
	if err != nil {
		return "", err
	}
	defer term.Close()
	// finish waits for approve to end and returns what it showed, and an error: approve's own if it exited
	// with another code than 0 (an *exec.ExitError), else failed.
	finish := func(failed error) (string, error) {
		_, werr := term.Wait(ctx)
		out := strings.ReplaceAll(term.Output(), "\r", "")
		if werr != nil {
			return out, fmt.Errorf("approve failed: %w", werr)
		}
		return out, failed
	}
	if err := term.Expect(ctx, `or "yes": `); err != nil {
		// approve refused before asking (a plan it would not sign, exit 4): what it showed is the answer.
		return finish(fmt.Errorf("approve ended before asking to confirm: %w", err))
	}
	if err := term.Type(id + "\n"); err != nil {
		return "", err
	}
	if err := term.Expect(ctx, "Passphrase for approver key", ": "); err != nil {
		return "", fmt.Errorf("%w\n%s", err, term.Output())
	}
	if err := term.TypeSecret(ctx, strings.TrimSpace(string(pass))+"\n"); err != nil {
		return "", err
	}
	return finish(nil)
}

// replayAtCluster plays an attacker who bypasses the MCP server with the token of a consumed approval,
// taken from the approvals database: the Job goes straight to the API server and must be refused.
func (d *driver) replayAtCluster(ctx context.Context, requestID string) error {
	db, err := sql.Open("sqlite", "file:"+d.cfg.DB+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	var params string
	if err := db.QueryRowContext(ctx, "SELECT params FROM requests WHERE id = ?", requestID).Scan(&params); err != nil {
		return fmt.Errorf("read the used request: %w", err)
	}
	tokens, err := store.GrantTokens(ctx, db, requestID)
	if err != nil {
		return fmt.Errorf("read the used tokens: %w", err)
	}
	p, err := policy.LoadFile(d.cfg.Policy)
	if err != nil {
		return err
	}
	tool, err := p.Tool("terraform_apply")
	if err != nil {
		return err
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(params), &raw); err != nil {
		return err
	}
	inv, err := tool.Invoke(raw)
	if err != nil {
		return err
	}
	// A well-formed request ID of its own: the replay must be refused for the used token, nothing else.
	id, err := approval.NewRequestID()
	if err != nil {
		return err
	}
	// A well-formed audit head too, for the same reason.
	job, err := sandbox.RenderJob(p, sandbox.JobSpec{Invocation: inv, RequestID: id, ApprovalTokens: tokens, AuditHead: strings.Repeat("0d", 32)})
	if err != nil {
		return err
	}
	created, err := d.admin.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{})
	if err == nil {
		bg := metav1.DeletePropagationBackground
		_ = d.admin.BatchV1().Jobs(job.Namespace).Delete(ctx, created.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
		return nil
	}
	return err
}

// vaultLeftovers lists objects the Vault secrets engine minted in demo-app during this scenario that still
// exist, waiting a little for revocations that are still in flight. Objects minted before the scenario
// began are not its own: they are named, not counted (a mint that failed half-way is cleaned up by Vault's
// write-ahead log only after ten minutes, and never if a dev-mode Vault restarted meanwhile).
func (d *driver) vaultLeftovers(ctx context.Context) []string {
	var left, older []string
	for i := 0; i < 30; i++ {
		left, older = left[:0], older[:0]
		sort := func(kind string, m metav1.ObjectMeta) {
			if !strings.HasPrefix(m.Name, "v-as-") {
				return
			}
			if m.CreationTimestamp.Time.Before(d.start) {
				older = append(older, kind+"/"+m.Name)
			} else {
				left = append(left, kind+"/"+m.Name)
			}
		}
		sas, err := d.admin.CoreV1().ServiceAccounts("demo-app").List(ctx, metav1.ListOptions{})
		if err != nil {
			return []string{err.Error()}
		}
		for _, sa := range sas.Items {
			sort("serviceaccount", sa.ObjectMeta)
		}
		roles, err := d.admin.RbacV1().Roles("demo-app").List(ctx, metav1.ListOptions{})
		if err != nil {
			return []string{err.Error()}
		}
		for _, r := range roles.Items {
			sort("role", r.ObjectMeta)
		}
		if len(left) == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	if len(older) > 0 {
		d.say("   (minted before this scenario and still present, not counted: %s)", strings.Join(older, ", "))
	}
	if len(left) == 0 {
		return nil
	}
	return left
}

func clientFor(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
