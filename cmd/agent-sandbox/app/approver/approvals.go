package approver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	approvalstore "github.com/agent-sandbox/agent-sandbox/internal/approval/store"
	"github.com/agent-sandbox/agent-sandbox/internal/screen"
)

// safeLine makes untrusted text safe to print on one terminal line: control characters (escape sequences
// included), invisible formatting characters such as bidirectional overrides, line breaks and invalid UTF-8
// are shown as escapes instead of being interpreted by the terminal. Requests are written by the MCP server,
// which is not trusted, and must not be able to repaint what the approver sees. The one escaper is package
// screen's.
func safeLine(s string) string { return screen.Line(s) }

// safeText is safeLine for multi-line text: newlines and tabs are kept.
func safeText(s string) string { return screen.Text(s) }

// formatValue prints one parameter value: strings quoted, escaped to ASCII and followed by a marker naming
// any non-ASCII character (a look-alike), everything else as is, escaped the same way.
func formatValue(v any) string {
	if s, ok := v.(string); ok {
		return screen.Quote(s) + screen.Marker(s)
	}
	return screen.ASCII(fmt.Sprint(v))
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
	row("Request", safeLine(r.ID))
	// What the approval binds is shown escaped to ASCII, look-alike characters named: "dеmo" with a
	// Cyrillic е is not the namespace demo.
	row("Tool", screen.ASCII(r.Tool))
	row("Target namespace", screen.ASCII(r.Namespace))
	row("Status", safeLine(string(r.Status)))
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
	row("Approvals", r.Progress())
	for i, g := range r.Grants {
		// The key IDs are the approvers' own (Grant takes them from the signed claims), but the store
		// is the MCP server's file: escaped like everything else.
		row(fmt.Sprintf("  approver %d", i+1), fmt.Sprintf("%s at %s (token %s, expires %s)",
			safeLine(g.Approver), formatTime(g.DecidedAt), safeLine(g.TokenID), formatTime(g.TokenExpiry)))
	}
	if r.Approver != "" {
		decided := "Decided"
		if r.Status != approval.StatusDenied && r.ApprovalsRequired > 1 {
			decided = "Completed" // by the approver whose grant completed the set
		}
		row(decided+" by", safeLine(r.Approver))
		row(decided+" at", formatTime(r.DecidedAt))
	}
	if r.Reason != "" {
		row("Reason", safeLine(r.Reason))
	}
	switch {
	case r.TokenID != "" && len(r.Grants) > 1:
		row("Grant expires", formatTime(r.TokenExpiry)+" (with the first of its tokens)")
	case r.TokenID != "":
		row("Token ID", safeLine(r.TokenID))
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
		fmt.Fprintf(tw, "  %s\t= %s\n", screen.ASCII(k), formatValue(r.Params[k]))
	}
	tw.Flush()

	if r.PlanSummary != "" {
		fmt.Fprintln(w, "Plan summary:")
		for _, line := range strings.Split(strings.TrimRight(safeText(r.PlanSummary), "\n"), "\n") {
			fmt.Fprintf(w, "  | %s\n", line)
		}
	}
	switch {
	case r.PlanDigest != "":
		// The MCP server's signal texts are not shown: text an agent writes into a plan (a ConfigMap's
		// data) matches a signal as well as a real deletion does, a compromised server can file any text,
		// and thousands of such lines would push the verified part below off the screen. The approver
		// looks for the signals in the saved plan itself; claimsMatch holds the server to the same names.
		fmt.Fprintln(w, "Destructive signals: looked for below, in the saved plan itself")
	case len(r.Signals) == 0:
		fmt.Fprintln(w, "Destructive signals: none reported")
	default:
		matches := make([]signalLine, len(r.Signals))
		for i, s := range r.Signals {
			matches[i] = signalLine{name: s.Name, text: s.Match}
		}
		fmt.Fprintf(w, "DESTRUCTIVE SIGNALS (%d) as the MCP server reported them:\n", len(r.Signals))
		printSignalLines(w, "  !! ", matches)
	}
}

// signalLine is one line of a tool's output that matched a destructive signal.
type signalLine struct{ name, text string }

const (
	// maxSignalLinesShown is how many matched lines of one signal a screen shows; the count says how many
	// more there are, and -o json lists them all.
	maxSignalLinesShown = 3
	// maxSignalLineRunes bounds one matched line as shown: a line padded to wrap the terminal would otherwise
	// start a forged screen line at column 0.
	maxSignalLineRunes = 160
	// maxSignalNamesShown is how many distinct signals a screen lists: names are text too, and a compromised
	// MCP server can file thousands of different ones.
	maxSignalNamesShown = 10
)

