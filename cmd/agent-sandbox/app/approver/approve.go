package approver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	approvalstore "github.com/agent-sandbox/agent-sandbox/internal/approval/store"
)

type approveOptions struct {
	storeFlags
	ID       string
	KeyPath  string
	Audience string
	TTL      time.Duration
	// ttlSet is true when --ttl was given; otherwise the policy's spec.approval.tokenTTL is the lifetime.
	ttlSet bool
	// plan is the approver's own access to the saved plan and to Terraform, and their copy of the policy.
	plan planFlags
	now  func() time.Time
	// required computes the distinct approvers a call needs from what approve verified (requiredApprovals;
	// tests substitute their own).
	required func(*verifiedPlan) int
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
	if err := o.plan.complete(); err != nil {
		return err
	}
	pol := o.plan.policy
	if o.Audience == "" && pol != nil {
		o.Audience = pol.Spec.ClusterID
	}
	// The policy's token lifetime governs: it is what the webhook enforces, so an approval signed for longer
	// would be refused when it is used.
	if !o.ttlSet && pol != nil {
		o.TTL = pol.Spec.Approval.TokenTTL.Duration
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
	} else if pol := o.plan.policy; pol != nil && o.TTL > pol.Spec.Approval.TokenTTL.Duration {
		errs = append(errs, fmt.Errorf("--ttl %s is longer than the policy's spec.approval.tokenTTL (%s): the webhook would refuse the approval",
			o.TTL, pol.Spec.Approval.TokenTTL.Duration))
	}
	if _, err := os.Stat(o.KeyPath); err != nil {
		errs = append(errs, fmt.Errorf("approver key %s: %w (create one with 'agent-sandbox keygen')", o.KeyPath, err))
	}
	return errors.Join(errs...)
}

// Run shows the request, asks the person to confirm and for the key's passphrase, and stores the grant. tty is
// the terminal everything is read from.
func (o *approveOptions) Run(ctx context.Context, streams cli.IO, tty *os.File) error {
	store, err := o.openExisting(o.now)
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
	above, screen, vp, err := o.describe(ctx, out, req)
	if err != nil {
		return err
	}
	// Every line is read before the question is asked: on a terminal, a page at a time.
	if err := pageTo(ctx, out, tty, above, screen); err != nil {
		return fmt.Errorf("not approved: %w; %s is still pending", err, req.ID)
	}
	if err := o.raiseRequired(ctx, store, req, vp); err != nil {
		return err
	}
	printApprovalsSoFar(out, req)
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
	if err := o.grant(ctx, out, store, req, key); err != nil {
		return err
	}
	return printProgress(ctx, out, store, req.ID)
}

// describe builds the screen the approver reads before confirming: the request and, for a request bound to
// a saved plan, what this program itself finds the plan does. It refuses (printing what it has shown so far
// and why) when the plan cannot be verified, when the request describes it falsely, or when the policy's
// plan rules refuse it. above is the progress line already printed while the plan was read.
func (o *approveOptions) describe(ctx context.Context, out io.Writer, req *approval.Request) (above, screen string, vp *verifiedPlan, err error) {
	var sb strings.Builder
	fmt.Fprintln(&sb, "APPROVAL REQUEST: approving lets this exact call run once, with a credential scoped to its namespace.")
	fmt.Fprintln(&sb)
	printRequest(&sb, req, o.now())
	fmt.Fprintln(&sb)
	if req.PlanDigest == "" {
		return "", sb.String(), nil, nil
	}
	// The summary in the request is the MCP server's, which nobody trusts. The saved plan the approval
	// binds is fetched and described here, by this program, and must say the same.
	above = fmt.Sprintf("Reading the saved plan %s and describing it with terraform on this machine ...\n", req.PlanDigest[:min(12, len(req.PlanDigest))])
	fmt.Fprint(out, above)
	vp, err = o.plan.plans().verify(ctx, req.PlanDigest, io.Discard)
	if err != nil {
		fmt.Fprint(out, sb.String())
		return "", "", nil, fmt.Errorf("not approved: the saved plan could not be verified, so what it does is unknown: %w; %s is still pending", err, req.ID)
	}
	printVerified(&sb, vp)
	fmt.Fprintln(&sb)
	if ok, diff := claimsMatch(req, vp); !ok {
		fmt.Fprint(out, sb.String())
		fmt.Fprintln(out, "!! THE REQUEST'S DESCRIPTION OF THIS PLAN IS FALSE: "+diff+".")
		fmt.Fprintln(out, "!! The MCP server that filed it described a different plan than the one you would approve.")
		fmt.Fprintln(out, "!! Refusing. Deny it with: agent-sandbox deny "+req.ID+" --reason 'plan description does not match the plan'")
		return "", "", nil, cli.ExitError{Code: cli.ExitTampered}
	}
	if vp.verdict.Refused() {
		// What no person should approve, the policy refuses: show why, and sign nothing.
		fmt.Fprint(out, sb.String())
		fmt.Fprintln(out, "!! Refusing to sign: "+safeLine(vp.verdict.Error())+".")
		fmt.Fprintln(out, "!! Deny it with: agent-sandbox deny "+req.ID+" --reason 'refused by the policy's plan rules'")
		return "", "", nil, cli.ExitError{Code: cli.ExitTampered}
	}
	return above, sb.String(), vp, nil
}

