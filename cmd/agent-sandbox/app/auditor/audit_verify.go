package auditor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
)

// auditVerifyOptions are the flags of `audit verify`.
type auditVerifyOptions struct {
	Files          []string
	AgainstCluster bool
	Kubeconfig     string
	Namespace      string
	Since          time.Duration
	User           string
	cli.OutputFlag

	streams cli.IO
	now     func() time.Time
	// anchors reads the anchors; nil reads them with the kubeconfig (tests set it).
	anchors func(ctx context.Context) ([]audit.Anchor, error)
}

// defaultAnchorNamespace is the webhook's namespace in the chart's default installation.
const defaultAnchorNamespace = "agent-sandbox-system"

func newAuditVerifyCommand(streams cli.IO) *cobra.Command {
	o := &auditVerifyOptions{streams: streams, now: time.Now}
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the audit log's hash chain (and, with --against-cluster, its anchors); exit 4 naming what was changed",
		Long: `Check the audit log's hash chain: every line complete, unedited, in its place. The first line that was
edited, deleted, reordered or torn is named and the command exits 4; so is a line dated more than 5 minutes
after this machine's clock or before a line ahead of it (times rewritten, or a host's clock that is off),
and a line that names a member twice (JSON readers would not agree on what it says).

The chain alone cannot show lines cut off the end of the log, or a log rewritten with valid hashes by
whoever controls the MCP server's host, which the threat model does not trust. With --against-cluster
the log is also held against the anchors the admission webhook recorded in the cluster, one per call it
admitted: the call's request ID and the head of the audit chain the MCP server sent with its Job. For
every anchor the log must have a line whose hash is that head, the call's tool.request at or before it,
those lines naming the tool the webhook admitted and dated consistently with its admission (within 5 minutes),
and the call's sandbox.started and tool.result after it (or a tool.result that names the anchored Job as
one whose create failed: the API server refused it after the webhook had anchored it, or never answered,
as when a webhook replica is killed while it admits the Job). Each anchor the log fails is one FAIL line,
and the command exits 4. A warm claim that was admitted and anchored but never stored (the webhook's
warm pool saw its Pod stay unclaimed, or go to another call, and marked the anchor void) is one VOID
line: its warm Job never served the call, which the log must still have, closed, around the head; the
Job the call did run on has an anchor of its own. A call whose deadline has not passed yet is reported as in progress; an anchor
older than the log's beginning (its first line, or the first call anchored in it), of a call the log
does not mention, as before this log when the log verifies (a rotated log:
verify that one with --file; or, if there was no rotation, the log's beginning was deleted).

--file may be repeated: each log's chain is checked on its own, and with --against-cluster the anchors
are held against all of them together — the current log and the rotated ones, or the logs of several
MCP servers that share one cluster identity. Each anchor is judged by the log that has its call.

Run --against-cluster with your own kubeconfig, never the MCP server's: reading the anchors needs "list"
on ConfigMaps in the webhook's namespace (the chart's audit-reader Role grants it), and the MCP server's
identity has none there, so that it cannot learn which of its lines are anchored.

--output json prints one JSON document on stdout instead (the verdict, each log's chain, and with
--against-cluster every anchor in scope with its status), for monitoring; the exit code is the same.`,
		Example: `  agent-sandbox audit verify
  agent-sandbox audit verify --against-cluster --kubeconfig ~/.kube/config --since 24h
  agent-sandbox audit verify --file audit.jsonl.1 --file audit.jsonl --against-cluster --output json`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.Files, "file", nil, "audit log to verify; repeatable (default: $"+audit.EnvPath+" or the XDG state directory)")
	f.BoolVar(&o.AgainstCluster, "against-cluster", false, "also hold the log against the anchors the admission webhook recorded in the cluster")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "your kubeconfig, to read the anchors (not the MCP server's) [$KUBECONFIG, else ~/.kube/config]")
	f.StringVar(&o.Namespace, "namespace", defaultAnchorNamespace, "the webhook's namespace, where the anchors are")
	f.DurationVar(&o.Since, "since", 0, "only anchors of calls admitted within this long before now (default: all the cluster keeps)")
	f.StringVar(&o.User, "user", "", "only anchors of calls made by this API user: the MCP server whose log this is, when several share the cluster")
	o.OutputFlag.Bind(cmd)
	return cmd
}

