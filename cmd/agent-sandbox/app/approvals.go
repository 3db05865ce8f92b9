package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// noTerminalMessage is what approve says, on one line, when its standard input is not a terminal.
const noTerminalMessage = "approve needs an interactive terminal: approvals are made by a person, not by a program"

// maxConfirmationLength bounds the confirmation line read from the terminal.
const maxConfirmationLength = 256

// terminalOf returns in as a file if it is an interactive terminal.
func terminalOf(in io.Reader) (*os.File, bool) {
	f, ok := in.(*os.File)
	if !ok || f == nil || !term.IsTerminal(int(f.Fd())) {
		return nil, false
	}
	return f, true
}

// readFromTerminal runs read (which blocks on the terminal) so that a cancelled context (Ctrl-C, which the
// root command turns into cancellation) returns at once and leaves the terminal as it was, echo included.
func readFromTerminal[T any](ctx context.Context, tty *os.File, read func() (T, error)) (T, error) {
	var zero T
	fd := int(tty.Fd())
	state, err := term.GetState(fd)
	if err != nil {
		return zero, fmt.Errorf("read terminal state: %w", err)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := read()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		_ = term.Restore(fd, state)
		return zero, ctx.Err()
	}
}

// readLine reads one line from the terminal a byte at a time, so that nothing typed after the newline (the
// passphrase, say) is swallowed by a buffer.
func readLine(ctx context.Context, tty *os.File) (string, error) {
	return readFromTerminal(ctx, tty, func() (string, error) {
		var line []byte
		one := make([]byte, 1)
		for {
			n, err := tty.Read(one)
			if n == 1 {
				if one[0] == '\n' {
					return strings.TrimRight(string(line), "\r"), nil
				}
				if len(line) < maxConfirmationLength {
					line = append(line, one[0])
				}
			}
			if errors.Is(err, io.EOF) {
				return "", errors.New("end of input")
			}
			if err != nil {
				return "", fmt.Errorf("read terminal: %w", err)
			}
		}
	})
}

// readPassphrase prompts on out and reads a passphrase from the terminal without echo.
func readPassphrase(ctx context.Context, tty *os.File, out io.Writer, prompt string) ([]byte, error) {
	fmt.Fprint(out, prompt)
	p, err := readFromTerminal(ctx, tty, func() ([]byte, error) { return term.ReadPassword(int(tty.Fd())) })
	fmt.Fprintln(out)
	if err != nil {
		return nil, fmt.Errorf("read passphrase: %w", err)
	}
	return p, nil
}

// safeLine makes untrusted text safe to print on one terminal line: control characters (escape sequences
// included), invisible formatting characters such as bidirectional overrides, line breaks and invalid UTF-8
// are shown as escapes instead of being interpreted by the terminal. Requests are written by the MCP server,
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

// ---------------------------------------------------------------------------------------------------------
// approvals list / show

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
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}

	list := &approvalsListOptions{now: time.Now}
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List approval requests, newest first",
		Args:  cobra.NoArgs,
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
		Args:  cobra.ExactArgs(1),
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

// ---------------------------------------------------------------------------------------------------------
// approve

type approveOptions struct {
	storeFlags
	ID         string
	KeyPath    string
	Audience   string
	PolicyFile string
	TTL        time.Duration
	now        func() time.Time
}

