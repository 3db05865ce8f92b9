package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
)

func (f *fixture) raw(t testing.TB, j *batchv1.Job) []byte {
	t.Helper()
	b, err := json.Marshal(asServer(t, j))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFastPathTakesTheRendering: a Job that is exactly its rendering is decided on the fast path, again
// and again (the second time from the cache), for each tool.
func TestFastPathTakesTheRendering(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		tool   string
		params map[string]any
		token  bool
	}{
		{"k8s_get_pod_status", podParams(), false},
		{"terraform_plan", map[string]any{"workspace": "k8s-demo", "source": "tfws-0123456789abcdef0123"}, false},
		{"terraform_apply", applyParams(), true},
	} {
		for i := range 2 {
			tok := ""
			if tc.token {
				tok = f.token(t, f.key, tc.tool, tc.params, nil)
			}
			d, err := f.c.CheckJobRaw(context.Background(), Request{Operation: "CREATE"}, f.raw(t, f.job(t, tc.tool, tc.params, tok)), nil)
			if err != nil || !d.Fast {
				t.Fatalf("%s, call %d: decision %+v, err %v; want the fast path", tc.tool, i+1, d, err)
			}
		}
	}
}

// TestFastPathRefusesEveryViolation runs every mutation of TestCheckJobViolations through the raw entry
// point: none may be admitted, and each is refused for the same reason as on the slow path.
func TestFastPathRefusesEveryViolation(t *testing.T) {
	f := newFixture(t)
	// Warm the cache with the good rendering first, so that the mutated Jobs meet a cached expectation.
	if d, err := f.c.CheckJobRaw(context.Background(), Request{Operation: "CREATE"}, f.raw(t, f.job(t, "k8s_get_pod_status", podParams(), "")), nil); err != nil || !d.Fast {
		t.Fatalf("good Job: %+v %v", d, err)
	}
	for _, tt := range violationCases() {
		j := f.job(t, "k8s_get_pod_status", podParams(), "")
		tt.mutate(j)
		slowD, slowErr := f.checkJob(t, j, Request{})
		d, err := f.c.CheckJobRaw(context.Background(), Request{Operation: "CREATE"}, f.raw(t, j), nil)
		if err == nil {
			t.Errorf("%s: admitted by CheckJobRaw (fast %v)", tt.name, d.Fast)
			continue
		}
		if slowErr == nil || ruleOf(err) != ruleOf(slowErr) {
			t.Errorf("%s: raw path says %v, slow path says %v / %v", tt.name, err, slowD, slowErr)
		}
	}
}

// FuzzFastPathNeverAdmitsMore changes bytes of a good Job's JSON: whatever the fast path admits, the slow
// path (full decoding and field-by-field comparison) must admit too.
func FuzzFastPathNeverAdmitsMore(f *testing.F) {
	fx := newFixture(f)
	good := fx.raw(f, fx.job(f, "k8s_get_pod_status", podParams(), ""))
	f.Add(good, 0, byte(0))
	f.Add(good, len(good)/2, byte('x'))
	f.Add([]byte(strings.Replace(string(good), `"status":{}`, `"status":{},"extra":1`, 1)), 0, byte(0))
	f.Fuzz(func(t *testing.T, raw []byte, at int, b byte) {
		if len(raw) > 0 && at >= 0 && at < len(raw) && b != 0 {
			raw = append([]byte(nil), raw...)
			raw[at] = b
		}
		d, err := fx.c.CheckJobRaw(context.Background(), Request{Operation: "CREATE"}, raw, nil)
		if err != nil || !d.Fast {
			return
		}
		o, derr := decodeObject(raw)
		if derr != nil {
			t.Fatalf("the fast path admitted undecodable JSON %q", raw)
		}
		if _, err := fx.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, o, nil); err != nil {
			t.Fatalf("the fast path admitted what the slow path refuses (%v):\n%s", err, raw)
		}
	})
}
