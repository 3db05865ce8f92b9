package broker

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
)

// redactedToken is what every printable form of a Credential shows instead of its token.
const redactedToken = "<redacted>"

// Credential is one minted Kubernetes credential: a bearer token for a ServiceAccount that Vault created,
// with a RoleBinding of its scope's ClusterRole, for one action. Every printable form (fmt verbs, %#v, JSON, slog) shows
// token=<redacted>; only Token itself holds the value, for the one place that writes it to the kubeconfig.
type Credential struct {
	// ServiceAccount and Namespace name the generated ServiceAccount.
	ServiceAccount string
	Namespace      string
	// LeaseID is Vault's lease; revoking it deletes the ServiceAccount and RoleBinding.
	LeaseID string
	// TTL is the lease's lifetime as Vault granted it.
	TTL time.Duration
	// IssuedAt is when the credential was received.
	IssuedAt time.Time
	// Token is the bearer token. Never print or log it.
	Token string
}

// ExpiresAt is when the lease ends at the latest.
func (c Credential) ExpiresAt() time.Time { return c.IssuedAt.Add(c.TTL) }

// String prints the credential with its token redacted.
func (c Credential) String() string {
	return fmt.Sprintf("credential{service_account=%s/%s lease_id=%s ttl=%s token=%s}",
		c.Namespace, c.ServiceAccount, c.LeaseID, c.TTL, redactedToken)
}

// GoString is %#v: the same redaction.
func (c Credential) GoString() string {
	return fmt.Sprintf("broker.Credential{ServiceAccount:%q, Namespace:%q, LeaseID:%q, TTL:%d, token=%s}",
		c.ServiceAccount, c.Namespace, c.LeaseID, int64(c.TTL), redactedToken)
}

// Format makes every fmt verb (%v, %+v, %s, %d, %x, %#v, ...) print the redacted form: without it, verbs
// that do not call String would print the fields, token included.
func (c Credential) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = fmt.Fprint(f, c.GoString())
		return
	}
	_, _ = fmt.Fprint(f, c.String())
}

// credentialJSON is the JSON form of a Credential.
type credentialJSON struct {
	ServiceAccount string    `json:"service_account"`
	Namespace      string    `json:"namespace"`
	LeaseID        string    `json:"lease_id"`
	TTLSeconds     int64     `json:"ttl_seconds"`
	IssuedAt       time.Time `json:"issued_at"`
	Token          string    `json:"token"`
}

// MarshalJSON encodes the credential with its token redacted.
func (c Credential) MarshalJSON() ([]byte, error) {
	return json.Marshal(credentialJSON{
		ServiceAccount: c.ServiceAccount,
		Namespace:      c.Namespace,
		LeaseID:        c.LeaseID,
		TTLSeconds:     int64(c.TTL / time.Second),
		IssuedAt:       c.IssuedAt,
		Token:          redactedToken,
	})
}

// LogValue is the slog form, with the token redacted.
func (c Credential) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("service_account", c.ServiceAccount),
		slog.String("namespace", c.Namespace),
		slog.String("lease_id", c.LeaseID),
		slog.Duration("ttl", c.TTL),
		slog.String("token", redactedToken),
	)
}

var (
	_ fmt.Stringer   = Credential{}
	_ fmt.GoStringer = Credential{}
	_ fmt.Formatter  = Credential{}
	_ json.Marshaler = Credential{}
	_ slog.LogValuer = Credential{}
)