// raiseRequired makes the request need as many distinct approvers as this program computes from what it
// verified; the request's number (which the MCP server set, or an earlier approver raised) can only make it
// more, never fewer.
func (o *approveOptions) raiseRequired(ctx context.Context, store *approvalstore.Store, req *approval.Request, vp *verifiedPlan) error {
	required := o.required
	if required == nil {
		required = requiredApprovals
	}
	if n := required(vp); n > req.ApprovalsRequired {
		if err := store.RaiseApprovalsRequired(ctx, req.ID, n); err != nil {
			return fmt.Errorf("not approved: %w; %s is still pending", err, req.ID)
		}
		req.ApprovalsRequired = n
	}
	return nil
}

// grant signs an approval of shown, the request as the screen showed it, with key and stores it. The request
// is read again first: others may have approved while this one was being read, and one approver counts
// once. What is signed is what was shown: the database is the MCP server's, and a request whose tool,
// parameters, namespace or plan changed behind the screen is refused (ErrTampered), never signed as it
// reads now.
func (o *approveOptions) grant(ctx context.Context, out io.Writer, store *approvalstore.Store, shown *approval.Request, key *approval.PrivateKey) error {
	req, err := store.Get(ctx, shown.ID)
	if err != nil {
		return fmt.Errorf("not approved: %w", err)
	}
	if what := changedBinding(shown, req); what != "" {
		return fmt.Errorf("not approved: %w: the request's %s changed while you read it; %s is still pending, and was not what you were shown",
			approval.ErrTampered, what, shown.ID)
	}
	if req.HasApprover(key.KeyID()) {
		return alreadyApproved(req, key.KeyID())
	}
	// What is signed is the hash of the parameters shown, computed here: never a hash the MCP server's
	// database merely states (the store checks this on every read too).
	if hash, err := approval.ParamsHash(shown.Tool, shown.Params); err != nil || hash != shown.ParamsHash {
		return fmt.Errorf("not approved: %w: the request's params hash is not the hash of the parameters shown (%w)", approval.ErrTampered, approval.ErrParamsMismatch)
	}
	// Of the fresh read only the number of approvers counts, and only upwards: another approver may have
	// raised it meanwhile.
	signed := *shown
	signed.ApprovalsRequired = max(shown.ApprovalsRequired, req.ApprovalsRequired)
	req = &signed
	claims, err := approval.NewClaims(req, key.KeyID(), o.Audience, o.now(), o.TTL)
	if err != nil {
		return fmt.Errorf("not approved: %w", err)
	}
	token, err := approval.Sign(key, claims)
	if err != nil {
		return fmt.Errorf("not approved: %w", err)
	}
	err = store.Grant(ctx, req.ID, token, &claims)
	if errors.Is(err, approval.ErrAlreadyApproved) {
		return alreadyApproved(req, key.KeyID())
	}
	if err != nil {
		return fmt.Errorf("not approved: %w", err)
	}
	fmt.Fprintf(out, "approved %s (token id %s, expires %s)\n", req.ID, claims.ID, formatTime(claims.Expiry))
	return nil
}

