package scrub

import (
	"strings"
	"testing"
)

// BenchmarkScrubString measures String on what it mostly sees: a short error message without secrets,
// one with secrets, and a 64 KiB stretch of tool output; by pattern only and with an exact secret.
func BenchmarkScrubString(b *testing.B) {
	inputs := []struct{ name, text string }{
		{"clean-message", `create job agent-sandbox/sandbox-kubectl-get-x7k2p: admission webhook "validate.agent-sandbox.dev" denied the request: spec.template.spec.runtimeClassName must be gvisor`},
		{"secret-message", `vault login failed: Authorization: Bearer ` + testJWT + ` token=` + testVault + ` url=postgres://app:hunter22@db/app`},
		{"tool-output-64KiB", strings.Repeat("kubernetes_deployment.web: Still creating... [10s elapsed] namespace=demo-app replicas=3\n", 64<<10/88)},
	}
	secret, err := New([]byte(issuedToken))
	if err != nil {
		b.Fatal(err)
	}
	for _, sc := range []struct {
		name string
		s    *Scrubber
	}{{"patterns", nil}, {"exact", secret}} {
		for _, in := range inputs {
			b.Run(sc.name+"/"+in.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(in.text)))
				for b.Loop() {
					_ = sc.s.String(in.text)
				}
			})
		}
	}
}
