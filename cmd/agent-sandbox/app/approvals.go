package app

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
)

// which is not trusted, and must not be able to repaint what the approver sees.
func safeLine(s string) string { return escapeUnprintable(s, false) }

// safeText is safeLine for multi-line text: newlines and tabs are kept.
func safeText(s string) string { return escapeUnprintable(s, true) }

func escapeUnprintable(s string, multiline bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case multiline && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			if r <= 0xffff {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		}
		i += size
	}
	return b.String()
}

// formatValue prints one parameter value: strings quoted with escapes, everything else as is.
func formatValue(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return safeLine(fmt.Sprint(v))
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}

// expiryOf is the expiry that matters for a request: its token's once granted, its own before.
func expiryOf(r *approval.Request) time.Time {
	if !r.TokenExpiry.IsZero() {
		return r.TokenExpiry
	}
	return r.ExpiresAt
}

// shortParams is a one-line, bounded rendering of the parameters for tables.
func shortParams(r *approval.Request) string {
	canon, err := approval.CanonicalParams(r.Params)
	if err != nil {
		return "?"
	}
	s := safeLine(string(canon))
	const maxRunes = 48
	if utf8.RuneCountInString(s) > maxRunes {
		s = string([]rune(s)[:maxRunes-1]) + "…"
	}
	return s
}

// printRequest writes everything about r that a person needs to decide on it. It never has the token to print.
func printRequest(w io.Writer, r *approval.Request, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Request", r.ID)
	row("Tool", safeLine(r.Tool))
	row("Target namespace", safeLine(r.Namespace))
	row("Status", string(r.Status))
	row("Created", formatTime(r.CreatedAt))
	if r.Status == approval.StatusPending {
		row("Expires", fmt.Sprintf("%s (in %s)", formatTime(r.ExpiresAt), r.ExpiresAt.Sub(now).Round(time.Minute)))
	} else {
		row("Expires", formatTime(r.ExpiresAt))
	}
	row("Params hash", r.ParamsHash)
	if r.PlanDigest != "" {
		row("Plan digest", safeLine(r.PlanDigest))
	}
	if r.Approver != "" {
		row("Decided by", safeLine(r.Approver))
		row("Decided at", formatTime(r.DecidedAt))
	}
	if r.Reason != "" {
		row("Reason", safeLine(r.Reason))
	}
	if r.TokenID != "" {
		row("Token ID", r.TokenID)
		row("Token expires", formatTime(r.TokenExpiry))
	}
	if !r.ConsumedAt.IsZero() {
		row("Consumed at", formatTime(r.ConsumedAt))
	}
	tw.Flush()

	fmt.Fprintln(w, "Parameters:")
	if len(r.Params) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	keys := make([]string, 0, len(r.Params))
	for k := range r.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw = tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	for _, k := range keys {
		fmt.Fprintf(tw, "  %s\t= %s\n", safeLine(k), formatValue(r.Params[k]))
	}
	tw.Flush()

	if r.PlanSummary != "" {
		fmt.Fprintln(w, "Plan summary:")
		for _, line := range strings.Split(strings.TrimRight(safeText(r.PlanSummary), "\n"), "\n") {
			fmt.Fprintf(w, "  | %s\n", line)
		}
	}
	if len(r.Signals) == 0 {
		fmt.Fprintln(w, "Destructive signals: none reported")
		return
	}
	fmt.Fprintf(w, "DESTRUCTIVE SIGNALS (%d):\n", len(r.Signals))
	for _, s := range r.Signals {
		fmt.Fprintf(w, "  !! %s: %s\n", safeLine(s.Name), safeLine(s.Match))
	}
}

// storeFlags are the flags shared by the commands that open the approvals database.
type storeFlags struct {
	DBPath string
}

func (f *storeFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.DBPath, "db", "", "approvals database (default $"+approval.EnvDB+
		", else $XDG_STATE_HOME/agent-sandbox/approvals.db, else ~/.local/state/agent-sandbox/approvals.db)")
}

func (f *storeFlags) complete() error {
	if f.DBPath != "" {
		return nil
	}
	p, err := approval.DefaultDBPath()
	if err != nil {
		return err
	}
	f.DBPath = p
	return nil
}

type approvalsListOptions struct {
	storeFlags
	Status string
	status approval.Status
	now    func() time.Time
}

func (o *approvalsListOptions) Complete() error { return o.complete() }

func (o *approvalsListOptions) Validate() error {
	if o.Status == "" {
		return nil
	}
	st, err := approval.ParseStatus(o.Status)
	if err != nil {
		return fmt.Errorf("--status: %w", err)
	}
	o.status = st
	return nil
}

func (o *approvalsListOptions) Run(ctx context.Context, streams IO) error {
	store, err := approval.OpenStore(o.DBPath, approval.WithStoreClock(o.now))
	if err != nil {
		return err
	}
	defer store.Close()
	reqs, err := store.List(ctx, approval.ListFilter{Status: o.status})
	if err != nil {
		return err
	}
	if len(reqs) == 0 {
		if o.status != "" {
			_, err = fmt.Fprintf(streams.Out, "no %s approval requests\n", o.status)
		} else {
			_, err = fmt.Fprintln(streams.Out, "no approval requests")
		}
		return err
	}
	tw := tabwriter.NewWriter(streams.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOOL\tSTATUS\tCREATED\tEXPIRES\tNAMESPACE\tPARAMS")
	for _, r := range reqs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, safeLine(r.Tool), r.Status, formatTime(r.CreatedAt),
			formatTime(expiryOf(r)), safeLine(r.Namespace), shortParams(r))
	}
	return tw.Flush()
}

type approvalsShowOptions struct {
	storeFlags
	ID  string
	now func() time.Time
}

func (o *approvalsShowOptions) Complete(args []string) error {
	o.ID = args[0]
	return o.complete()
}

func (o *approvalsShowOptions) Validate() error { return nil }

func (o *approvalsShowOptions) Run(ctx context.Context, streams IO) error {
	store, err := approval.OpenStore(o.DBPath, approval.WithStoreClock(o.now))
	if err != nil {
		return err
	}
	defer store.Close()
	r, err := store.Get(ctx, o.ID)
	if err != nil {
		return err
	}
	printRequest(streams.Out, r, o.now())
	return nil
}

func newApprovalsCommand(streams IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List and inspect the requests waiting for a human approval",
		Long: `Destructive tool calls wait in the local approvals database until a person decides on them with
'agent-sandbox approve' or 'agent-sandbox deny'. These commands only read it.`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}

	list := &approvalsListOptions{now: time.Now}
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List approval requests, newest first",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := list.Complete(); err != nil {
				return err
			}
			if err := list.Validate(); err != nil {
				return err
			}
			return list.Run(cmd.Context(), streams)
		},
	}
	list.bind(listCmd)
	listCmd.Flags().StringVar(&list.Status, "status", "", "only requests in this state: pending, granted, denied, consumed or expired")

	show := &approvalsShowOptions{now: time.Now}
	showCmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one request in full: parameters, plan summary and destructive signals",
		Args:  usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := show.Complete(args); err != nil {
				return err
			}
			if err := show.Validate(); err != nil {
				return err
			}
			return show.Run(cmd.Context(), streams)
		},
	}
	show.bind(showCmd)

	cmd.AddCommand(listCmd, showCmd)
	return cmd
}