// changedBinding names the first of the fields an approval binds (tool, parameters, target namespace, saved
// plan) in which the request as read now differs from the request as shown, or returns "".
func changedBinding(shown, now *approval.Request) string {
	sc, err1 := approval.CanonicalParams(shown.Params)
	nc, err2 := approval.CanonicalParams(now.Params)
	switch {
	case now.ID != shown.ID:
		return "ID"
	case now.Tool != shown.Tool:
		return "tool"
	case err1 != nil || err2 != nil || string(sc) != string(nc) || now.ParamsHash != shown.ParamsHash:
		return "parameters"
	case now.Namespace != shown.Namespace:
		return "target namespace"
	case now.PlanDigest != shown.PlanDigest:
		return "saved plan"
	}
	return ""
}

// printProgress tells the approver where request id stands after their approval: complete, or how many
// more distinct approvers it needs.
func printProgress(ctx context.Context, out io.Writer, store *approvalstore.Store, id string) error {
	after, err := store.Get(ctx, id)
	if err != nil {
		return err
	}
	switch left := after.ApprovalsRequired - after.Approvals(); {
	case after.Status == approval.StatusGranted && after.ApprovalsRequired > 1:
		_, err = fmt.Fprintf(out, "%s: the set is complete (%s); the call can run once, until %s\n",
			after.Progress(), safeLine(strings.Join(after.Approvers(), ", ")), formatTime(after.TokenExpiry))
	case after.Status == approval.StatusPending && left > 0:
		who := "another approver"
		if left > 1 {
			who = fmt.Sprintf("%d other approvers", left)
		}
		_, err = fmt.Fprintf(out, "%s: %d more needed; ask %s to run `agent-sandbox approve %s` (the same approver twice counts once)\n",
			after.Progress(), left, who, after.ID)
	}
	return err
}

// requiredApprovals is how many distinct approvers a call needs, computed by approve itself from what it
// verified: the most any two-person rule of the approver's policy (spec.planRules with approvals) asks of
// the saved plan, at least 1 (vp is nil for a request bound to no saved plan). approve raises the request to
// it and signs it into the token (approvals_required), where the webhook enforces it; the apply sandbox's
// check container counts the distinct approvers again against the cluster's own rules.
func requiredApprovals(vp *verifiedPlan) int {
	if vp == nil {
		return 1
	}
	return max(vp.verdict.Approvals, 1)
}

// printApprovalsSoFar tells the approver who has approved already and how many approvals are still needed,
// for a call that needs more than one.
func printApprovalsSoFar(w io.Writer, req *approval.Request) {
	if req.ApprovalsRequired <= 1 {
		return
	}
	if req.Approvals() == 0 {
		fmt.Fprintf(w, "This call needs %d distinct approvers; nobody has approved it yet (yours makes 1 of %d).\n",
			req.ApprovalsRequired, req.ApprovalsRequired)
		return
	}
	// Who approved is what the approvals database says, and that file is the MCP server's: the webhook checks
	// every approver's signature when the call runs, so a grant written there by anyone else admits nothing.
	fmt.Fprintf(w, "This call needs %d distinct approvers: %s so far, by %s (as the approvals database says); %d more needed, yours included.\n",
		req.ApprovalsRequired, req.Progress(), safeLine(strings.Join(req.Approvers(), ", ")), req.ApprovalsRequired-req.Approvals())
}

// alreadyApproved refuses a second approval by the same key: it would count once, so the call would still
// lack an approver.
func alreadyApproved(req *approval.Request, keyID string) error {
	return fmt.Errorf("not approved: %w: you (approver key %s) approved %s before, and the same approver twice counts once; %s: ask another approver to run `agent-sandbox approve %s`",
		approval.ErrAlreadyApproved, safeLine(keyID), req.ID, req.Progress(), req.ID)
}

