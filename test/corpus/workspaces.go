package corpus

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
)

// Where a malicious input was stopped. Every stage is before any credential: the API server and the
// webhook refuse the object itself, the check init container runs before the credential agent.
const (
	StagePublish   = "publish"   // the workspace or plan ConfigMap was refused (too big, or not its content's name)
	StageAdmission = "admission" // the Job was refused
	StageCheck     = "check"     // the sandbox's check container refused it; the credential agent never started
)

// InputOutcome is what became of one malicious workspace or saved plan submitted straight to the cluster
// with the MCP server's identity, bypassing the server's own check.
type InputOutcome struct {
	Name string
	// Refused is true when it was stopped before the credential agent started, for the expected reason.
	Refused bool
	Stage   string
	Detail  string
}

// MaliciousWorkspaces submits each malicious workspace of the tfcheck corpus as the MCP server's identity:
// its files as a content-addressed workspace ConfigMap and a terraform_plan Job that mounts it, parallel
// at a time. A workspace counts as refused when the API server refuses its ConfigMap, the webhook its Job,
// or the Job's Pod fails in the check container — with the reason the corpus names — while the credential
// agent and the tool never started.
func (e *Env) MaliciousWorkspaces(ctx context.Context, cases []tfcheck.Case, parallel int) []InputOutcome {
	var todo []tfcheck.Case
	for _, c := range cases {
		if c.Malicious {
			todo = append(todo, c)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	return mapParallel(todo, parallel, func(c tfcheck.Case) InputOutcome { return e.maliciousWorkspace(ctx, c) })
}

func (e *Env) maliciousWorkspace(ctx context.Context, c tfcheck.Case) InputOutcome {
	o := InputOutcome{Name: c.Name}
	files := make(map[string]string, len(c.Files))
	for n, d := range c.Files {
		files[n] = string(d)
	}
	name := sandbox.WorkspaceConfigMapName(files)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{sandbox.LabelWorkspace: "true"}},
		Data:       files,
		Immutable:  ptr.To(true),
	}
	if err := e.createConfigMap(ctx, cm); err != nil {
		o.Refused, o.Stage, o.Detail = true, StagePublish, firstLine(err.Error())
		return o
	}
	defer e.deleteConfigMap(name)
	return e.refusedByCheck(ctx, o, func() *batchv1.Job {
		return e.Job("terraform_plan", map[string]any{"workspace": "k8s-demo", "source": name}, "")
	}, c.Reason)
}

// LiveWorkspaceSample names the malicious workspaces `make verify` submits to the live cluster by default:
// each trick the Terraform issue names and its relatives (one sandbox Pod each, and a terraform Pod takes
// a CPU, so the whole corpus takes a quarter of an hour on a 2-core node; the integration tests run all of
// it against real Terraform every time).
var LiveWorkspaceSample = []string{
	// programs: nested terraform behind terraform.applying, exec plugins, provisioners, external data
	"provider-dynamic-exec-applying", "provider-exec", "provider-exec-comment", "backend-kubernetes-exec",
	"null-resource-local-exec", "dynamic-provisioner", "terraform-data-provisioner", "remote-exec",
	"file-provisioner", "external-escape", "data-http", "heredoc-directive-applying", "applying-count",
	// JSON syntax and escapes
	"json-provider-exec", "json-provider-dynamic-exec", "json-provider-exec-escaped-key",
	"json-escaped-provisioner", "external-escape-json", "unicode-homoglyph",
	// code and providers from elsewhere
	"module-git", "module-http", "module-registry", "provider-from-network", "provider-other", "cloud-block",
	// reading what it must not: files, the credential, Secrets; writing Secrets and identities
	"output-file-kubeconfig", "filebase64", "templatefile", "data-kubernetes-secret",
	"resource-kubernetes-secret", "resource-csr", "resource-service-account",
	// size and depth
	"huge-file", "deep-nesting", "deep-nesting-json", "huge-heredoc", "json-many-line-string",
}

