package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

const testMCPUser = "system:serviceaccount:agent-sandbox:agent-sandbox-mcp"

// TestJobAnchor: an admitted call's Job leaves exactly one audit anchor — its request ID, the head it
// declared, its tool, Job, admission time and deadline — through the raw and the decoded entry point; a dry
// run leaves none; and a Job whose anchor cannot be recorded is refused.
func TestJobAnchor(t *testing.T) {
	for _, path := range []string{"raw", "decoded"} {
		t.Run(path, func(t *testing.T) {
			f := newFixture(t)
			j := f.job(t, "k8s_get_pod_status", podParams(), "")
			check := func(r Request) (*Decision, error) {
				r.Operation, r.User = "CREATE", testMCPUser
				if path == "raw" {
					return f.c.CheckJobRaw(context.Background(), r, f.raw(t, j), nil)
				}
				return f.checkJob(t, j, r)
			}
			if _, err := check(Request{DryRun: true}); err != nil {
				t.Fatalf("dry run: %v", err)
			}
			if n := len(f.anchors.all()); n != 0 {
				t.Fatalf("a dry run recorded %d anchors", n)
			}
			d, err := check(Request{})
			if err != nil {
				t.Fatalf("decision %+v, %v", d, err)
			}
			got := f.anchors.all()
			want := audit.Anchor{RequestID: testRequestID, Head: testHead, Tool: "k8s_get_pod_status", Job: j.Name, User: testMCPUser, Admitted: f.now, Deadline: 2 * time.Minute}
			if len(got) != 1 || got[0] != want {
				t.Fatalf("anchors %+v, want [%+v]", got, want)
			}
			if exp := f.anchors.expires[ledger.AnchorName(testRequestID, j.Name)]; !exp.Equal(f.now.Add(DefaultAnchorRetention)) {
				t.Errorf("anchor expires %s, want after the default retention", exp)
			}

			f.anchors.err = errors.New("etcd is full")
			if _, err := check(Request{}); ruleOf(err) != "audit-anchor" || !strings.Contains(err.Error(), "etcd is full") {
				t.Fatalf("anchor ledger failing: %v, want an audit-anchor denial", err)
			}
			f.c.Anchors = nil
			if _, err := check(Request{}); ruleOf(err) != "audit-anchor" {
				t.Fatalf("no anchor ledger: %v, want an audit-anchor denial", err)
			}
			if _, err := check(Request{DryRun: true}); err != nil {
				t.Fatalf("a dry run needs no anchor ledger: %v", err)
			}
		})
	}
}

