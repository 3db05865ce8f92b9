package policy

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
)

// Defaults applied by Decode to fields the file leaves empty. The approval lifetimes are the approval
// package's (approval.DefaultTokenTTL, approval.MaxTokenTTL, approval.DefaultRequestTTL): one set of
// constants, which the policy can only shorten.
const (
	MinCredentialTTL    = 10 * time.Minute // Kubernetes refuses shorter service-account tokens.
	DefaultStringMaxLen = 256
	// DefaultResultBytes bounds a tool's result unless its policy says otherwise.
	DefaultResultBytes = 256 << 10
	// MaxResultBytes is the most a result may declare: what the credential agent carries (a saved plan
	// travels in a result, base64).
	MaxResultBytes       = 4 << 20
	DefaultRunAsUser     = 65532
	DefaultVaultAudience = "vault"
	// Dedicated mount paths, so that agent-sandbox never shares (or rewrites) a mount somebody else uses.
	DefaultVaultAuthMount    = "agent-sandbox-jwt"
	DefaultVaultSecretsMount = "agent-sandbox-kubernetes"
	DefaultAPIServerCA       = "kube-root-ca.crt"
	// DefaultWarmIdleTimeout is how long a warm Pod waits for its claim.
	DefaultWarmIdleTimeout = 10 * time.Minute
)

// Error is a policy that cannot be used: every problem with its path in the document, one per line.
type Error struct {
	Problems []string
}

func (e *Error) Error() string { return strings.Join(e.Problems, "\n") }

func newError(errs field.ErrorList) *Error {
	e := &Error{}
	for _, fe := range errs {
		e.Problems = append(e.Problems, fe.Error())
	}
	return e
}

// Decode parses a policy document strictly: an unknown or duplicate field is an error naming its path. It
// applies defaults but does not validate; Compile does both.
func Decode(data []byte) (*Policy, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, &Error{Problems: []string{"not valid YAML: " + oneline.Fold(err.Error())}}
	}
	var p Policy
	strictErrs, err := sigsjson.UnmarshalStrict(js, &p, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, &Error{Problems: []string{oneline.Fold(strings.TrimPrefix(err.Error(), "json: "))}}
	}
	if len(strictErrs) > 0 {
		e := &Error{}
		for _, se := range strictErrs {
			e.Problems = append(e.Problems, oneline.Fold(se.Error()))
		}
		return nil, e
	}
	p.applyDefaults()
	return &p, nil
}

func (p *Policy) applyDefaults() {
	s := &p.Spec
	if s.Approval.TokenTTL.Duration == 0 {
		s.Approval.TokenTTL.Duration = approval.DefaultTokenTTL
	}
	if s.Approval.RequestTTL.Duration == 0 {
		s.Approval.RequestTTL.Duration = approval.DefaultRequestTTL
	}
	if s.Sandbox.RunAsUser == 0 {
		s.Sandbox.RunAsUser = DefaultRunAsUser
	}
	ca := &s.Sandbox.CredentialAgent
	if ca.VaultAudience == "" {
		ca.VaultAudience = DefaultVaultAudience
	}
	if ca.VaultAuthMount == "" {
		ca.VaultAuthMount = DefaultVaultAuthMount
	}
	if ca.VaultSecretsMount == "" {
		ca.VaultSecretsMount = DefaultVaultSecretsMount
	}
	if ca.APIServerCACertConfigMap == "" {
		ca.APIServerCACertConfigMap = DefaultAPIServerCA
	}
	if ca.Resources.CPU.IsZero() {
		ca.Resources.CPU = resource.MustParse("100m")
	}
	if ca.Resources.Memory.IsZero() {
		ca.Resources.Memory = resource.MustParse("64Mi")
	}
	for i := range s.Scopes {
		if s.Scopes[i].TTL.Duration == 0 {
			s.Scopes[i].TTL.Duration = MinCredentialTTL
		}
	}
	for i := range s.Tools {
		t := &s.Tools[i]
		if t.ServiceAccount == "" {
			t.ServiceAccount = "tool-" + strings.ReplaceAll(t.Name, "_", "-")
		}
		if t.Tier == TierApply {
			t.RequiresApproval = true
		}
		if t.Title == "" {
			t.Title = strings.ReplaceAll(t.Name, "_", " ")
		}
		t.Hints = t.Hints.withDefaults(t.Tier)
		if t.Result.MaxBytes == 0 {
			t.Result.MaxBytes = DefaultResultBytes
		}
		if w := t.WarmPool; w != nil {
			if w.Max == 0 {
				w.Max = w.Min + 1
			}
			if w.IdleTimeout.Duration == 0 {
				w.IdleTimeout.Duration = DefaultWarmIdleTimeout
			}
		}
		for j := range t.Parameters {
			if t.Parameters[j].Type == TypeString && t.Parameters[j].MaxLength == 0 {
				t.Parameters[j].MaxLength = DefaultStringMaxLen
			}
		}
	}
}

// describe renders a value for an error message without dumping large structures.
func describe(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