func (o *approveOptions) Complete(args []string) error {
	o.ID = args[0]
	if err := o.complete(); err != nil {
		return err
	}
	if o.KeyPath == "" {
		p, err := approval.DefaultKeyPath()
		if err != nil {
			return err
		}
		o.KeyPath = p
	}
	// The audience is the cluster the approval is for. It comes from the approver's side -- a flag, the
	// environment or the approver's copy of the policy -- never from the request, which the untrusted MCP
	// server wrote.
	if o.Audience == "" {
		o.Audience = os.Getenv("AGENT_SANDBOX_CLUSTER_ID")
	}
	if o.Audience == "" && o.PolicyFile != "" {
		if p, err := policy.LoadFile(o.PolicyFile, policy.WithoutAdmissionRules()); err == nil {
			o.Audience = p.Spec.ClusterID
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func (o *approveOptions) Validate() error {
	var errs []error
	if o.Audience == "" {
		errs = append(errs, errors.New("the cluster to approve for is unknown: pass --audience CLUSTER_ID, set $AGENT_SANDBOX_CLUSTER_ID, or --policy FILE"))
	}
	if o.TTL <= 0 || o.TTL > approval.MaxTokenTTL {
		errs = append(errs, fmt.Errorf("--ttl must be more than 0 and at most %s", approval.MaxTokenTTL))
	}
	if _, err := os.Stat(o.KeyPath); err != nil {
		errs = append(errs, fmt.Errorf("approver key %s: %w (create one with 'agent-sandbox keygen')", o.KeyPath, err))
	}
	return errors.Join(errs...)
}

// Run shows the request, asks the person to confirm and for the key's passphrase, and stores the grant. tty is
// the terminal everything is read from.
func (o *approveOptions) Run(ctx context.Context, streams IO, tty *os.File) error {
	store, err := approval.OpenStore(o.DBPath, approval.WithStoreClock(o.now))
	if err != nil {
		return err
	}
	defer store.Close()
	req, err := store.Get(ctx, o.ID)
	if err != nil {
		return err
	}
	if req.Status != approval.StatusPending {
		return fmt.Errorf("cannot approve %s: it is %s, and only pending requests can be approved", req.ID, req.Status)
	}

	out := streams.Out
	fmt.Fprintln(out, "APPROVAL REQUEST: approving lets this exact call run once, with a credential scoped to its namespace.")
	fmt.Fprintln(out)
	printRequest(out, req, o.now())
	fmt.Fprintln(out)
	fmt.Fprintf(out, "The approval is for cluster %q and expires %s after you confirm.\n", safeLine(o.Audience), o.TTL)
	fmt.Fprintf(out, "To approve, type the request ID (%s) or \"yes\": ", req.ID)
	line, err := readLine(ctx, tty)
	if err != nil {
		return fmt.Errorf("read confirmation: %w", err)
	}
	line = strings.TrimSpace(line)
	if line != req.ID && !strings.EqualFold(line, "yes") {
		return fmt.Errorf("not approved: the confirmation did not match; %s is still pending", req.ID)
	}

	pass, err := readPassphrase(ctx, tty, out, fmt.Sprintf("Passphrase for approver key %s: ", o.KeyPath))
	if err != nil {
		return err
	}
	key, err := approval.LoadPrivateKey(o.KeyPath, pass)
	clear(pass)
	if err != nil {
		return fmt.Errorf("not approved: %w; %s is still pending", err, req.ID)
	}
	claims, err := approval.NewClaims(req, key.KeyID(), o.Audience, o.now(), o.TTL)
	if err != nil {
		return fmt.Errorf("not approved: %w", err)
	}
	token, err := approval.Sign(key, claims)
	if err != nil {
		return fmt.Errorf("not approved: %w", err)
	}
	if err := store.Grant(ctx, req.ID, token, &claims); err != nil {
		return fmt.Errorf("not approved: %w", err)
	}
	_, err = fmt.Fprintf(out, "approved %s (token id %s, expires %s)\n", req.ID, claims.ID, formatTime(claims.Expiry))
	return err
}

func newApproveCommand(streams IO) *cobra.Command {
	o := &approveOptions{TTL: approval.DefaultTokenTTL, now: time.Now}
	cmd := &cobra.Command{
		Use:   "approve ID",
		Short: "Approve a pending request, as a person at a terminal",
		Long: `Approve shows a pending request (tool, target namespace, parameters, plan digest and summary, and
every destructive signal), asks you to type its ID (or "yes") to confirm, asks for your approver key's
passphrase without echo, and stores a signed approval token that the admission webhook accepts once, for
this exact call, until it expires (--ttl, at most 30m).

Approve runs only with standard input on an interactive terminal. There is, by design, no flag, environment
variable or other way to approve without one: approvals are made by a person, not by a program.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tty, ok := terminalOf(streams.In)
			if !ok {
				fmt.Fprintln(streams.ErrOut, noTerminalMessage)
				return exitError{code: 2}
			}
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context(), streams, tty)
		},
	}
	o.bind(cmd)
	cmd.Flags().StringVar(&o.KeyPath, "key", "", "approver private key (default $"+approval.EnvApproverKey+", else ~/.config/agent-sandbox/approver.key)")
	cmd.Flags().StringVar(&o.Audience, "audience", "", "cluster ID the approval is for, as the webhook's policy names it [$AGENT_SANDBOX_CLUSTER_ID, else the --policy file's spec.clusterID]")
	cmd.Flags().StringVar(&o.PolicyFile, "policy", envOr("AGENT_SANDBOX_POLICY", "policy/policy.yaml"), "your copy of the policy, for its cluster ID when --audience is not given [$AGENT_SANDBOX_POLICY]")
	cmd.Flags().DurationVar(&o.TTL, "ttl", approval.DefaultTokenTTL, "how long the approval stays valid (at most 30m)")
	return cmd
}

// ---------------------------------------------------------------------------------------------------------
// deny

type denyOptions struct {
	storeFlags
	ID     string
	Reason string
	by     string
	now    func() time.Time
}

func (o *denyOptions) Complete(args []string) error {
	o.ID = args[0]
	if o.by == "" {
		o.by = currentUser()
	}
	return o.complete()
}

func (o *denyOptions) Validate() error {
	if len(o.Reason) > 1024 {
		return errors.New("--reason is longer than 1024 bytes")
	}
	return nil
}

func (o *denyOptions) Run(ctx context.Context, streams IO) error {
	store, err := approval.OpenStore(o.DBPath, approval.WithStoreClock(o.now))
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Deny(ctx, o.ID, o.by, o.Reason); err != nil {
		return err
	}
	_, err = fmt.Fprintf(streams.Out, "denied %s\n", o.ID)
	return err
}

// currentUser names who denied a request, for the record.
func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

func newDenyCommand(streams IO) *cobra.Command {
	o := &denyOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "deny ID",
		Short: "Deny a pending request",
		Long: `Deny refuses a pending request for good. Unlike approve it needs no terminal and no key: refusing
is always safe, so scripts may do it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context(), streams)
		},
	}
	o.bind(cmd)
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why the request is denied (recorded with it)")
	return cmd
}

// ---------------------------------------------------------------------------------------------------------
// keygen

type keygenOptions struct {
	Out            string
	PublicOut      string
	KeyID          string
	Force          bool
	PassphraseFile string
}

func (o *keygenOptions) Complete() error {
	if o.Out == "" {
		p, err := approval.DefaultKeyPath()
		if err != nil {
			return err
		}
		o.Out = p
	}
	if o.PublicOut == "" {
		o.PublicOut = o.Out + ".jwks.json"
	}
	return nil
}

func (o *keygenOptions) Validate() error {
	var errs []error
	if o.KeyID != "" {
		if err := approval.ValidateKeyID(o.KeyID); err != nil {
			errs = append(errs, fmt.Errorf("--key-id: %w", err))
		}
	}
	if o.Out == o.PublicOut {
		errs = append(errs, errors.New("--out and --public-out must differ"))
	}
	if !o.Force {
		for _, p := range []string{o.Out, o.PublicOut} {
			if _, err := os.Lstat(p); err == nil || !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("%s already exists; use --force to replace it", p))
			}
		}
	}
	return errors.Join(errs...)
}

