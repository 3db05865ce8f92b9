package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/spf13/cobra"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/screen"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// newAuditCommand builds `agent-sandbox audit show|verify`.
func newAuditCommand(streams IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show and verify the hash-chained audit log",
		Long: `The MCP server appends one JSON line per event to the audit log, each line hash-chained to the one
before it. "audit show" prints the events; "audit verify" checks the chain and names the first line that
was edited, deleted or torn, and with --against-cluster also finds a log cut short or rewritten, by
holding it against the anchors the admission webhook recorded in the cluster.

The log is --file, else $` + audit.EnvPath + `, else $XDG_STATE_HOME/agent-sandbox/audit.jsonl, else
~/.local/state/agent-sandbox/audit.jsonl.`,
		Args: usage(cobra.NoArgs),
	}
	cmd.AddCommand(newAuditShowCommand(streams), newAuditVerifyCommand(streams))
	return cmd
}

// auditShowOptions are the flags of `audit show`.
type auditShowOptions struct {
	File      string
	RequestID string
	JSON      bool

	streams IO
}

func newAuditShowCommand(streams IO) *cobra.Command {
	o := &auditShowOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print audit events as a table or as the raw JSON lines",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.File, "file", "", "audit log to read (default: $"+audit.EnvPath+" or the XDG state directory)")
	cmd.Flags().StringVar(&o.RequestID, "request-id", "", "show only the events of this request")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the stored JSON lines (the same JSON; characters that could drive a terminal, such as C1 controls and bidirectional overrides, as \\u escapes)")
	return cmd
}

// Complete fills in the default log path.
func (o *auditShowOptions) Complete() {
	if o.File == "" {
		o.File = audit.DefaultPath()
	}
}

// Validate checks the options.
func (o *auditShowOptions) Validate() error {
	var errs []error
	if o.File == "" {
		errs = append(errs, errors.New("--file must not be empty"))
	}
	if strings.TrimSpace(o.RequestID) != o.RequestID {
		errs = append(errs, errors.New("--request-id must not have surrounding spaces"))
	}
	return errors.Join(errs...)
}

// Run prints the matching records. A log that cannot be read to its end (a torn tail, a corrupt line)
// still has the records before the bad line printed; the error follows.
func (o *auditShowOptions) Run(_ context.Context) error {
	recs, readErr := audit.ReadFile(o.File, audit.Filter{RequestID: o.RequestID})
	if errors.Is(readErr, fs.ErrNotExist) {
		return missingLogError(o.File)
	}
	var verr *audit.VerifyError
	if readErr != nil && !errors.As(readErr, &verr) {
		return readErr
	}
	if o.JSON {
		for _, r := range recs {
			if _, err := fmt.Fprintf(o.streams.Out, "%s\n", terminalSafeJSON(r.Raw)); err != nil {
				return err
			}
		}
	} else if err := printRecords(o.streams, recs); err != nil {
		return err
	}
	if readErr != nil {
		return fmt.Errorf("audit log %s: %w", o.File, readErr)
	}
	return nil
}

// maxFieldsWidth bounds the FIELDS column of the table.
const maxFieldsWidth = 80

func printRecords(streams IO, recs []audit.Record) error {
	tw := tabwriter.NewWriter(streams.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tREQUEST ID\tEVENT\tTOOL\tFIELDS")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n",
			r.Time.UTC().Format(time.RFC3339), dash(r.RequestID), dash(r.Event), dash(r.Tool), shortFields(r.Fields))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return oneLine(s)
}

// shortFields renders fields as sorted key=value pairs on one line, cut to maxFieldsWidth runes (before
// escaping), escaped as oneLine does.
func shortFields(fields map[string]any) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		var v string
		switch t := fields[k].(type) {
		case string:
			v = t
		default:
			b, err := json.Marshal(t)
			if err != nil {
				v = fmt.Sprint(t)
			} else {
				v = string(b)
			}
		}
		parts = append(parts, k+"="+v)
	}
	s := strings.Join(parts, " ")
	if utf8.RuneCountInString(s) > maxFieldsWidth {
		r := []rune(s)
		s = string(r[:maxFieldsWidth-1]) + "…"
	}
	if s == "" {
		return "-"
	}
	return oneLine(s)
}

// oneLine makes text from the audit log (which the MCP server, and so the agent, fills) safe for a
// terminal and keeps the table one row per event: the approval screen's escaper (package screen) shows
// control characters, C1 controls such as U+009B CSI, bidirectional overrides, line breaks, tabs and
// invalid UTF-8 as escapes (\u009b, \u202e, \xff) instead of letting the terminal act on them.
func oneLine(s string) string { return screen.Line(s) }