// Complete fills in the default log path.
func (o *auditVerifyOptions) Complete() {
	if len(o.Files) == 0 {
		o.Files = []string{audit.DefaultPath()}
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.Output == "" {
		o.Output = "text"
	}
}

// Validate checks the options.
func (o *auditVerifyOptions) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for _, f := range o.Files {
		switch {
		case f == "":
			errs = append(errs, errors.New("--file must not be empty"))
		case seen[f]:
			errs = append(errs, fmt.Errorf("--file %s is given twice", f))
		}
		seen[f] = true
	}
	if o.Since < 0 {
		errs = append(errs, errors.New("--since must not be negative"))
	}
	if o.AgainstCluster && o.Namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	if !o.AgainstCluster && (o.Kubeconfig != "" || o.Since != 0 || o.User != "") {
		errs = append(errs, errors.New("--kubeconfig, --since and --user go with --against-cluster"))
	}
	if err := o.OutputFlag.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run verifies the chain of each log. A broken chain is reported on stderr as "FAIL: line N: reason"
// (prefixed with the file when there are several) and exits 4 (tampered); a missing file exits 3, an
// unreadable one 1. With --against-cluster it also holds the logs against the cluster's anchors
// (runAgainstCluster).
func (o *auditVerifyOptions) Run(ctx context.Context) error {
	for _, f := range o.Files {
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
			return missingLogError(f)
		}
	}
	if o.AgainstCluster {
		return o.runAgainstCluster(ctx)
	}
	files, _, err := audit.VerifyFilesAnchors(o.Files, nil, o.now())
	if err != nil {
		return err
	}
	failed := false
	for _, f := range files {
		failed = failed || f.Broken != nil
	}
	if o.OutputFlag.JSON() {
		return o.writeReport(verifyReport(files, nil, nil), failed)
	}
	w := o.streams.Out
	if failed {
		w = o.streams.ErrOut
	}
	for _, f := range files {
		prefix := ""
		if len(files) > 1 {
			prefix = f.Path + ": "
		}
		if f.Broken != nil {
			fmt.Fprintf(w, "FAIL: %s%s\n", prefix, f.Broken)
		} else if !failed {
			fmt.Fprintf(w, "OK: %s%d lines, chain intact (last hash %s)\n", prefix, f.Summary.Lines, f.Summary.LastHash)
		}
	}
	if failed {
		return cli.ExitError{Code: cli.ExitTampered}
	}
	return nil
}

// runAgainstCluster reads the anchors with the operator's kubeconfig, then verifies each chain and holds
// the logs against them in one pass. It prints one line per anchor that is not matched (FAIL, IN
// PROGRESS, BEFORE LOG, and VOID for a warm claim the pool found was never stored, which is not a failure)
// and a summary line: on stdout when nothing failed, else everything on stderr and exit 4.
func (o *auditVerifyOptions) runAgainstCluster(ctx context.Context) error {
	if o.anchors == nil {
		o.anchors = o.listAnchors
	}
	all, err := o.anchors(ctx)
	if err != nil {
		return err
	}
	now := o.now()
	anchors := filterAnchors(all, now, o.Since, o.User)
	files, rep, err := audit.VerifyFilesAnchors(o.Files, anchors, now)
	if err != nil {
		return err
	}
	failed := rep.Failed > 0
	for _, f := range files {
		failed = failed || f.Broken != nil
	}
	if o.OutputFlag.JSON() {
		return o.writeReport(verifyReport(files, &rep, o.scope()), failed)
	}
	w := o.streams.Out
	if failed {
		w = o.streams.ErrOut
	}
	for _, f := range files {
		if f.Broken != nil {
			fmt.Fprintf(w, "FAIL: %s%s\n", o.filePrefix(f.Path), f.Broken)
		}
	}
	for _, r := range rep.Results {
		if r.Status == audit.AnchorOK {
			continue
		}
		a := r.Anchor
		label := map[audit.AnchorStatus]string{audit.AnchorFailed: "FAIL", audit.AnchorInProgress: "IN PROGRESS", audit.AnchorBeforeLog: "BEFORE LOG",
			audit.AnchorVoid: "VOID"}[r.Status]
		fmt.Fprintf(w, "%s: %scall %s (%s, Job %s, admitted %s): %s\n", label, o.filePrefix(r.File), oneLine(a.RequestID), oneLine(a.Tool), oneLine(a.Job),
			a.Admitted.UTC().Format(time.RFC3339), oneLine(r.Reason))
	}
	fmt.Fprintln(w, o.summaryLine(files, rep, len(anchors), failed))
	if failed {
		return cli.ExitError{Code: cli.ExitTampered}
	}
	return nil
}

// filePrefix names the log in a line when there are several.
func (o *auditVerifyOptions) filePrefix(path string) string {
	if len(o.Files) > 1 {
		return path + ": "
	}
	return ""
}