// passphrase reads the new key's passphrase from --passphrase-file, or twice from the terminal.
func (o *keygenOptions) passphrase(ctx context.Context, streams IO) ([]byte, error) {
	var pass []byte
	if o.PassphraseFile != "" {
		data, err := os.ReadFile(o.PassphraseFile)
		if err != nil {
			return nil, fmt.Errorf("--passphrase-file: %w", err)
		}
		s := strings.TrimSuffix(string(data), "\n")
		pass = []byte(strings.TrimSuffix(s, "\r"))
		clear(data)
	} else {
		tty, ok := terminalOf(streams.In)
		if !ok {
			return nil, errors.New("keygen needs an interactive terminal to ask for the passphrase (or --passphrase-file FILE, for automation)")
		}
		first, err := readPassphrase(ctx, tty, streams.Out, "Passphrase for the new approver key: ")
		if err != nil {
			return nil, err
		}
		again, err := readPassphrase(ctx, tty, streams.Out, "Same passphrase again: ")
		if err != nil {
			return nil, err
		}
		same := string(first) == string(again)
		clear(again)
		if !same {
			clear(first)
			return nil, errors.New("the passphrases differ")
		}
		pass = first
	}
	if utf8.RuneCount(pass) < approval.MinPassphraseLength {
		clear(pass)
		return nil, fmt.Errorf("the passphrase must be at least %d characters", approval.MinPassphraseLength)
	}
	return pass, nil
}