func NewApproveCommand(streams cli.IO) *cobra.Command {
	o := &approveOptions{TTL: approval.DefaultTokenTTL, now: time.Now, required: requiredApprovals}
	cmd := &cobra.Command{
		Use:   "approve ID",
		Short: "Approve a pending request, as a person at a terminal",
		Long: `Approve shows a pending request (tool, target namespace, parameters, plan digest and summary, and
its destructive signals: three matched lines of each, cut to 160 characters, with a count of the rest), asks you to type its ID (or "yes") to confirm, asks for your approver key's
passphrase without echo, and stores a signed approval token that the admission webhook accepts once, for
this exact call, until it expires: after the policy's spec.approval.tokenTTL (at most 30m), or sooner
with --ttl.

For a request bound to a saved Terraform plan, the summary in the request is the MCP server's, and the MCP
server is not trusted. So approve reads the saved plan itself, with your kubeconfig, from the ConfigMap
tfplan-<plan ID> of the sandbox namespace, checks its SHA-256 against the plan ID, checks it against the
workspace allowlist, and describes it with terraform on this machine (terraform show, with the kubernetes
provider from --provider-mirror; no cluster credential is involved). From that it shows, under WHAT THE
PLAN DOES:

  - first, the risk flags ("!! RISK ..."), each with the resource, the attribute and its value before ->
    after: privileged containers, privilege escalation, added capabilities, hostPath volumes, host network,
    PID, IPC and ports, root (run_as_user 0, which the provider writes when it is left out, and
    run_as_non_root false), service-account tokens and names, Secrets into env or volumes, images,
    commands and args, RBAC and Ingress resources, Services of type LoadBalancer or NodePort and external
    IPs, Service selectors, pod labels and new pods that an existing Service of the workspace selects,
    node placement and priority, DNS and hosts entries, capabilities not dropped, deletions and
    replacements, non-ASCII (look-alike) names; a value known only after apply on such
    an attribute is flagged too;
  - the destructive signals of your --policy in the plan text (three lines of each, and how many more);
    the signal texts the MCP server filed with such a request are not shown, only compared by name;
  - the counts, then every resource the plan changes with its action and every attribute that differs,
    before -> after, lines under a flag marked "!!". Values known only after apply say "(known after
    apply)", sensitive ones "(sensitive)"; control and non-ASCII characters are shown as escapes and named
    ([non-ASCII: U+0435 CYRILLIC SMALL LETTER IE]); a value too long for the screen says how much is cut.

On a terminal the screen is paged: after each screenful (the terminal's height, else 40 lines) approve
waits for Enter, and asks to confirm only after the last page. Nothing is left out. Approve refuses (exit
4) when the request described the plan differently from what it does, when the request's params hash is
not the hash of the parameters shown, and when the request's tool, parameters, namespace or plan changed
in the approvals database while you read the screen: it signs only what it showed.

Approve runs only with standard input on an interactive terminal. There is, by design, no flag, environment
variable or other way to approve without one: approvals are made by a person, not by a program.

Exit codes: 0 approved; 1 not approved (an error, or the confirmation did not match); 2 usage, or no
terminal; 3 no such request; 4 the request or its saved plan does not match (tampered, or described falsely).`,
		Args:              cli.Usage(cobra.ExactArgs(1)),
		ValidArgsFunction: completeRequestIDs(approval.StatusPending),
		RunE: func(cmd *cobra.Command, args []string) error {
			tty, ok := terminalOf(streams.In)
			if !ok {
				fmt.Fprintln(streams.ErrOut, noTerminalMessage)
				return cli.ExitError{Code: 2}
			}
			o.ttlSet = cmd.Flags().Changed("ttl")
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
	o.plan.bind(cmd)
	cmd.Flags().StringVar(&o.KeyPath, "key", "", "approver private key (default $"+approval.EnvApproverKey+", else ~/.config/agent-sandbox/approver.key)")
	cmd.Flags().StringVar(&o.Audience, "audience", "", "cluster ID the approval is for, as the webhook's policy names it [$AGENT_SANDBOX_CLUSTER_ID, else the --policy file's spec.clusterID]")
	cmd.Flags().DurationVar(&o.TTL, "ttl", approval.DefaultTokenTTL, "how long the approval stays valid (default: the --policy file's spec.approval.tokenTTL; at most that)")
	return cmd
}
