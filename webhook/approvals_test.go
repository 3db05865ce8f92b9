package webhook

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// twoPersonFixture is the fixture with a second trusted approver.
type twoPersonFixture struct {
	*fixture
	second *approval.PrivateKey
}

func newTwoPersonFixture(t *testing.T) *twoPersonFixture {
	t.Helper()
	f := newFixture(t)
	second, err := approval.GenerateKey("second-approver")
	if err != nil {
		t.Fatal(err)
	}
	keys := f.key.KeySet()
	if err := keys.Merge(second.KeySet()); err != nil {
		t.Fatal(err)
	}
	f.c.SetKeys(keys)
	return &twoPersonFixture{fixture: f, second: second}
}

// approval signs an approval of the fixture's apply by key, asking for need approvers.
func (f *twoPersonFixture) approval(t *testing.T, key *approval.PrivateKey, need int) string {
	t.Helper()
	return f.token(t, key, "terraform_apply", applyParams(), func(c *approval.Claims) { c.ApprovalsRequired = need })
}

// applyJob is the apply's Job carrying tokens, as the MCP server renders it.
func (f *twoPersonFixture) applyJob(t *testing.T, tokens ...string) *batchv1.Job {
	t.Helper()
	return f.job(t, "terraform_apply", applyParams(), contract.JoinApprovalTokens(tokens))
}

// check decides on the Job through the raw entry point and, with a fresh ledger so that
// both see unused tokens, through the decoded path; both must agree. It returns the raw path's answer.
func (f *twoPersonFixture) check(t *testing.T, j *batchv1.Job, r Request) (*Decision, error) {
	t.Helper()
	r.Operation = "CREATE"
	d, err := f.c.CheckJobRaw(context.Background(), r, f.raw(t, j), nil)
	saved := f.ledger
	f.ledger = &memLedger{}
	f.c.Ledger = f.ledger
	_, slowErr := f.checkJob(t, j, r)
	f.ledger, f.c.Ledger = saved, saved
	if ruleOf(err) != ruleOf(slowErr) || fmtErr(err) != fmtErr(slowErr) {
		t.Errorf("the raw path says %v, the decoded path %v", err, slowErr)
	}
	return d, err
}

// TestApprovalTwoPersonRule: a plan whose approvers' tools found it needs two approvers is admitted only with
// two distinct trusted approvers' tokens for this very call; one token, the same approver twice, or a token of
// another request is refused with a message that says why.
func TestApprovalTwoPersonRule(t *testing.T) {
	untrusted, _ := approval.GenerateKey("someone-else")
	tests := []struct {
		name   string
		tokens func(f *twoPersonFixture) []string
		text   string // the denial says this; empty: admitted
	}{
		{"two distinct approvers", func(f *twoPersonFixture) []string {
			return []string{f.approval(t, f.key, 2), f.approval(t, f.second, 2)}
		}, ""},
		{"two distinct approvers, one of whom asked for one", func(f *twoPersonFixture) []string {
			return []string{f.approval(t, f.key, 0), f.approval(t, f.second, 2)}
		}, ""},
		{"one token of two required", func(f *twoPersonFixture) []string {
			return []string{f.approval(t, f.key, 2)}
		}, "1 of 2 approvals: this plan needs 2 distinct approvers"},
		{"the same approver twice", func(f *twoPersonFixture) []string {
			return []string{f.approval(t, f.key, 2), f.approval(t, f.key, 2)}
		}, "1 of 2 approvals: this plan needs 2 distinct approvers; the same approver twice counts once"},
		{"the same approver twice where one is enough", func(f *twoPersonFixture) []string {
			return []string{f.approval(t, f.key, 0), f.approval(t, f.key, 0)}
		}, "the same approver twice counts once"},
		{"a second approver who is not trusted", func(f *twoPersonFixture) []string {
			return []string{f.approval(t, f.key, 2), f.approval(t, untrusted, 2)}
		}, "not a trusted approver"},
		{"a token for another request", func(f *twoPersonFixture) []string {
			return []string{f.approval(t, f.key, 2), f.token(t, f.second, "terraform_apply", applyParams(), func(c *approval.Claims) {
				c.ApprovalsRequired, c.Subject = 2, "req-vvvvvvvvvvvv"
			})}
		}, "different requests"},
		{"a token for another plan", func(f *twoPersonFixture) []string {
			p := applyParams()
			p["plan_id"] = strings.Repeat("cd", 32)
			return []string{f.approval(t, f.key, 2), f.token(t, f.second, "terraform_apply", p, func(c *approval.Claims) { c.ApprovalsRequired = 2 })}
		}, "other parameters"},
		{"an empty token after a comma", func(f *twoPersonFixture) []string {
			return []string{f.approval(t, f.key, 0), ""}
		}, "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTwoPersonFixture(t)
			tokens := tt.tokens(f)
			d, err := f.check(t, f.applyJob(t, tokens...), Request{})
			if tt.text == "" {
				if err != nil {
					t.Fatalf("denied: %v", err)
				}
				if len(d.ApprovalTokenIDs) != len(tokens) || len(f.ledger.seen) != len(tokens) {
					t.Errorf("admitted with %d token IDs, %d recorded; want %d", len(d.ApprovalTokenIDs), len(f.ledger.seen), len(tokens))
				}
				return
			}
			if ruleOf(err) != "approval" || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("got %q (%v), want rule approval saying %q", ruleOf(err), err, tt.text)
			}
			if len(f.ledger.seen) != 0 {
				t.Errorf("a refused Job recorded %d token IDs", len(f.ledger.seen))
			}
		})
	}
}

