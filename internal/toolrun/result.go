package toolrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// PodStatusResult is what `run pod-status` prints.
type PodStatusResult struct {
	Namespace string `json:"namespace"`
	// Selector is the label selector the pods were listed with, "" for all pods.
	Selector string `json:"selector"`
	// Pods are sorted by name; empty (never null) when nothing matched; at most MaxPods.
	Pods []PodStatus `json:"pods"`
	// Total is how many pods matched; Truncated is true when more matched than MaxPods.
	Total     int  `json:"total"`
	Truncated bool `json:"truncated"`
}

// PodStatus is one pod, with the columns `kubectl get pods -o wide` shows.
type PodStatus struct {
	Name string `json:"name"`
	// Phase is status.phase: Pending, Running, Succeeded, Failed or Unknown.
	Phase string `json:"phase"`
	// Reason explains a phase that hides trouble, like kubectl's STATUS column: a container's waiting or
	// terminated reason (ImagePullBackOff, CrashLoopBackOff, OOMKilled), Terminating, or the pod's reason.
	Reason string `json:"reason,omitempty"`
	// Ready is "ready containers/containers", e.g. "1/2".
	Ready string `json:"ready"`
	// Restarts is the sum of the containers' restart counts.
	Restarts int32 `json:"restarts"`
	// Age is the time since creationTimestamp in kubectl's form, e.g. "3m12s" or "5d".
	Age        string `json:"age"`
	AgeSeconds int64  `json:"age_seconds"`
	// Node is spec.nodeName, "" while unscheduled.
	Node string `json:"node"`
}

// PlanSummary counts the resource changes of a plan the way Terraform's "Plan: X to add, Y to change, Z to
// destroy" line does: a replacement counts once in Add and once in Destroy, and is also counted in Replace.
type PlanSummary struct {
	Add     int `json:"add"`
	Change  int `json:"change"`
	Destroy int `json:"destroy"`
	Replace int `json:"replace"`
}

// ResourceChange is one resource the plan does something to (no-op resources are left out).
type ResourceChange struct {
	// Address is the resource's full address, e.g. kubernetes_deployment.web.
	Address string `json:"address"`
	Type    string `json:"type"`
	Name    string `json:"name"`
	// Actions are Terraform's: ["create"], ["update"], ["delete"], ["read"], ["delete","create"] or
	// ["create","delete"] (a replacement, destroy-before-create or create-before-destroy).
	Actions []string `json:"actions"`
	// Replace is true when the actions delete and re-create the resource.
	Replace bool `json:"replace"`
	// ReplacePaths are the attribute paths that force the replacement, from `terraform show -json`'s
	// replace_paths (each a list of attribute names and list indexes).
	ReplacePaths [][]any `json:"replace_paths,omitempty"`
	// ActionReason is Terraform's action_reason, e.g. replace_because_cannot_update, when it gives one.
	ActionReason string `json:"action_reason,omitempty"`
}

// Timings are the wall-clock seconds of each Terraform step, for progress reports and tuning deadlines.
type Timings struct {
	Init  float64 `json:"init_seconds,omitempty"`
	Plan  float64 `json:"plan_seconds,omitempty"`
	Show  float64 `json:"show_seconds,omitempty"`
	Apply float64 `json:"apply_seconds,omitempty"`
}

// PlanResult is what `run terraform-plan` prints.
type PlanResult struct {
	Workspace string `json:"workspace"`
	// PlanID is the lowercase hex SHA-256 of the saved binary plan file; terraform_apply takes it.
	PlanID  string           `json:"plan_id"`
	Summary PlanSummary      `json:"summary"`
	Changes []ResourceChange `json:"changes"`
	// Text is `terraform show -no-color` of the saved plan: what a human reviews, and what the MCP server
	// scans for destructive signals ("forces replacement", "must be replaced", "will be destroyed").
	Text string `json:"text"`
	// NoChanges is true when the plan changes neither resources nor outputs.
	NoChanges bool `json:"no_changes"`
	// Plan is the saved plan file (base64 in JSON). The MCP server stores it, immutable and named by its
	// SHA-256, for the apply Job to mount; the approver reads it back from there.
	Plan    []byte  `json:"plan,omitempty"`
	Timings Timings `json:"timings"`
	// ApprovalsRequired is how many distinct people must approve the apply of this plan (the policy's
	// two-person rules, judged in the plan sandbox); ApprovalRules are the rules that asked for more than one.
	ApprovalsRequired int                  `json:"approvals_required"`
	ApprovalRules     []policy.PlanRuleHit `json:"approval_rules,omitempty"`
}

// ApplyResult is what `run terraform-apply` prints.
type ApplyResult struct {
	Workspace string `json:"workspace"`
	PlanID    string `json:"plan_id"`
	Applied   bool   `json:"applied"`
	// Text is Terraform's apply output.
	Text string `json:"text"`
	// Summary is the applied plan's, counted like PlanResult's.
	Summary PlanSummary `json:"summary"`
	Timings Timings     `json:"timings"`
}

// errorLine is the last stdout line of a failed run.
type errorLine struct {
	Error string `json:"error"`
}

// ErrNoResult means the output holds no JSON line: the tool died before it could report.
var ErrNoResult = errors.New("no result line in the tool's output")

// ToolError is a failure the tool reported in its {"error": ...} line.
type ToolError struct {
	Message string
}

func (e *ToolError) Error() string { return e.Message }

// WriteResult prints v as one line of JSON. It is the last thing a successful run writes to stdout.
func WriteResult(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Plan text is full of '<' and '>' ("<computed>", "-> null"); keep it readable in pod logs.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// WriteError prints err as the one-line {"error": "..."} result, flattened and scrubbed of secrets.
func WriteError(w io.Writer, err error) error {
	return WriteResult(w, errorLine{Error: ErrorLine(err)})
}

// ErrorLine flattens an error to one line (errors.Join and Terraform put one item per line) and scrubs
// anything that looks like a credential out of it.
func ErrorLine(err error) string {
	if err == nil {
		return ""
	}
	parts := strings.FieldsFunc(err.Error(), func(r rune) bool { return r == '\n' || r == '\r' })
	var b strings.Builder
	for _, p := range parts {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if b.Len() > 0 {
			// "workspace refused:" followed by its problems reads as one sentence.
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(p)
	}
	return scrub.String(b.String())
}

// DecodeResult finds the last line of a run command's output that is a JSON object and decodes it into
// T. If that line is an error line, the error is returned as a *ToolError. The output may be a Pod's log,
// in which stderr lines are interleaved: lines that are not JSON objects are skipped. A caller reading a
// Pod's log should also require the tool container to have exited 0 before it trusts a result: the runner
// exits 0 only after printing its own result as its last act.
func DecodeResult[T any](stdout []byte) (T, error) {
	var zero T
	lines := bytes.Split(stdout, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		line := bytes.TrimSpace(lines[i])
		if len(line) == 0 || line[0] != '{' || !json.Valid(line) {
			continue
		}
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(line, &probe); err != nil {
			continue
		}
		if raw, ok := probe["error"]; ok {
			var msg string
			if err := json.Unmarshal(raw, &msg); err != nil || msg == "" {
				msg = "the tool failed without a reason"
			}
			return zero, &ToolError{Message: msg}
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			return zero, fmt.Errorf("decode result: %w", err)
		}
		return v, nil
	}
	return zero, ErrNoResult
}
