package webhook

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agent-sandbox/agent-sandbox/internal/rules"
)

// TestReloadKeepsTheLastGoodPolicy: a policy that does not compile is refused with the rule's path and the
// running one keeps serving; a good change is picked up.
func TestReloadKeepsTheLastGoodPolicy(t *testing.T) {
	data, err := os.ReadFile(shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, _ := NewMetrics(prometheus.NewRegistry())
	c := &Checker{}
	src := &FileSource{PolicyPath: path, KeysPath: filepath.Join(t.TempDir(), "none.jwks.json"), Checker: c, Metrics: m, Log: logr.Discard()}
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	good := c.Policy().Version

	bad := strings.Replace(string(data), "settings.runtimeClassName != '' &&", "settings.runtimeClassName != '' &&&", 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	changed, err := src.reloadPolicy()
	if changed || err == nil || !strings.Contains(err.Error(), "spec.admissionRules[0].expression") {
		t.Fatalf("a policy that does not compile: changed=%v err=%v", changed, err)
	}
	if c.Policy().Version != good {
		t.Fatal("the bad policy replaced the good one")
	}
	if got := testutil.ToFloat64(m.reloads.WithLabelValues("policy", "error")); got != 1 {
		t.Errorf("reload errors counted %v, want 1", got)
	}

	better := strings.Replace(string(data), "maxDeadline: 15m", "maxDeadline: 14m", 1)
	if err := os.WriteFile(path, []byte(better), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := src.reloadPolicy(); !changed || err != nil {
		t.Fatalf("a good change: changed=%v err=%v", changed, err)
	}
	if c.Policy().Version == good || c.Policy().Spec.Sandbox.MaxDeadline.Minutes() != 14 {
		t.Fatal("the good change was not loaded")
	}
}

// TestPolicySwapIsAtomic: decisions keep reading a whole policy while reloads swap it (run with -race).
func TestPolicySwapIsAtomic(t *testing.T) {
	c := &Checker{}
	a, b := loadPolicy(t), loadPolicy(t)
	c.SetPolicy(a)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 1000; i++ {
			if i%2 == 0 {
				c.SetPolicy(b)
			} else {
				c.SetPolicy(a)
			}
		}
	}()
	for i := 0; i < 1000; i++ {
		if p := c.Policy(); p != a && p != b {
			t.Fatal("a decision saw a policy that was never set")
		}
	}
	<-done
}

// TestReloadTakesRemovedKeysOutOfTrust: an approver key removed from the keys file stops being trusted at the
// next reload, whether the file is gone (the chart renders an empty set as no file), holds an empty set or
// does not parse. A stolen key must not keep signing approvals until the webhook happens to restart.
func TestReloadTakesRemovedKeysOutOfTrust(t *testing.T) {
	policyYAML, err := os.ReadFile(shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		remove func(path string) error
	}{
		{"the file is gone", os.Remove},
		{"an empty set", func(p string) error { return os.WriteFile(p, []byte(`{"keys":[]}`), 0o644) }},
		{"a set that does not parse", func(p string) error { return os.WriteFile(p, []byte(`{"keys":[{"kty":"OKP"`), 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			dir := t.TempDir()
			policyPath, keysPath := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "approvers.jwks.json")
			jwks, err := f.key.KeySet().Encode()
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(policyPath, policyYAML, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(keysPath, jwks, 0o644); err != nil {
				t.Fatal(err)
			}
			m, _ := NewMetrics(prometheus.NewRegistry())
			src := &FileSource{PolicyPath: policyPath, KeysPath: keysPath, Checker: f.c, Metrics: m, Log: logr.Discard()}
			if err := src.Load(); err != nil {
				t.Fatal(err)
			}
			apply := func() error {
				tok := f.token(t, f.key, "terraform_apply", applyParams(), nil)
				_, err := f.checkJob(t, f.job(t, "terraform_apply", applyParams(), tok), Request{})
				return err
			}
			if err := apply(); err != nil {
				t.Fatalf("with the key trusted: %v", err)
			}

			if err := tc.remove(keysPath); err != nil {
				t.Fatal(err)
			}
			if changed, err := src.reloadKeys(); !changed || err == nil {
				t.Errorf("reload after the key's removal: changed=%v err=%v, want a change and an error", changed, err)
			}
			if err := apply(); ruleOf(err) != string(rules.ApprovalKeys) {
				t.Fatalf("an approval signed by the removed key: %v, want rule %s", err, rules.ApprovalKeys)
			}

			// The key put back is trusted again.
			if err := os.WriteFile(keysPath, jwks, 0o644); err != nil {
				t.Fatal(err)
			}
			if changed, err := src.reloadKeys(); !changed || err != nil {
				t.Fatalf("reload with the key back: changed=%v err=%v", changed, err)
			}
			if err := apply(); err != nil {
				t.Fatalf("with the key back: %v", err)
			}
		})
	}
}

// TestDenialLogsAreScrubbed: a denial's reason may quote what the request carried, an approval token among
// it; the API server gets it scrubbed, and so does the webhook's own log.
func TestDenialLogsAreScrubbed(t *testing.T) {
	const token = "eyJhbGciOiJFZERTQSIsImtpZCI6ImEifQ.eyJzdWIiOiJyZXEtMTIzIn0.c2lnbmF0dXJlc2lnbmF0dXJl"
	var logged strings.Builder
	ctx := logr.NewContext(context.Background(), funcr.New(func(prefix, args string) { logged.WriteString(args + "\n") }, funcr.Options{}))
	m, _ := NewMetrics(prometheus.NewRegistry())
	denial := deny(rules.Approval, "approval %s is for another call", token)
	if _, err := record(ctx, m, "job", Request{Operation: "CREATE"}, time.Now(), nil, denial); err == nil {
		t.Fatal("the denial was lost")
	}
	if _, err := record(ctx, m, "job", Request{Operation: "CREATE"}, time.Now(), nil, fmt.Errorf("ledger: %s", token)); err == nil {
		t.Fatal("the error was lost")
	}
	if strings.Contains(logged.String(), token[:40]) || !strings.Contains(logged.String(), "admission denied") {
		t.Fatalf("the webhook's log holds the token, or no denial:\n%s", logged.String())
	}
}