func (o *keygenOptions) Run(ctx context.Context, streams IO) error {
	pass, err := o.passphrase(ctx, streams)
	if err != nil {
		return err
	}
	defer clear(pass)
	key, err := approval.GenerateKey(o.KeyID)
	if err != nil {
		return err
	}
	if err := key.WriteFile(o.Out, pass, approval.WithOverwrite(o.Force)); err != nil {
		return err
	}
	if err := key.KeySet().WritePublicFile(o.PublicOut, o.Force); err != nil {
		return err
	}
	_, err = fmt.Fprintf(streams.Out, `generated approver key %s
  private key: %s (encrypted with your passphrase, mode 0600; it never needs to leave this machine)
  public key:  %s (a JWK set)

Give the public key to the admission webhook: it accepts approvals signed by the keys in its approver
JWK set. A JWK set is just {"keys": [...]}, so to trust several approvers put all their keys in one array:
  jq -s '{keys: map(.keys[])}' alice.jwks.json bob.jwks.json > approvers.jwks.json
`, key.KeyID(), o.Out, o.PublicOut)
	return err
}

func newKeygenCommand(streams IO) *cobra.Command {
	o := &keygenOptions{}
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Create an approver key pair (ed25519, private key encrypted with a passphrase)",
		Long: `Keygen creates the key a person approves requests with. The private key is encrypted with a
passphrase (age, scrypt) and written with mode 0600; the public key is written as a JWK set for the
admission webhook.

The passphrase is asked twice on the terminal. For automation (provisioning a key non-interactively),
--passphrase-file reads it from a file instead; this is allowed because creating a key approves nothing:
approving still needs a person at a terminal who knows the passphrase.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context(), streams)
		},
	}
	cmd.Flags().StringVar(&o.Out, "out", "", "private key file (default $"+approval.EnvApproverKey+", else ~/.config/agent-sandbox/approver.key)")
	cmd.Flags().StringVar(&o.PublicOut, "public-out", "", "public key JWK set file (default the private key file + \".jwks.json\")")
	cmd.Flags().StringVar(&o.KeyID, "key-id", "", "key ID (default \"approver-\" and 16 hex digits of the public key's SHA-256)")
	cmd.Flags().BoolVar(&o.Force, "force", false, "replace existing key files")
	cmd.Flags().StringVar(&o.PassphraseFile, "passphrase-file", "", "read the passphrase from this file instead of the terminal (for automation)")
	return cmd
}
