package cases

import (
	"encoding/base64"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// Key is whose key signs an approval case's token.
type Key int

const (
	// NoToken: the Job carries no approval at all.
	NoToken Key = iota
	// Trusted is an approver key the webhook trusts.
	Trusted
	// Untrusted is a key the webhook does not know.
	Untrusted
	// Impostor is a key the webhook does not trust, under the key ID of one it does.
	Impostor
)

// Approval is an ApplyTool Job with ApplyParams and one approval token: the token, signed by Key for
// Params (nil: ApplyParams) with its claims changed by Claims and the signed token by Forge, or the Job
// changed by Job after rendering. It must be refused, naming Rule, with Says in the reason, and consume
// nothing.
type Approval struct {
	Name   string
	Rule   string
	Says   string
	Key    Key
	Params map[string]any
	Claims func(*approval.Claims)
	Forge  func(token string) string
	Job    func(*batchv1.Job)
	// RequestName names the Job as sandbox.JobName names a Job of its request ID, not after its token
	// (sandbox.ApprovalJobName). This package cannot import internal/sandbox, which imports cel.
	RequestName bool
}

// Approvals are the unsafe approvals of one token. (The corpus's cases of several approvers' tokens and of
// replays need tokens admitted first, and stay with the corpus's scenarios.)
func Approvals() []Approval {
	other := ApplyParams()
	other["plan_id"] = strings.Repeat("cd", 32)
	check := func(j *batchv1.Job) *[]string { return &j.Spec.Template.Spec.InitContainers[0].Command }
	return []Approval{
		{Name: "apply without a token", Rule: "approval-required", Says: "approve", Key: NoToken},
		{Name: "apply with a forged signature", Rule: "approval", Says: "signature", Key: Trusted, Forge: flipSignatureBit},
		{Name: "apply with a token from another key", Rule: "approval", Says: "not a trusted approver", Key: Untrusted},
		{Name: "apply with a token from another key under a trusted key's ID", Rule: "approval", Says: "signature", Key: Impostor},
		{Name: "apply with an expired token", Rule: "approval", Says: "expired", Key: Trusted, Claims: func(c *approval.Claims) {
			c.IssuedAt, c.NotBefore, c.Expiry = c.IssuedAt.Add(-2*time.Hour), c.NotBefore.Add(-2*time.Hour), c.IssuedAt.Add(-90*time.Minute)
		}},
		{Name: "apply with a token for other parameters", Rule: "approval", Says: "other parameters", Key: Trusted, Params: other},
		{Name: "apply with a token for another tool", Rule: "approval", Says: "another tool", Key: Trusted, Claims: func(c *approval.Claims) { c.Tool = "terraform_plan" }},
		{Name: "apply with a token for another cluster", Rule: "approval", Says: "another cluster", Key: Trusted, Claims: func(c *approval.Claims) { c.Audience = "some-other-cluster" }},
		// The check container counts the approvers the Job's argv names ({{approvers}}): a Job that names more
		// than its tokens are signed by is not its rendering.
		{Name: "apply whose check names an approver its tokens do not", Rule: "exact-command", Key: Trusted, Job: func(j *batchv1.Job) {
			for i, a := range *check(j) {
				if strings.HasPrefix(a, "--approvers=") {
					(*check(j))[i] = a + ",someone-else"
				}
			}
		}},
		{Name: "apply whose check leaves out its approvers", Rule: "exact-command", Key: Trusted, Job: func(j *batchv1.Job) {
			*check(j) = slices.DeleteFunc(*check(j), func(a string) bool { return strings.HasPrefix(a, "--approvers=") })
		}},
		// The Job that carries a token is named after the token, so that no other Job can take its name first
		// and make the approved Job's creation fail after its token was spent.
		{Name: "approval Job under the name of its request, not of its token", Rule: "exact-metadata", Key: Trusted, RequestName: true},
	}
}

// Token is the case's approval token: signed by sign with the key that a.Key names, for the case's
// parameters and claims, then forged if the case forges it; "" for NoToken.
func (a Approval) Token(sign func(k Key, params map[string]any, claims func(*approval.Claims)) string) string {
	if a.Key == NoToken {
		return ""
	}
	params := a.Params
	if params == nil {
		params = ApplyParams()
	}
	tok := sign(a.Key, params, a.Claims)
	if a.Forge != nil {
		tok = a.Forge(tok)
	}
	return tok
}

// Change makes the case's change to its rendered Job. jobName is sandbox.JobName, for RequestName.
func (a Approval) Change(j *batchv1.Job, jobName func(tool, requestID string) string) {
	if a.RequestName {
		j.Name = jobName(ApplyTool, j.Labels[contract.LabelRequestID])
	}
	if a.Job != nil {
		a.Job(j)
	}
}

// flipSignatureBit flips one bit of a token's signature, keeping the token well-formed.
func flipSignatureBit(tok string) string {
	i := strings.LastIndex(tok, ".")
	sig, err := base64.RawURLEncoding.DecodeString(tok[i+1:])
	if err != nil || len(sig) == 0 {
		panic("cases: not a signed token: " + tok)
	}
	sig[0] ^= 1
	return tok[:i+1] + base64.RawURLEncoding.EncodeToString(sig)
}