// cutLine is s escaped for one line and cut to maxSignalLineRunes, saying how much was cut.
func cutLine(s string) string {
	s = safeLine(s)
	if n := utf8.RuneCountInString(s); n > maxSignalLineRunes {
		return fmt.Sprintf("%s... (%d more characters)", string([]rune(s)[:maxSignalLineRunes]), n-maxSignalLineRunes)
	}
	return s
}

// printSignalLines writes the matched lines, at most maxSignalLinesShown of each signal and each cut to
// maxSignalLineRunes, so that however many lines a plan or an output holds, what follows stays on screen.
func printSignalLines(w io.Writer, indent string, lines []signalLine) {
	shown, more := map[string]int{}, map[string]int{}
	var order []string
	others, otherNames := 0, map[string]bool{}
	for _, l := range lines {
		if shown[l.name]+more[l.name] == 0 {
			if len(order) == maxSignalNamesShown {
				others++
				otherNames[l.name] = true
				continue
			}
			order = append(order, l.name)
		}
		if shown[l.name] == maxSignalLinesShown {
			more[l.name]++
			continue
		}
		shown[l.name]++
		fmt.Fprintf(w, "%s%s: %s\n", indent, cutLine(l.name), cutLine(l.text))
	}
	if others > 0 {
		fmt.Fprintf(w, "%sand %d more lines of %d other signals (-o json lists them all)\n", indent, others, len(otherNames))
	}
	for _, n := range order {
		if more[n] > 0 {
			fmt.Fprintf(w, "%s%s: and %d more lines (-o json lists them all)\n", indent, cutLine(n), more[n])
		}
	}
}

// storeFlags are the flags shared by the commands that open the approvals database.
type storeFlags struct {
	DBPath string
}

func (f *storeFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.DBPath, "db", "", "approvals database (default $"+approvalstore.EnvDB+
		", else $XDG_STATE_HOME/agent-sandbox/approvals.db, else ~/.local/state/agent-sandbox/approvals.db)")
}

func (f *storeFlags) complete() error {
	if f.DBPath != "" {
		return nil
	}
	p, err := approvalstore.DefaultDBPath()
	if err != nil {
		return err
	}
	f.DBPath = p
	return nil
}

// openExisting opens the approvals database without creating it: only the MCP server files requests, so
// a missing database means a wrong --db or $AGENT_SANDBOX_DB (or no request yet), never an empty list.
func (f *storeFlags) openExisting(now func() time.Time) (*approvalstore.Store, error) {
	store, err := approvalstore.Open(f.DBPath, approvalstore.WithClock(now), approvalstore.WithoutCreate())
	if errors.Is(err, approval.ErrNoDatabase) {
		return nil, fmt.Errorf("%w (the MCP server creates it with the first request; check --db or $%s)", err, approvalstore.EnvDB)
	}
	return store, err
}