// ForgedPlanApply attacks the apply path: a saved plan whose embedded configuration was swapped for one
// that runs a program only at apply time (the original attack: a provider exec block gated on
// terraform.applying), stored as its content-addressed ConfigMap and submitted with a valid approval
// token for exactly that plan — what a compromised MCP server that fooled an approver would hold. The
// check container must refuse it before the apply credential is issued.
func (e *Env) ForgedPlanApply(ctx context.Context, savedPlan []byte) InputOutcome {
	o := InputOutcome{Name: "forged saved plan: exec provider gated on terraform.applying, approved"}
	forged, err := swapPlanConfig(savedPlan, map[string]string{"tfconfig/m-/main.tf": forgedConfig})
	if err != nil {
		o.Detail = err.Error()
		return o
	}
	id, err := e.publishPlan(ctx, forged)
	if err != nil {
		o.Detail = "the plan ConfigMap was refused, so the attack was not tried: " + firstLine(err.Error())
		return o
	}
	defer e.deleteConfigMap(contract.PlanConfigMapPrefix + id)
	params := map[string]any{"workspace": "k8s-demo", "plan_id": id}
	return e.refusedByCheck(ctx, o, func() *batchv1.Job {
		return e.Job("terraform_apply", params, e.Token(e.Approver, "terraform_apply", params, nil))
	}, forgedReason)
}

// publishPlan stores a saved plan as the MCP server does, with its identity: the immutable ConfigMap
// tfplan-<SHA-256>, the name the apply Job's plan_id mounts. It returns the plan ID.
func (e *Env) publishPlan(ctx context.Context, plan []byte) (string, error) {
	sum := sha256.Sum256(plan)
	id := hex.EncodeToString(sum[:])
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: contract.PlanConfigMapPrefix + id},
		BinaryData: map[string][]byte{sandbox.PlanKey: plan},
		Immutable:  ptr.To(true),
	}
	if err := e.createConfigMap(ctx, cm); err != nil {
		return "", err
	}
	return id, nil
}

// createConfigMap creates cm in the sandbox namespace as the MCP server, as the MCP server does: again after
// a ResourceQuota update conflict (sandbox.RetryOnQuotaConflict), which says nothing of the object. One that
// exists already is no error (the names are content addresses).
func (e *Env) createConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	err := sandbox.RetryOnQuotaConflict(ctx, func() error {
		_, err := e.MCP.CoreV1().ConfigMaps(e.Namespace()).Create(ctx, cm, metav1.CreateOptions{})
		return err
	})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// forgedConfig is the apply-time attack: harmless in the plan, a nested terraform at apply.
const forgedConfig = `provider "kubernetes" {
  dynamic "exec" {
    for_each = terraform.applying ? [1] : []
    content {
      api_version = "client.authentication.k8s.io/v1"
      command     = "/usr/local/bin/terraform"
      args        = ["apply", "-auto-approve"]
    }
  }
}
output "x" { value = "hello" }
`

// forgedReason is part of the check's refusal of forgedConfig.
const forgedReason = "dynamic block in provider"

// refusedByCheck creates the Job job renders as the MCP server and waits for its Pod's check container to
// refuse it with reason in its message (any reason when reason is ""); a refusal of the Job itself by
// admission counts too.
func (e *Env) refusedByCheck(ctx context.Context, o InputOutcome, job func() *batchv1.Job, reason string) InputOutcome {
	return e.awaitRefusal(ctx, o, job, fmt.Sprintf("%q", reason), func(string) bool { return true },
		func(msg string) bool { return reason == "" || strings.Contains(msg, reason) })
}

