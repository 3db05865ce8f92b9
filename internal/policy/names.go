package policy

import "strings"

// VaultPrefix starts the name of every Vault role and policy that agent-sandbox manages, so that
// `agent-sandbox vault configure` can prune what the policy no longer declares without touching anything else.
const VaultPrefix = "agent-sandbox-"

// VaultAuthRole is the Kubernetes auth role the tool's credential agent logs in with. It accepts only a
// token of the tool's ServiceAccount in the sandbox namespace, for the Vault audience, that the API server
// still vouches for (TokenReview: a Pod-bound token dies with its Pod).
func (t *Tool) VaultAuthRole() string { return VaultPrefix + dashed(t.Name) }

// VaultPolicy is the Vault policy attached to the tool's login: it may read only its own scope's creds path.
func (t *Tool) VaultPolicy() string { return VaultPrefix + "tool-" + dashed(t.Name) }

// VaultSecretsRole is the Kubernetes secrets engine role that mints the scope's credentials.
func (s *Scope) VaultSecretsRole() string { return VaultPrefix + s.Name }

func dashed(s string) string { return strings.ReplaceAll(s, "_", "-") }
