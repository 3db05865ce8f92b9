package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

type approveOptions struct {
	storeFlags
	ID         string
	KeyPath    string
	Audience   string
	PolicyFile string
	TTL        time.Duration
	// ttlSet is true when --ttl was given; otherwise the policy's spec.approval.tokenTTL is the lifetime.
	ttlSet bool
	// Plan verification: the approver's own access to the saved plan and to Terraform.
	Kubeconfig       string
	SandboxNamespace string
	Terraform        string
	ProviderMirror   string
	now              func() time.Time
	// required computes the distinct approvers a call needs from what approve verified (requiredApprovals;
	// tests substitute their own).
	required func(*verifiedPlan) int

	policy *policy.Compiled
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
	if o.PolicyFile != "" {
		if p, err := policy.LoadFile(o.PolicyFile, policy.WithoutAdmissionRules()); err == nil {
			o.policy = p
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if o.Audience == "" && o.policy != nil {
		o.Audience = o.policy.Spec.ClusterID
	}
	// The policy's token lifetime governs: it is what the webhook enforces, so an approval signed for longer
	// would be refused when it is used.
	if !o.ttlSet && o.policy != nil {
		o.TTL = o.policy.Spec.Approval.TokenTTL.Duration
	}
	if o.SandboxNamespace == "" && o.policy != nil {
		o.SandboxNamespace = o.policy.Spec.Sandbox.Namespace
	}
	if o.SandboxNamespace == "" {
		o.SandboxNamespace = "agent-sandbox"
	}
	if o.ProviderMirror == "" {
		o.ProviderMirror = os.Getenv("AGENT_SANDBOX_TF_PROVIDER_MIRROR")
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
	} else if o.policy != nil && o.TTL > o.policy.Spec.Approval.TokenTTL.Duration {
		errs = append(errs, fmt.Errorf("--ttl %s is longer than the policy's spec.approval.tokenTTL (%s): the webhook would refuse the approval",
			o.TTL, o.policy.Spec.Approval.TokenTTL.Duration))
	}
	if _, err := os.Stat(o.KeyPath); err != nil {
		errs = append(errs, fmt.Errorf("approver key %s: %w (create one with 'agent-sandbox keygen')", o.KeyPath, err))
	}
	return errors.Join(errs...)
}

// Run shows the request, asks the person to confirm and for the key's passphrase, and stores the grant. tty is
// the terminal everything is read from.
func (o *approveOptions) Run(ctx context.Context, streams IO, tty *os.File) error {
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
	fmt.Fprintln(out, "APPROVAL REQUEST: approving lets this exact call run once, with a credential scoped to its namespace.")
	fmt.Fprintln(out)
	printRequest(out, req, o.now())
	fmt.Fprintln(out)
	var vp *verifiedPlan
	if req.PlanDigest != "" {
		// The summary above is the MCP server's, which nobody trusts. The saved plan the approval binds is
		// fetched and described here, by this program, and must say the same.
		v := &planVerifier{Kubeconfig: o.Kubeconfig, Namespace: o.SandboxNamespace, Terraform: o.Terraform, ProviderMirror: o.ProviderMirror, Policy: o.policy}
		vp, err = v.verify(ctx, req.PlanDigest, io.Discard)
		if err != nil {
			return fmt.Errorf("not approved: the saved plan could not be verified, so what it does is unknown: %w; %s is still pending", err, req.ID)
		}
		printVerified(out, vp)
		fmt.Fprintln(out)
		if ok, diff := claimsMatch(req, vp); !ok {
			fmt.Fprintln(out, "!! THE REQUEST'S DESCRIPTION OF THIS PLAN IS FALSE: "+diff+".")
			fmt.Fprintln(out, "!! The MCP server that filed it described a different plan than the one you would approve.")
			fmt.Fprintln(out, "!! Refusing. Deny it with: agent-sandbox deny "+req.ID+" --reason 'plan description does not match the plan'")
			return exitError{code: exitTampered}
		}
	}
	// How many distinct approvers the call needs is computed here, from what this program verified; the
	// request's number (which the MCP server set, or an earlier approver raised) can only make it more.
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
	// Read the request again: others may have approved while this one was being read.
	if req, err = store.Get(ctx, req.ID); err != nil {
		return fmt.Errorf("not approved: %w", err)
	}
	if req.HasApprover(key.KeyID()) {
		return alreadyApproved(req, key.KeyID())
	}
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
	after, err := store.Get(ctx, req.ID)
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
// verified (vp is nil for a request bound to no saved plan). Today every call needs one.
//
// TODO(lead, issue 21): evaluate the policy's spec.planRules over vp's resource changes and return the
// largest `approvals` of the rules that match (at least 1). approve raises the request to it and signs it
// into the token (approvals_required), where the webhook enforces it.
func requiredApprovals(vp *verifiedPlan) int {
	_ = vp
	return 1
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

func newApproveCommand(streams IO) *cobra.Command {
	o := &approveOptions{TTL: approval.DefaultTokenTTL, now: time.Now, required: requiredApprovals}
	cmd := &cobra.Command{
		Use:   "approve ID",
		Short: "Approve a pending request, as a person at a terminal",
		Long: `Approve shows a pending request (tool, target namespace, parameters, plan digest and summary, and
every destructive signal), asks you to type its ID (or "yes") to confirm, asks for your approver key's
passphrase without echo, and stores a signed approval token that the admission webhook accepts once, for
this exact call, until it expires: after the policy's spec.approval.tokenTTL (at most 30m), or sooner
with --ttl.

For a request bound to a saved Terraform plan, the summary in the request is the MCP server's, and the MCP
server is not trusted. So approve reads the saved plan itself, with your kubeconfig, from the ConfigMap
tfplan-<plan ID> of the sandbox namespace, checks its SHA-256 against the plan ID, checks it against the
workspace allowlist, and describes it with terraform on this machine (terraform show, with the kubernetes
provider from --provider-mirror; no cluster credential is involved). It shows those changes, destructive
ones marked, and refuses (exit 4) when the request described anything else.

Approve runs only with standard input on an interactive terminal. There is, by design, no flag, environment
variable or other way to approve without one: approvals are made by a person, not by a program.

Exit codes: 0 approved; 1 not approved (an error, or the confirmation did not match); 2 usage, or no
terminal; 3 no such request; 4 the request or its saved plan does not match (tampered, or described falsely).`,
		Args:              usage(cobra.ExactArgs(1)),
		ValidArgsFunction: completeRequestIDs(approval.StatusPending),
		RunE: func(cmd *cobra.Command, args []string) error {
			tty, ok := terminalOf(streams.In)
			if !ok {
				fmt.Fprintln(streams.ErrOut, noTerminalMessage)
				return exitError{code: 2}
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
	cmd.Flags().StringVar(&o.KeyPath, "key", "", "approver private key (default $"+approval.EnvApproverKey+", else ~/.config/agent-sandbox/approver.key)")
	cmd.Flags().StringVar(&o.Audience, "audience", "", "cluster ID the approval is for, as the webhook's policy names it [$AGENT_SANDBOX_CLUSTER_ID, else the --policy file's spec.clusterID]")
	cmd.Flags().StringVar(&o.PolicyFile, "policy", envOr("AGENT_SANDBOX_POLICY", "policy/policy.yaml"), "your copy of the policy, for its cluster ID when --audience is not given [$AGENT_SANDBOX_POLICY]")
	cmd.Flags().DurationVar(&o.TTL, "ttl", approval.DefaultTokenTTL, "how long the approval stays valid (default: the --policy file's spec.approval.tokenTTL; at most that)")
	cmd.Flags().StringVar(&o.Kubeconfig, "kubeconfig", "", "your kubeconfig, to read the saved plan a Terraform request is bound to [$KUBECONFIG, else ~/.kube/config]")
	cmd.Flags().StringVar(&o.SandboxNamespace, "sandbox-namespace", "", "where saved plans are stored (default: the --policy file's spec.sandbox.namespace, else agent-sandbox)")
	cmd.Flags().StringVar(&o.Terraform, "terraform", "terraform", "the terraform binary that describes the saved plan")
	cmd.Flags().StringVar(&o.ProviderMirror, "provider-mirror", "", "filesystem mirror of the kubernetes provider terraform reads the plan with [$AGENT_SANDBOX_TF_PROVIDER_MIRROR]")
	return cmd
}