// TestJobAnchorAfterApproval: a tool that needs approval is anchored once its approval was consumed; a
// refused approval leaves no anchor, and the retention is the Checker's.
func TestJobAnchorAfterApproval(t *testing.T) {
	f := newFixture(t)
	f.c.AnchorRetention = time.Hour
	tok := f.token(t, f.key, "terraform_apply", applyParams(), nil)
	j := f.job(t, "terraform_apply", applyParams(), tok)
	if _, err := f.checkJob(t, j, Request{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.checkJob(t, j, Request{}); ruleOf(err) != "approval" {
		t.Fatalf("replay: %v", err)
	}
	got := f.anchors.all()
	if len(got) != 1 || got[0].Job != j.Name || got[0].Tool != "terraform_apply" {
		t.Fatalf("anchors %+v, want the one admitted apply", got)
	}
	if exp := f.anchors.expires[ledger.AnchorName(testRequestID, j.Name)]; !exp.Equal(f.now.Add(time.Hour)) {
		t.Errorf("anchor expires %s, want after an hour", exp)
	}
}

// TestClaimAnchor: an admitted claim is anchored with its warm Job's name, the head the claim carries and
// the claimed Pod with the resourceVersion it was admitted against; a claim without a well-formed head is
// refused and anchors nothing.
func TestClaimAnchor(t *testing.T) {
	w := newWarmFixture(t)
	mcp := Request{User: testMCPUser}
	inv := mustInvoke(t, w.p, warmTestTool, podParams())
	for _, head := range []string{"", "HEAD", strings.ToUpper(testHead), testHead[2:]} {
		c, err := sandbox.RenderClaim(inv, testRequestID, nil, head)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.claim(t, mcp, withClaim(w.pod, c), w.pod); ruleOf(err) != "claim" {
			t.Errorf("claim with head %q: %v, want a claim denial", head, err)
		}
	}
	if n := len(w.anchors.all()); n != 0 {
		t.Fatalf("refused claims recorded %d anchors", n)
	}
	good := w.claimFor(t, warmTestTool, podParams(), testRequestID, "")
	if err := w.claim(t, mcp, withClaim(w.pod, good), w.pod); err != nil {
		t.Fatal(err)
	}
	got := w.anchors.all()
	want := audit.Anchor{RequestID: testRequestID, Head: testHead, Tool: warmTestTool, Job: w.job.Name, User: testMCPUser, Admitted: w.now, Deadline: 2 * time.Minute,
		Pod: w.pod.Name, PodUID: string(w.pod.UID), PodResourceVersion: w.pod.ResourceVersion}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("anchors %+v, want [%+v]", got, want)
	}
	// The same request, now cold (the warm Pod could not serve it): a second anchor, for the cold Job.
	cold := w.fixture.job(t, warmTestTool, podParams(), "")
	if _, err := w.checkJob(t, cold, Request{}); err != nil {
		t.Fatal(err)
	}
	if n := len(w.anchors.all()); n != 2 {
		t.Fatalf("%d anchors after the cold retry, want 2", n)
	}
}

// TestClaimPending: a warm Pod on which a claim was admitted and anchored, and not stored (the Pod is as it
// was), takes no claim of another request: refused as claim-pending before the claim ledger, so the call
// keeps its request ID for another Pod. The same Pod at another resourceVersion, or with the first claim
// voided, takes it; the first request again is a replay; an anchor ledger that cannot be read refuses.
func TestClaimPending(t *testing.T) {
	w := newWarmFixture(t)
	mcp := Request{User: testMCPUser}
	first := w.claimFor(t, warmTestTool, podParams(), testRequestID, "")
	if err := w.claim(t, mcp, withClaim(w.pod, first), w.pod); err != nil {
		t.Fatal(err)
	}
	// The API server never stored it: the Pod is still w.pod, at the same resourceVersion.
	const other = "req-bbbbbbbbbbbb"
	second := w.claimFor(t, warmTestTool, podParams(), other, "")
	err := w.claim(t, mcp, withClaim(w.pod, second), w.pod)
	if ruleOf(err) != "claim-pending" || !strings.Contains(err.Error(), testRequestID) {
		t.Fatalf("a second claim on the Pod as the first found it: %v, want claim-pending naming %s", err, testRequestID)
	}
	if w.claims.seen[other] {
		t.Fatal("the refused claim used up its request ID")
	}
	if err := w.claim(t, mcp, withClaim(w.pod, first), w.pod); ruleOf(err) != "claim-replayed" {
		t.Fatalf("the first request again: %v, want claim-replayed", err)
	}
	if n := len(w.anchors.all()); n != 1 {
		t.Fatalf("%d anchors, want the first claim's only", n)
	}

	w.anchors.err = errors.New("the API server is away")
	if err := w.claim(t, mcp, withClaim(w.pod, second), w.pod); ruleOf(err) != "claim-pending" || w.claims.seen[other] {
		t.Fatalf("with the anchors unreadable: %v, want claim-pending and nothing recorded", err)
	}
	w.anchors.err = nil

	// The Pod has changed since (the first claim can no longer be stored): it takes the second.
	changed := w.pod.DeepCopy()
	changed.ResourceVersion = "43"
	if err := w.claim(t, Request{User: testMCPUser, DryRun: true}, withClaim(changed, second), changed); err != nil {
		t.Fatalf("a claim on the Pod at another resourceVersion: %v", err)
	}
	// The pool voided the first claim: the Pod takes the second as it is.
	a := w.anchors.all()[0]
	if err := w.anchors.RecordVoid(context.Background(), audit.Void{Anchor: ledger.AnchorName(a.RequestID, a.Job), Evidence: audit.VoidPodEvicted}, w.now); err != nil {
		t.Fatal(err)
	}
	if err := w.claim(t, mcp, withClaim(w.pod, second), w.pod); err != nil {
		t.Fatalf("a claim on the Pod once the first was voided: %v", err)
	}
}
