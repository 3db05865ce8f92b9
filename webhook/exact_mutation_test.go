package webhook

// Adversarial objects for the comparisons of the exactness check that no other test holds it to. Each test
// names the comparison it keeps: `make mutate-exactness` (scripts/mutate-exactness) removes or weakens
// each comparison in turn and requires some test to fail.

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// rawJob is the good Job of tool k8s_get_pod_status as the API server sends it (compact JSON, the form the
// fast path compares byte by byte).
func (f *fixture) rawJob(t *testing.T) string {
	t.Helper()
	return string(f.raw(t, f.job(t, "k8s_get_pod_status", podParams(), "")))
}

// checkRaw decides on raw as CheckJobRaw does for a CREATE.
func (f *fixture) checkRaw(t *testing.T, raw string) (*Decision, error) {
	t.Helper()
	return f.c.CheckJobRaw(context.Background(), Request{Operation: "CREATE"}, []byte(raw), nil)
}

// replaceAll replaces old by new in s, where old must occur n times (n < 0: at least once).
func replaceAll(t *testing.T, s, old, new string, n int) string {
	t.Helper()
	if c := strings.Count(s, old); c == 0 || (n >= 0 && c != n) {
		t.Fatalf("%q occurs %d times, want %d", old, c, n)
	}
	return strings.ReplaceAll(s, old, new)
}

// TestFastPathSlotHoldsExactlyTheValue: the UID, name and request ID go into the cached spec as JSON
// strings. A UID whose raw bytes close the string (the UID comes from the object's own metadata) must not
// smuggle members into the spec: here the selector and the template's labels gain app=web, which the slow
// path sees and refuses, so the fast path must not admit it either.
func TestFastPathSlotHoldsExactlyTheValue(t *testing.T) {
	f := newFixture(t)
	good := f.rawJob(t)
	if d, err := f.checkRaw(t, good); err != nil || !d.Fast {
		t.Fatalf("good Job: %+v %v", d, err)
	}
	uid := `x","app":"web`
	q, _ := json.Marshal(uid)
	bad := replaceAll(t, good, `"uid":"`+testJobUID+`"`, `"uid":`+string(q), 1)
	bad = replaceAll(t, bad, `"`+testJobUID+`"`, `"`+uid+`"`, 3)
	o, err := decodeObject([]byte(bad))
	if err != nil {
		t.Fatal(err)
	}
	if o.uid() != uid {
		t.Fatalf("uid %q", o.uid())
	}
	if _, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, o, nil); err == nil {
		t.Fatal("the slow path admitted a Job whose selector carries app=web")
	}
	if d, err := f.checkRaw(t, bad); err == nil {
		t.Fatalf("admitted (fast %v) a Job whose selector and template labels carry app=web through its UID", d.Fast)
	}
}

// TestJobWithoutUIDIsRefused: the expected selector and controller labels are derived from the Job's UID.
// Without one they would be derived from "", and a Job whose selector and labels say controller-uid=""
// would match them; the API server always sets a UID before validating admission, so none is refused.
func TestJobWithoutUIDIsRefused(t *testing.T) {
	f := newFixture(t)
	raw := replaceAll(t, f.rawJob(t), `"uid":"`+testJobUID+`",`, ``, 1)
	raw = replaceAll(t, raw, `"`+testJobUID+`"`, `""`, 3)
	o, err := decodeObject([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, o, nil); ruleOf(err) != "exact-metadata" {
		t.Errorf("slow path: %v, want exact-metadata", err)
	}
	if d, err := f.checkRaw(t, raw); err == nil {
		t.Errorf("a Job without a UID was admitted (fast %v)", d.Fast)
	}
}

// TestFastPathSlotMarkersInParameters: the fast path cuts the cached spec where the slot markers ("\x01name\x01"
// and so on) occur. A parameter value is the caller's, limited only by the policy's pattern; with a pattern
// that lets a marker through and an argument that is the value alone, the caller could place a slot in the
// command, and the fast path would admit a Job whose command holds the Job's name where the rendering (and
// the approval, and the audit) says "\x01name\x01". The slow path refuses that Job; the fast path must too.
func TestFastPathSlotMarkersInParameters(t *testing.T) {
	f := newFixture(t)
	data, err := os.ReadFile(shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	doc = replaceAll(t, doc, `"--selector={{label_selector}}"`, `"{{label_selector}}"`, 1)
	doc = replaceAll(t, doc, `pattern: '[A-Za-z0-9]([A-Za-z0-9._/=!, ()-]*[A-Za-z0-9)])?'`, `pattern: '.+'`, 1)
	p, err := policy.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	f.c.SetPolicy(p)
	params := map[string]any{"namespace": "demo-app", "label_selector": "\x01name\x01"}
	raw := string(f.raw(t, f.job(t, "k8s_get_pod_status", params, "")))
	name := sandbox.JobName("k8s_get_pod_status", testRequestID)
	bad := replaceAll(t, raw, `"\u0001name\u0001"`, `"`+name+`"`, 1)
	o, err := decodeObject([]byte(bad))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, o, nil); ruleOf(err) != "exact-command" {
		t.Errorf("slow path: %v, want exact-command", err)
	}
	if d, err := f.checkRaw(t, bad); err == nil {
		t.Errorf("admitted (fast %v) a Job whose command differs from its parameters", d.Fast)
	}
	// The rendering itself, marker and all, is still admitted (on the slow path).
	if _, err := f.checkRaw(t, raw); err != nil {
		t.Errorf("the rendering: %v", err)
	}
}