// completeRequestIDs completes the ID argument of approvals show, approve and deny from the database of
// --db (or the default), offering only requests in one of the given states (all when none). It never
// creates the database, and offers nothing when it cannot read it.
func completeRequestIDs(states ...approval.Status) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		f := storeFlags{}
		f.DBPath, _ = cmd.Flags().GetString("db")
		if f.complete() != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		store, err := f.openExisting(time.Now)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer store.Close()
		reqs, err := store.List(cmd.Context(), approval.ListFilter{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, r := range reqs {
			if !strings.HasPrefix(r.ID, toComplete) || (len(states) > 0 && !slices.Contains(states, r.Status)) {
				continue
			}
			// The tool and namespace were written by the MCP server, which is not trusted: escaped.
			out = append(out, cobra.CompletionWithDesc(r.ID, fmt.Sprintf("%s %s in %s", r.Status, safeLine(r.Tool), safeLine(r.Namespace))))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// grantJSON is one approver's approval in requestJSON.
type grantJSON struct {
	Approver    string `json:"approver"`
	DecidedAt   string `json:"decided_at"`
	TokenID     string `json:"token_id"`
	TokenExpiry string `json:"token_expires_at"`
}

// requestJSON is the JSON form of a request printed by approvals list and show -o json: a contract for
// scripts, so it is declared here rather than taken from the store's type. Times are RFC 3339 in UTC;
// empty fields are left out. A request never holds its token, so none can be printed. Approvals counts the
// grants that count (Grants); approver, decided_at, token_id and token_expires_at are the decision's, as
// with one approver: who denied or completed the set, the first grant's token and the earliest expiry.
type requestJSON struct {
	ID          string            `json:"id"`
	Tool        string            `json:"tool"`
	Namespace   string            `json:"namespace"`
	Status      approval.Status   `json:"status"`
	Params      map[string]any    `json:"params"`
	ParamsHash  string            `json:"params_hash"`
	PlanDigest  string            `json:"plan_digest,omitempty"`
	PlanSummary string            `json:"plan_summary,omitempty"`
	Signals     []approval.Signal `json:"signals,omitempty"`
	// ApprovalsRequired distinct approvers must approve; Approvals have.
	ApprovalsRequired int         `json:"approvals_required"`
	Approvals         int         `json:"approvals"`
	Grants            []grantJSON `json:"grants,omitempty"`
	CreatedAt         string      `json:"created_at"`
	ExpiresAt         string      `json:"expires_at"`
	Approver          string      `json:"approver,omitempty"`
	DecidedAt         string      `json:"decided_at,omitempty"`
	Reason            string      `json:"reason,omitempty"`
	TokenID           string      `json:"token_id,omitempty"`
	TokenExpiry       string      `json:"token_expires_at,omitempty"`
	ConsumedAt        string      `json:"consumed_at,omitempty"`
}

func toJSON(r *approval.Request) requestJSON {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	params := r.Params
	if params == nil {
		params = map[string]any{}
	}
	var grants []grantJSON
	for _, g := range r.Grants {
		grants = append(grants, grantJSON{Approver: g.Approver, DecidedAt: ts(g.DecidedAt), TokenID: g.TokenID, TokenExpiry: ts(g.TokenExpiry)})
	}
	return requestJSON{
		ID: r.ID, Tool: r.Tool, Namespace: r.Namespace, Status: r.Status, Params: params, ParamsHash: r.ParamsHash,
		PlanDigest: r.PlanDigest, PlanSummary: r.PlanSummary, Signals: r.Signals,
		ApprovalsRequired: r.ApprovalsRequired, Approvals: r.Approvals(), Grants: grants,
		CreatedAt: ts(r.CreatedAt), ExpiresAt: ts(r.ExpiresAt), Approver: r.Approver, DecidedAt: ts(r.DecidedAt),
		Reason: r.Reason, TokenID: r.TokenID, TokenExpiry: ts(r.TokenExpiry), ConsumedAt: ts(r.ConsumedAt),
	}
}

type approvalsListOptions struct {
	storeFlags
	cli.OutputFlag
	Status string
	status approval.Status
	now    func() time.Time
}

func (o *approvalsListOptions) Complete() error { return o.complete() }

func (o *approvalsListOptions) Validate() error {
	if err := o.OutputFlag.Validate(); err != nil {
		return err
	}
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

func (o *approvalsListOptions) Run(ctx context.Context, streams cli.IO) error {
	store, err := o.openExisting(o.now)
	if err != nil {
		return err
	}
	defer store.Close()
	reqs, err := store.List(ctx, approval.ListFilter{Status: o.status})
	if err != nil {
		return err
	}
	if o.OutputFlag.JSON() {
		// Always an array, empty included, so that scripts need no special case.
		out := make([]requestJSON, 0, len(reqs))
		for _, r := range reqs {
			out = append(out, toJSON(r))
		}
		return cli.WriteJSON(streams.Out, out)
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
	fmt.Fprintln(tw, "ID\tTOOL\tSTATUS\tAPPROVALS\tAPPROVERS\tCREATED\tEXPIRES\tNAMESPACE\tPARAMS")
	for _, r := range reqs {
		approvers := "-"
		if r.Approvals() > 0 {
			approvers = safeLine(strings.Join(r.Approvers(), ","))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", safeLine(r.ID), safeLine(r.Tool), safeLine(string(r.Status)), r.Progress(), approvers,
			formatTime(r.CreatedAt), formatTime(expiryOf(r)), safeLine(r.Namespace), shortParams(r))
	}
	return tw.Flush()
}

type approvalsShowOptions struct {
	storeFlags
	cli.OutputFlag
	ID string
	// plan reaches and describes the saved plan of a Terraform request, as approve does.
	plan planFlags
	now  func() time.Time
}

func (o *approvalsShowOptions) Complete(args []string) error {
	o.ID = args[0]
	return o.complete()
}

func (o *approvalsShowOptions) Validate() error { return o.OutputFlag.Validate() }

// requestShowJSON is approvals show -o json: the request, and for one bound to a saved plan what was
// computed from that plan (verified_plan).
type requestShowJSON struct {
	requestJSON
	VerifiedPlan *verifiedPlanJSON `json:"verified_plan,omitempty"`
}

// Run prints the request and, when it is bound to a saved plan, the plan as approve shows it, computed here
// from the plan itself. A plan that cannot be verified is said loudly and is a failure (exit 1); a request
// that describes its plan falsely is exit 4, as in approve.
func (o *approvalsShowOptions) Run(ctx context.Context, streams cli.IO) error {
	store, err := o.openExisting(o.now)
	if err != nil {
		return err
	}
	defer store.Close()
	r, err := store.Get(ctx, o.ID)
	if err != nil {
		return err
	}
	var (
		vp       *verifiedPlan
		verr     error
		mismatch string
	)
	if r.PlanDigest != "" {
		if verr = o.plan.complete(); verr == nil {
			vp, verr = o.plan.plans().verify(ctx, r.PlanDigest, io.Discard)
		}
		if vp != nil {
			if ok, diff := claimsMatch(r, vp); !ok {
				mismatch = diff
			}
		}
	}
	out := streams.Out
	if o.OutputFlag.JSON() {
		doc := requestShowJSON{requestJSON: toJSON(r)}
		if r.PlanDigest != "" {
			doc.VerifiedPlan = verifiedJSON(vp, verr, mismatch)
		}
		if err := cli.WriteJSON(out, doc); err != nil {
			return err
		}
	} else {
		printRequest(out, r, o.now())
		if r.PlanDigest != "" {
			fmt.Fprintln(out)
			if verr != nil {
				fmt.Fprintln(out, "!! THE SAVED PLAN COULD NOT BE VERIFIED, SO WHAT IT DOES IS UNKNOWN:")
				fmt.Fprintln(out, "!!   "+safeLine(verr.Error()))
				fmt.Fprintln(out, "!! The plan summary above is the MCP server's, which is not trusted.")
			} else {
				printVerified(out, vp)
				if mismatch != "" {
					fmt.Fprintln(out)
					fmt.Fprintln(out, "!! THE REQUEST'S DESCRIPTION OF THIS PLAN IS FALSE: "+mismatch+".")
					fmt.Fprintln(out, "!! The MCP server that filed it described a different plan than the one it is bound to.")
				}
			}
		}
	}
	switch {
	case verr != nil:
		return fmt.Errorf("the saved plan of %s could not be verified: %w", r.ID, verr)
	case mismatch != "":
		return cli.ExitError{Code: cli.ExitTampered}
	}
	return nil
}

func NewApprovalsCommand(streams cli.IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List and inspect the requests waiting for a human approval",
		Long: `Destructive tool calls wait in the local approvals database until a person decides on them with
'agent-sandbox approve' or 'agent-sandbox deny'. These commands only read it.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}

	list := &approvalsListOptions{now: time.Now}
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List approval requests, newest first",
		Args:  cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := list.Complete(); err != nil {
				return err
			}
			if err := list.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			return list.Run(cmd.Context(), streams)
		},
	}
	list.storeFlags.bind(listCmd)
	list.OutputFlag.Bind(listCmd)
	listCmd.Flags().StringVar(&list.Status, "status", "", "only requests in this state: pending, granted, denied, consumed or expired")
	_ = listCmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions([]cobra.Completion{"pending", "granted", "denied", "consumed", "expired"}, cobra.ShellCompDirectiveNoFileComp))

	show := &approvalsShowOptions{now: time.Now}
	showCmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one request in full: parameters, plan summary, destructive signals, and its saved plan verified",
		Long: `Show prints one request in full: tool, target namespace, parameters, the plan summary and destructive
signals the MCP server filed with it, and its state.

For a request bound to a saved Terraform plan it also reads that plan itself, with the same flags and in
the same way as 'agent-sandbox approve' (your kubeconfig, SHA-256 checked against the plan ID, described
by terraform on this machine), and prints the same screen: the risk flags first ("!! RISK ...", each with
the resource, the attribute and before -> after), the destructive signals of your --policy, then every
resource the plan changes with every attribute that differs, before -> after. See 'agent-sandbox approve
--help' for what is flagged. Everything is printed; nothing is cut or paged.

When the saved plan cannot be read or verified, show says so in capitals below the request and exits 1;
when the request describes its plan falsely, it says so and exits 4. With -o json the request's fields
come with verified_plan: {verified, error, description_mismatch, signals, summary, flags, resources}.`,
		Args:              cli.Usage(cobra.ExactArgs(1)),
		ValidArgsFunction: completeRequestIDs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := show.Complete(args); err != nil {
				return err
			}
			if err := show.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			return show.Run(cmd.Context(), streams)
		},
	}
	show.storeFlags.bind(showCmd)
	show.OutputFlag.Bind(showCmd)
	show.plan.bind(showCmd)

	cmd.AddCommand(listCmd, showCmd)
	return cmd
}

// ExitCode is the exit code of the approver commands' own errors: no such request, and no approvals
// database, are "not found" (3); a request the database contradicts itself about is "tampered" (4). cli.Main asks it after its own errors.
func ExitCode(err error) (int, bool) {
	if errors.Is(err, approval.ErrNotFound) || errors.Is(err, approval.ErrNoDatabase) {
		return cli.ExitNotFound, true
	}
	if errors.Is(err, approval.ErrTampered) {
		return cli.ExitTampered, true
	}
	return 0, false
}
