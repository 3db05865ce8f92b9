package auditor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/spf13/cobra"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/screen"
)

// NewAuditCommand builds `agent-sandbox audit show|verify`.
func NewAuditCommand(streams cli.IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show and verify the hash-chained audit log",
		Long: `The MCP server appends one JSON line per event to the audit log, each line hash-chained to the one
before it. "audit show" prints the events; "audit verify" checks the chain and names the first line that
was edited, deleted or torn, and with --against-cluster also finds a log cut short or rewritten, by
holding it against the anchors the admission webhook recorded in the cluster.

The log is --file, else $` + audit.EnvPath + `, else $XDG_STATE_HOME/agent-sandbox/audit.jsonl, else
~/.local/state/agent-sandbox/audit.jsonl.`,
		Args: cli.Usage(cobra.NoArgs),
	}
	cmd.AddCommand(newAuditShowCommand(streams), newAuditVerifyCommand(streams))
	return cmd
}

// auditShowOptions are the flags of `audit show`.
type auditShowOptions struct {
	File      string
	RequestID string
	JSON      bool

	streams cli.IO
}

func newAuditShowCommand(streams cli.IO) *cobra.Command {
	o := &auditShowOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print audit events as a table or as the raw JSON lines",
		Args:  cli.Usage(cobra.NoArgs),
		RunE:  cli.RunE(o),
	}
	cmd.Flags().StringVar(&o.File, "file", "", "audit log to read (default: $"+audit.EnvPath+" or the XDG state directory)")
	cmd.Flags().StringVar(&o.RequestID, "request-id", "", "show only the events of this request")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the stored JSON lines (the same JSON; characters that could drive a terminal, such as C1 controls and bidirectional overrides, as \\u escapes)")
	return cmd
}

// Complete fills in the default log path.
func (o *auditShowOptions) Complete() error {
	if o.File == "" {
		o.File = audit.DefaultPath()
	}
	return nil
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

func printRecords(streams cli.IO, recs []audit.Record) error {
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

// listAnchors reads the anchors with the operator's kubeconfig.
func (o *auditVerifyOptions) listAnchors(ctx context.Context) ([]audit.Anchor, error) {
	cfg, err := cli.RESTConfig(o.Kubeconfig, "")
	if err != nil {
		return nil, fmt.Errorf("your kubeconfig (--kubeconfig or $KUBECONFIG): %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	anchors, err := ledger.ListAnchors(ctx, c, o.Namespace)
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
	return cli.NotFoundError{Err: fmt.Errorf("audit log %s: %w (pass --file or set $%s)", path, fs.ErrNotExist, audit.EnvPath)}
}

// ExitCode is the exit code of the audit commands' own errors: a log whose chain does not verify is
// "tampered" (4). cli.Main asks it after its own errors.
func ExitCode(err error) (int, bool) {
	if errors.As(err, new(*audit.VerifyError)) {
		return cli.ExitTampered, true
	}
	return 0, false
}