// terminalSafeJSON is a stored JSON line as --json prints it: the same JSON value, with every character
// the screen escaper would escape (C0 and C1 controls, bidirectional overrides and other invisible
// formatting characters, line separators) and every invalid UTF-8 byte written as a JSON \u escape, so
// that the line is plain to a terminal. JSON allows such characters only inside strings, where \u means
// the same character; an invalid byte becomes \ufffd, as any JSON decoder reads it. Other characters, and
// so almost every line, are unchanged.
func terminalSafeJSON(raw []byte) []byte {
	var out []byte
	for i := 0; i < len(raw); {
		r, size := utf8.DecodeRune(raw[i:])
		safe := (r >= 0x20 && r < utf8.RuneSelf && r != 0x7f) || (r >= utf8.RuneSelf && r != utf8.RuneError && unicode.IsPrint(r))
		if safe {
			if out != nil {
				out = append(out, raw[i:i+size]...)
			}
			i += size
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(raw)+16), raw[:i]...)
		}
		if r > 0xffff {
			hi, lo := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += size
	}
	if out == nil {
		return raw
	}
	return out
}

// auditVerifyOptions are the flags of `audit verify`.
type auditVerifyOptions struct {
	File           string
	AgainstCluster bool
	Kubeconfig     string
	Namespace      string
	Since          time.Duration
	User           string

	streams IO
	now     func() time.Time
	// anchors reads the anchors; nil reads them with the kubeconfig (tests set it).
	anchors func(ctx context.Context) ([]audit.Anchor, error)
}

// defaultAnchorNamespace is the webhook's namespace in the chart's default installation.
const defaultAnchorNamespace = "agent-sandbox-system"

func newAuditVerifyCommand(streams IO) *cobra.Command {
	o := &auditVerifyOptions{streams: streams, now: time.Now}
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the audit log's hash chain (and, with --against-cluster, its anchors); exit 4 naming what was changed",
		Long: `Check the audit log's hash chain: every line complete, unedited, in its place. The first line that was
edited, deleted, reordered or torn is named and the command exits 4.

The chain alone cannot show lines cut off the end of the log, or a log rewritten with valid hashes by
whoever controls the MCP server's host, which the threat model does not trust. With --against-cluster
the log is also held against the anchors the admission webhook recorded in the cluster, one per call it
admitted: the call's request ID and the head of the audit chain the MCP server sent with its Job. For
every anchor the log must have a line whose hash is that head, the call's tool.request at or before it,
and the call's sandbox.started and tool.result after it. Each anchor the log fails is one FAIL line,
and the command exits 4. A call whose deadline has not passed yet is reported as in progress; an anchor
older than the log's first line, of a call the log does not mention, as before this log (a rotated log:
verify that one with --file; or, if there was no rotation, the log's beginning was deleted).

Run --against-cluster with your own kubeconfig, never the MCP server's: reading the anchors needs "list"
on ConfigMaps in the webhook's namespace (the chart's audit-reader Role grants it), and the MCP server's
identity has none there, so that it cannot learn which of its lines are anchored.`,
		Example: `  agent-sandbox audit verify
  agent-sandbox audit verify --against-cluster --kubeconfig ~/.kube/config --since 24h`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.File, "file", "", "audit log to verify (default: $"+audit.EnvPath+" or the XDG state directory)")
	f.BoolVar(&o.AgainstCluster, "against-cluster", false, "also hold the log against the anchors the admission webhook recorded in the cluster")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "your kubeconfig, to read the anchors (not the MCP server's) [$KUBECONFIG, else ~/.kube/config]")
	f.StringVar(&o.Namespace, "namespace", defaultAnchorNamespace, "the webhook's namespace, where the anchors are")
	f.DurationVar(&o.Since, "since", 0, "only anchors of calls admitted within this long before now (default: all the cluster keeps)")
	f.StringVar(&o.User, "user", "", "only anchors of calls made by this API user: the MCP server whose log this is, when several share the cluster")
	return cmd
}

// Complete fills in the default log path.
func (o *auditVerifyOptions) Complete() {
	if o.File == "" {
		o.File = audit.DefaultPath()
	}
	if o.now == nil {
		o.now = time.Now
	}
}