// TestApprovalTwoPersonReplay: after a pair of approvals admitted its Job, a Job with either token is refused
// as a replay, and a refused set burns none of its tokens: the fresh token of such a set still admits a Job.
// Dry runs of the pair consume nothing.
func TestApprovalTwoPersonReplay(t *testing.T) {
	f := newTwoPersonFixture(t)
	first, second := f.approval(t, f.key, 2), f.approval(t, f.second, 2)
	pair := f.applyJob(t, first, second)
	for range 2 {
		if _, err := f.checkJob(t, pair, Request{DryRun: true}); err != nil {
			t.Fatalf("dry run: %v", err)
		}
	}
	if _, err := f.checkJob(t, pair, Request{}); err != nil {
		t.Fatalf("the pair after dry runs: %v", err)
	}
	if want := sandbox.ApprovalJobName("terraform_apply", first+","+second); pair.Name != want {
		t.Errorf("the Job is named %s, not after its tokens (%s)", pair.Name, want)
	}
	if _, err := f.checkJob(t, pair, Request{}); !strings.Contains(fmtErr(err), "already used") {
		t.Fatalf("the pair again: %v", err)
	}
	fresh := f.approval(t, f.second, 2)
	if _, err := f.checkJob(t, f.applyJob(t, first, fresh), Request{}); !strings.Contains(fmtErr(err), "already used") {
		t.Fatalf("the first token again, with a fresh second: %v", err)
	}
	if _, err := f.checkJob(t, f.applyJob(t, f.approval(t, f.key, 2), second), Request{}); !strings.Contains(fmtErr(err), "already used") {
		t.Fatalf("the second token again, with a fresh first: %v", err)
	}
	if _, err := f.checkJob(t, f.applyJob(t, f.approval(t, f.key, 2), fresh), Request{}); err != nil {
		t.Fatalf("the fresh second token, not burnt by the refused set: %v", err)
	}
}

// TestApprovalTwoPersonPod: the Pod of a Job with two approvals is the Pod the policy renders for that Job.
func TestApprovalTwoPersonPod(t *testing.T) {
	f := newTwoPersonFixture(t)
	j := asServer(t, f.applyJob(t, f.approval(t, f.key, 2), f.approval(t, f.second, 2)))
	f.c.Cluster = &fakeCluster{jobs: []*batchv1.Job{j}}
	f.c.Pods = admittedJobs(t, j)
	r := Request{Operation: "CREATE", User: DefaultJobControllerUsers[0], Namespace: j.Namespace}
	if _, err := f.c.CheckPod(context.Background(), r, obj(t, podOf(t, j)), nil); err != nil {
		t.Fatalf("the Pod of a two-approval Job: %v", err)
	}
}

// FuzzApprovalAnnotation: whatever the approval-token annotation holds, split and joined again it is the same
// value (so the webhook renders back exactly what a Job declares), and no value other than the genuine pair
// is admitted.
func FuzzApprovalAnnotation(f *testing.F) {
	fx := newFixture(f)
	second, _ := approval.GenerateKey("second-approver")
	keys := fx.key.KeySet()
	_ = keys.Merge(second.KeySet())
	fx.c.SetKeys(keys)
	need2 := func(c *approval.Claims) { c.ApprovalsRequired = 2 }
	a, b := fx.token(f, fx.key, "terraform_apply", applyParams(), need2), fx.token(f, second, "terraform_apply", applyParams(), need2)
	genuine := a + "," + b
	for _, seed := range []string{genuine, a, b + "," + a, a + "," + a, a + ",", "," + b, ",", "", a + ",," + b, genuine + "," + a} {
		f.Add(seed)
	}
	inv := mustInvoke(f, fx.p, "terraform_apply", applyParams())
	f.Fuzz(func(t *testing.T, value string) {
		if got := contract.JoinApprovalTokens(contract.SplitApprovalTokens(value)); got != value {
			t.Fatalf("split and joined, %q is %q", value, got)
		}
		fx.c.Ledger = &memLedger{}
		_, _, err := fx.c.checkApproval(context.Background(), fx.p, inv, value, false)
		if err == nil && value != genuine && value != b+","+a {
			t.Fatalf("admitted %q", value)
		}
	})
}
