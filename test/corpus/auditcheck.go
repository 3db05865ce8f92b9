package corpus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// AuditReport is what `agent-sandbox audit verify --against-cluster --output json` prints, as far as the
// suites read it.
type AuditReport struct {
	Verdict string `json:"verdict"`
	Files   []struct {
		File   string `json:"file"`
		Lines  int    `json:"lines"`
		Broken *struct {
			Line   int    `json:"line"`
			Reason string `json:"reason"`
		} `json:"broken"`
	} `json:"files"`
	Results []struct {
		RequestID string    `json:"request_id"`
		Tool      string    `json:"tool"`
		Job       string    `json:"job"`
		Head      string    `json:"head"`
		Admitted  time.Time `json:"admitted"`
		Status    string    `json:"status"`
		File      string    `json:"file"`
		Reason    string    `json:"reason"`
	} `json:"results"`
}

// AuditAgainstCluster runs the product's own `agent-sandbox audit verify --against-cluster` with the
// operator's kubeconfig on every audit log a suite's MCP servers wrote, for the calls admitted since start,
// and judges its report. Every anchor of a call made through an MCP server must be matched by one of the
// logs, complete (or, for a warm claim admitted but never stored, voided by the pool, with the call closed in
// its log); the anchors of the Jobs and claims the corpus submitted itself as the MCP server (their
// head is AuditHead) belong to no log and must be reported as failed — that is what the check exists to
// find. It returns one line of figures, and an error listing each anchor that was judged otherwise and each
// log whose chain is broken.
func AuditAgainstCluster(ctx context.Context, binary, kubeconfig string, start time.Time, logs []string) (string, error) {
	if len(logs) == 0 {
		return "", errors.New("no audit log to verify: the suite made no call through an MCP server")
	}
	since := time.Since(start) + 2*time.Second // the calls of this run only: not those of a run just before it
	args := []string{"audit", "verify", "--against-cluster", "--kubeconfig", kubeconfig, "--since", since.Round(time.Second).String(), "--output", "json"}
	for _, l := range logs {
		args = append(args, "--file", l)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var ee *exec.ExitError
	if runErr != nil && !(errors.As(runErr, &ee) && ee.ExitCode() == 4) {
		return "", fmt.Errorf("agent-sandbox audit verify: %v: %s", runErr, strings.TrimSpace(stderr.String()))
	}
	var rep AuditReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return "", fmt.Errorf("agent-sandbox audit verify --output json: %v: %q", err, stdout.String())
	}
	summary, problems := judgeAuditReport(rep)
	if len(problems) > 0 {
		return summary, fmt.Errorf("audit verify --against-cluster: %s", strings.Join(problems, "; "))
	}
	return summary, nil
}

// judgeAuditReport judges a report as AuditAgainstCluster says: one line of figures, and what is wrong.
func judgeAuditReport(rep AuditReport) (string, []string) {
	var problems []string
	lines := 0
	for _, f := range rep.Files {
		lines += f.Lines
		if f.Broken != nil {
			problems = append(problems, fmt.Sprintf("%s: chain broken at line %d: %s", f.File, f.Broken.Line, f.Broken.Reason))
		}
	}
	logged, direct, void := 0, 0, 0
	for _, r := range rep.Results {
		switch {
		case r.Head == AuditHead && r.Status == "failed":
			direct++
		case r.Head == AuditHead:
			problems = append(problems, fmt.Sprintf("call %s (%s, Job %s), submitted by the corpus itself, is %s: %s", r.RequestID, r.Tool, r.Job, r.Status, r.Reason))
		case r.Status == "ok":
			logged++
		case r.Status == "void":
			// A warm claim admitted and anchored but never stored, which the pool voided: the call ran on
			// another Job (anchored and judged on its own) or failed; the log has it, closed.
			void++
		default:
			where := "in " + r.File
			if r.File == "" {
				where = "in none of the logs"
			}
			problems = append(problems, fmt.Sprintf("call %s (%s, Job %s, admitted %s) is %s %s: %s", r.RequestID, r.Tool, r.Job,
				r.Admitted.Format(time.RFC3339), r.Status, where, r.Reason))
		}
	}
	summary := fmt.Sprintf("%d logs (%d lines): %d calls made through an MCP server, each anchored and complete; %d Jobs or claims the corpus submitted itself, each reported as in no log",
		len(rep.Files), lines, logged, direct)
	if void > 0 {
		summary += fmt.Sprintf("; %d warm claims admitted but never stored, voided by the pool", void)
	}
	if logged == 0 {
		problems = append(problems, "no anchored call was made through an MCP server in this window")
	}
	return summary, problems
}
