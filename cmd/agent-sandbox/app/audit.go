package app

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
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
)

// newAuditCommand builds `agent-sandbox audit show|verify`.
func newAuditCommand(streams IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show and verify the hash-chained audit log",
		Long: `The MCP server appends one JSON line per event to the audit log, each line hash-chained to the one
before it. "audit show" prints the events; "audit verify" checks the chain and names the first line that
was edited, deleted or torn.

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
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the stored JSON lines unchanged")
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
			if _, err := fmt.Fprintf(o.streams.Out, "%s\n", r.Raw); err != nil {
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

// shortFields renders fields as sorted key=value pairs on one line, cut to maxFieldsWidth runes.
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
		parts = append(parts, k+"="+oneLine(v))
	}
	s := strings.Join(parts, " ")
	if utf8.RuneCountInString(s) > maxFieldsWidth {
		r := []rune(s)
		s = string(r[:maxFieldsWidth-1]) + "…"
	}
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps the table one row per event: control characters, tabs included, become spaces.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// auditVerifyOptions are the flags of `audit verify`.
type auditVerifyOptions struct {
	File string

	streams IO
}

func newAuditVerifyCommand(streams IO) *cobra.Command {
	o := &auditVerifyOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the audit log's hash chain; exit 4 naming the first bad line",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.File, "file", "", "audit log to verify (default: $"+audit.EnvPath+" or the XDG state directory)")
	return cmd
}

// Complete fills in the default log path.
func (o *auditVerifyOptions) Complete() {
	if o.File == "" {
		o.File = audit.DefaultPath()
	}
}

// Validate checks the options.
func (o *auditVerifyOptions) Validate() error {
	if o.File == "" {
		return errors.New("--file must not be empty")
	}
	return nil
}

// Run verifies the chain. A broken chain is reported on stderr as "FAIL: line N: reason" and exits 4
// (tampered) without further output; a missing file exits 3, an unreadable one 1.
func (o *auditVerifyOptions) Run(_ context.Context) error {
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

func missingLogError(path string) error {
	return notFoundError{fmt.Errorf("audit log %s: %w (pass --file or set $%s)", path, fs.ErrNotExist, audit.EnvPath)}
}
