package corpus

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// Listing is an Env whose cases can be listed but not submitted: it has no cluster and no Vault, and each
// of its clients points at an address nothing listens on. The rule registry's test (internal/rules) reads
// from it which rules the corpus has a case for.
func Listing(p *policy.Compiled) (*Env, error) {
	admin := &rest.Config{Host: "https://127.0.0.1:1"}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, err
	}
	env := &Env{Policy: p, Run: "listing", Identities: &Identities{Admin: cs, Attacker: cs, Edit: cs, MCP: cs, JobController: cs,
		GC: cs, NamespaceController: cs, EditUser: "listing-edit", MCPServiceAccount: "listing-mcp", admin: admin}}
	for _, k := range []**approval.PrivateKey{&env.Approver, &env.Other, &env.Second} {
		if *k, err = approval.GenerateKey("listing"); err != nil {
			return nil, err
		}
	}
	return env, nil
}