// awaitRefusal creates the Job job renders as the MCP server and waits for a verdict: refused when admission
// refuses the Job with a message admission accepts, or when the Pod's check container fails with a message
// check accepts, while neither the credential agent nor the tool ever started. want describes the expected
// reason, for the detail of a refusal for another. A create the API server refuses on a ResourceQuota update
// conflict, after admission, is made again with a Job job renders anew: its approvals were consumed.
func (e *Env) awaitRefusal(ctx context.Context, o InputOutcome, job func() *batchv1.Job, want string, admission, check func(msg string) bool) InputOutcome {
	var created *batchv1.Job
	err := sandbox.RetryOnQuotaConflict(ctx, func() (err error) {
		created, err = e.createJobAs(ctx, e.MCP, job(), false)
		return err
	})
	if err != nil {
		switch {
		case (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && admission(err.Error()):
			o.Refused, o.Stage, o.Detail = true, StageAdmission, firstLine(err.Error())
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
			o.Stage, o.Detail = StageAdmission, fmt.Sprintf("refused at admission, but not for %s: %s", want, firstLine(err.Error()))
		default:
			o.Detail = "create the Job: " + err.Error()
		}
		return o
	}
	// The Job goes as soon as there is a verdict: a sandbox Pod holds a CPU of a small node.
	defer func() {
		bg := metav1.DeletePropagationBackground
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_ = e.Admin.BatchV1().Jobs(e.Namespace()).Delete(dctx, created.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	}()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		pods, err := e.Admin.CoreV1().Pods(e.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + created.Name})
		if err == nil {
			for i := range pods.Items {
				if done, ok, detail := checkRefused(&pods.Items[i], want, check); done {
					o.Refused, o.Stage, o.Detail = ok, StageCheck, detail
					return o
				}
			}
		}
		select {
		case <-ctx.Done():
			o.Detail = fmt.Sprintf("the Job's Pod did not end in its check container: %v", ctx.Err())
			return o
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// checkRefused reads a sandbox Pod: done once its check container has ended or anything after it has
// started; ok when the check refused (non-zero exit, a message that match accepts) and neither the
// credential agent nor the tool ever started.
func checkRefused(pod *corev1.Pod, want string, match func(msg string) bool) (done, ok bool, detail string) {
	started := func(s corev1.ContainerStatus) bool {
		return s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil ||
			s.RestartCount > 0 || (s.Started != nil && *s.Started)
	}
	var check *corev1.ContainerStateTerminated
	for _, s := range pod.Status.InitContainerStatuses {
		switch s.Name {
		case contract.CheckContainer:
			check = s.State.Terminated
		case contract.CredentialAgentContainer:
			if started(s) {
				return true, false, "the credential agent started"
			}
		}
	}
	for _, s := range pod.Status.ContainerStatuses {
		if started(s) {
			return true, false, "the tool started"
		}
	}
	switch {
	case check == nil:
		return false, false, ""
	case check.ExitCode == 0:
		// Wait for the next container: the check admitted the input, and the verdict comes from whether
		// the credential agent starts (it must not).
		return false, false, ""
	case !match(check.Message):
		return true, false, fmt.Sprintf("refused, but not for %s: %s", want, firstLine(check.Message))
	}
	return true, true, firstLine(check.Message)
}

// swapPlanConfig rewrites a saved plan (a zip) with some files replaced, keeping every other entry.
func swapPlanConfig(plan []byte, replace map[string]string) ([]byte, error) {
	zr, err := zip.NewReader(bytes.NewReader(plan), int64(len(plan)))
	if err != nil {
		return nil, fmt.Errorf("read the saved plan: %w", err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	seen := 0
	for _, f := range zr.File {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f.Name, Method: zip.Deflate, Modified: f.Modified})
		if err != nil {
			return nil, err
		}
		if data, ok := replace[f.Name]; ok {
			seen++
			_, err = io.WriteString(w, data)
		} else {
			var r io.ReadCloser
			if r, err = f.Open(); err == nil {
				_, err = io.Copy(w, r)
				r.Close()
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if seen != len(replace) {
		return nil, fmt.Errorf("the saved plan lacks some of %d files to replace", len(replace))
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (e *Env) deleteConfigMap(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.Admin.CoreV1().ConfigMaps(e.Namespace()).Delete(ctx, name, metav1.DeleteOptions{})
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