// scope says which anchors were held against the logs.
func (o *auditVerifyOptions) scope() *verifyScope {
	return &verifyScope{Namespace: o.Namespace, Since: durationString(o.Since), User: o.User}
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// summaryLine is the last line of runAgainstCluster's text output.
func (o *auditVerifyOptions) summaryLine(files []audit.FileResult, rep audit.AnchorReport, anchors int, failed bool) string {
	lines, broken := 0, 0
	for _, f := range files {
		lines += f.Summary.Lines
		if f.Broken != nil {
			broken++
		}
	}
	var chain string
	switch {
	case len(files) == 1 && files[0].Broken != nil:
		chain = fmt.Sprintf("chain broken at line %d, anchors held against the %d lines before it", files[0].Broken.Line, lines)
	case len(files) == 1:
		chain = fmt.Sprintf("%d lines, chain intact (last hash %s)", lines, files[0].Summary.LastHash)
	case broken > 0:
		chain = fmt.Sprintf("%d logs, %d with a broken chain (anchors held against the %d lines before each break)", len(files), broken, lines)
	default:
		chain = fmt.Sprintf("%d logs, %d lines, every chain intact", len(files), lines)
	}
	scope := "in " + o.Namespace
	if o.Since > 0 {
		scope += fmt.Sprintf(", admitted in the last %s", o.Since)
	}
	if o.User != "" {
		scope += ", made by " + o.User
	}
	verdict := map[bool]string{false: "OK", true: "FAIL"}[failed]
	if anchors == 0 {
		return fmt.Sprintf("%s: %s; no anchors %s (is that the webhook's namespace, in the cluster the MCP server uses?)", verdict, chain, scope)
	}
	void := ""
	if rep.Void > 0 {
		void = fmt.Sprintf(", %d claimed but never stored (void)", rep.Void)
	}
	return fmt.Sprintf("%s: %s; %d anchors %s: %d match, %d do not, %d in progress, %d before this log%s",
		verdict, chain, anchors, scope, rep.OK, rep.Failed, rep.InProgress, rep.BeforeLog, void)
}

// verifyJSON is what --output json prints.
type verifyJSON struct {
	Verdict string           `json:"verdict"`
	Files   []verifyJSONFile `json:"files"`
	Scope   *verifyScope     `json:"scope,omitempty"`
	Counts  *verifyCounts    `json:"anchors,omitempty"`
	Results []verifyJSONCall `json:"results,omitempty"`
}

type verifyJSONFile struct {
	File     string            `json:"file"`
	Lines    int               `json:"lines"`
	LastHash string            `json:"last_hash,omitempty"`
	Broken   *verifyJSONBroken `json:"broken,omitempty"`
}

type verifyJSONBroken struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

type verifyScope struct {
	Namespace string `json:"namespace"`
	Since     string `json:"since,omitempty"`
	User      string `json:"user,omitempty"`
}

type verifyCounts struct {
	Total      int `json:"total"`
	OK         int `json:"ok"`
	Failed     int `json:"failed"`
	InProgress int `json:"in_progress"`
	BeforeLog  int `json:"before_log"`
	Void       int `json:"void"`
}

type verifyJSONCall struct {
	RequestID string    `json:"request_id"`
	Tool      string    `json:"tool"`
	Job       string    `json:"job"`
	User      string    `json:"user,omitempty"`
	Head      string    `json:"head"`
	Admitted  time.Time `json:"admitted"`
	Status    string    `json:"status"`
	File      string    `json:"file,omitempty"`
	HeadLine  int       `json:"head_line,omitempty"`
	Reason    string    `json:"reason"`
	// Pod is the claimed Pod of a warm claim; Void the pool's mark that the claim was never stored.
	Pod  string          `json:"pod,omitempty"`
	Void *verifyJSONVoid `json:"void,omitempty"`
}

// verifyJSONVoid is an anchor's void mark (audit.Void), as --output json prints it.
type verifyJSONVoid struct {
	Name      string    `json:"name"`
	Evidence  string    `json:"evidence"`
	ClaimedBy string    `json:"claimed_by,omitempty"`
	Voided    time.Time `json:"voided"`
}

// verifyReport is the JSON form of a verification: rep and scope are nil without --against-cluster.
func verifyReport(files []audit.FileResult, rep *audit.AnchorReport, scope *verifyScope) verifyJSON {
	out := verifyJSON{Verdict: "OK", Scope: scope}
	for _, f := range files {
		jf := verifyJSONFile{File: f.Path, Lines: f.Summary.Lines}
		if f.Broken != nil {
			jf.Broken, out.Verdict = &verifyJSONBroken{Line: f.Broken.Line, Reason: f.Broken.Reason}, "FAIL"
		} else {
			jf.LastHash = f.Summary.LastHash
		}
		out.Files = append(out.Files, jf)
	}
	if rep == nil {
		return out
	}
	out.Counts = &verifyCounts{Total: len(rep.Results), OK: rep.OK, Failed: rep.Failed, InProgress: rep.InProgress, BeforeLog: rep.BeforeLog, Void: rep.Void}
	if rep.Failed > 0 {
		out.Verdict = "FAIL"
	}
	out.Results = []verifyJSONCall{}
	for _, r := range rep.Results {
		a := r.Anchor
		call := verifyJSONCall{RequestID: a.RequestID, Tool: a.Tool, Job: a.Job, User: a.User, Head: a.Head,
			Admitted: a.Admitted.UTC(), Status: string(r.Status), File: r.File, HeadLine: r.HeadLine, Reason: r.Reason, Pod: a.Pod}
		if v := a.Void; v != nil {
			call.Void = &verifyJSONVoid{Name: v.Name, Evidence: string(v.Evidence), ClaimedBy: v.ClaimedBy, Voided: v.Voided.UTC()}
		}
		out.Results = append(out.Results, call)
	}
	return out
}

// writeReport prints v on stdout and exits 4 when the verification failed.
func (o *auditVerifyOptions) writeReport(v verifyJSON, failed bool) error {
	if err := cli.WriteJSON(o.streams.Out, v); err != nil {
		return err
	}
	if failed {
		return cli.ExitError{Code: cli.ExitTampered}
	}
	return nil
}