// Validate checks the options.
func (o *auditVerifyOptions) Validate() error {
	var errs []error
	if o.File == "" {
		errs = append(errs, errors.New("--file must not be empty"))
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
	return errors.Join(errs...)
}

// Run verifies the chain. A broken chain is reported on stderr as "FAIL: line N: reason" and exits 4
// (tampered) without further output; a missing file exits 3, an unreadable one 1. With --against-cluster
// it also holds the log against the cluster's anchors (runAgainstCluster).
func (o *auditVerifyOptions) Run(ctx context.Context) error {
	if o.AgainstCluster {
		return o.runAgainstCluster(ctx)
	}
	sum, err := audit.VerifyFile(o.File)
	var verr *audit.VerifyError
	switch {
	case err == nil:
		_, err := fmt.Fprintf(o.streams.Out, "OK: %d lines, chain intact (last hash %s)\n", sum.Lines, sum.LastHash)
		return err
	case errors.As(err, &verr):
		fmt.Fprintf(o.streams.ErrOut, "FAIL: %s\n", verr)
		return exitError{code: exitTampered}
	case errors.Is(err, fs.ErrNotExist):
		return missingLogError(o.File)
	default:
		return err
	}
}

// runAgainstCluster reads the anchors with the operator's kubeconfig, then verifies the chain and holds
// the log against them in one pass. It prints one line per anchor that is not matched (FAIL, IN
// PROGRESS, BEFORE LOG) and a summary line: on stdout when nothing failed, else everything on stderr and
// exit 4.
func (o *auditVerifyOptions) runAgainstCluster(ctx context.Context) error {
	if _, err := os.Stat(o.File); errors.Is(err, fs.ErrNotExist) {
		return missingLogError(o.File)
	}
	if o.anchors == nil {
		o.anchors = o.listAnchors
	}
	all, err := o.anchors(ctx)
	if err != nil {
		return err
	}
	now := o.now()
	anchors := filterAnchors(all, now, o.Since, o.User)
	sum, rep, err := audit.VerifyFileAnchors(o.File, anchors, now)
	var verr *audit.VerifyError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return missingLogError(o.File)
	case err != nil && !errors.As(err, &verr):
		return err
	}
	failed := verr != nil || rep.Failed > 0
	w := o.streams.Out
	if failed {
		w = o.streams.ErrOut
	}
	if verr != nil {
		fmt.Fprintf(w, "FAIL: %s\n", verr)
	}
	for _, r := range rep.Results {
		if r.Status == audit.AnchorOK {
			continue
		}
		a := r.Anchor
		label := map[audit.AnchorStatus]string{audit.AnchorFailed: "FAIL", audit.AnchorInProgress: "IN PROGRESS", audit.AnchorBeforeLog: "BEFORE LOG"}[r.Status]
		fmt.Fprintf(w, "%s: call %s (%s, Job %s, admitted %s): %s\n", label, oneLine(a.RequestID), oneLine(a.Tool), oneLine(a.Job),
			a.Admitted.UTC().Format(time.RFC3339), oneLine(r.Reason))
	}
	chain := fmt.Sprintf("%d lines, chain intact (last hash %s)", sum.Lines, sum.LastHash)
	if verr != nil {
		chain = fmt.Sprintf("chain broken at line %d, anchors held against the %d lines before it", verr.Line, sum.Lines)
	}
	scope := "in " + o.Namespace
	if o.Since > 0 {
		scope += fmt.Sprintf(", admitted in the last %s", o.Since)
	}
	if o.User != "" {
		scope += ", made by " + o.User
	}
	verdict := "OK"
	if failed {
		verdict = "FAIL"
	}
	if len(anchors) == 0 {
		fmt.Fprintf(w, "%s: %s; no anchors %s (is that the webhook's namespace, in the cluster the MCP server uses?)\n", verdict, chain, scope)
	} else {
		fmt.Fprintf(w, "%s: %s; %d anchors %s: %d match, %d do not, %d in progress, %d before this log\n",
			verdict, chain, len(anchors), scope, rep.OK, rep.Failed, rep.InProgress, rep.BeforeLog)
	}
	if failed {
		return exitError{code: exitTampered}
	}
	return nil
}

// listAnchors reads the anchors with the operator's kubeconfig.
func (o *auditVerifyOptions) listAnchors(ctx context.Context) ([]audit.Anchor, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("your kubeconfig (--kubeconfig or $KUBECONFIG): %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	anchors, err := webhook.ListAnchors(ctx, c, o.Namespace)
	if err != nil {
		return nil, fmt.Errorf("%w (read them with your own kubeconfig: list ConfigMaps in %s, the chart's audit-reader Role)", err, o.Namespace)
	}
	return anchors, nil
}

// filterAnchors keeps the anchors admitted within since before now (all when since is 0) and made by
// user (all when empty).
func filterAnchors(all []audit.Anchor, now time.Time, since time.Duration, user string) []audit.Anchor {
	var out []audit.Anchor
	for _, a := range all {
		if since > 0 && a.Admitted.Before(now.Add(-since)) {
			continue
		}
		if user != "" && a.User != user {
			continue
		}
		out = append(out, a)
	}
	return out
}

func missingLogError(path string) error {
	return notFoundError{fmt.Errorf("audit log %s: %w (pass --file or set $%s)", path, fs.ErrNotExist, audit.EnvPath)}
}
