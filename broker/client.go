package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	vaultapi "github.com/hashicorp/vault/api"
)

// Client is the credential agent's Vault client. After Login it holds a Vault token, which it never
// exposes: Mint uses it and RevokeSelf ends it.
type Client struct {
	vc  *vaultapi.Client
	now func() time.Time
}

// NewClient returns a client for the Vault at addr, trusting caFile if given (else the system roots). A
// namespace (Vault Enterprise, HCP Vault) makes every request in that namespace; empty is the root
// namespace.
func NewClient(addr, caFile, namespace string) (*Client, error) {
	vc, err := newVaultClient(addr, caFile, namespace)
	if err != nil {
		return nil, err
	}
	return &Client{vc: vc, now: time.Now}, nil
}

// Addr is Vault's address.
func (c *Client) Addr() string { return c.vc.Address() }

// Login logs in to the Kubernetes auth method at mount as role, with a service-account token (a JWT whose
// audience the role expects). It keeps the Vault token it receives and returns that token's lifetime.
func (c *Client) Login(ctx context.Context, mount, role string, jwt []byte) (time.Duration, error) {
	path := "auth/" + mountPath(mount) + "/login"
	s, err := vaultCall(ctx, c.vc, func(ctx context.Context) (*vaultapi.Secret, error) {
		return c.vc.Logical().WriteWithContext(ctx, path, map[string]any{"role": role, "jwt": string(jwt)})
	})
	if err != nil {
		return 0, err
	}
	if s == nil || s.Auth == nil || s.Auth.ClientToken == "" {
		return 0, &VaultError{Addr: c.Addr(), Status: 500, Messages: []string{"login answered without a token"}}
	}
	c.vc.SetToken(s.Auth.ClientToken)
	return time.Duration(s.Auth.LeaseDuration) * time.Second, nil
}

// Mint asks the Kubernetes secrets engine at mount for a credential of role in namespace. Vault creates a
// ServiceAccount, a Role with the role's rules and a RoleBinding there, and a token for the ServiceAccount;
// the lease is a child of the client's token.
func (c *Client) Mint(ctx context.Context, mount, role, namespace string) (*Credential, error) {
	path := mountPath(mount) + "/creds/" + role
	s, err := vaultCall(ctx, c.vc, func(ctx context.Context) (*vaultapi.Secret, error) {
		return c.vc.Logical().WriteWithContext(ctx, path, map[string]any{"kubernetes_namespace": namespace})
	})
	if err != nil {
		return nil, err
	}
	if s == nil || s.Data == nil {
		return nil, ErrNoCredential
	}
	token, _ := s.Data["service_account_token"].(string)
	if token == "" {
		return nil, ErrNoCredential
	}
	sa, _ := s.Data["service_account_name"].(string)
	ns, _ := s.Data["service_account_namespace"].(string)
	if ns == "" {
		ns = namespace
	}
	return &Credential{
		ServiceAccount: sa,
		Namespace:      ns,
		LeaseID:        s.LeaseID,
		TTL:            time.Duration(s.LeaseDuration) * time.Second,
		IssuedAt:       c.now(),
		Token:          token,
	}, nil
}

// RevokeSelf revokes the client's Vault token. Vault revokes every lease minted with it, which deletes the
// generated ServiceAccount and RoleBinding. The client forgets the token either way.
func (c *Client) RevokeSelf(ctx context.Context) error {
	if c.vc.Token() == "" {
		return errNotLoggedIn
	}
	err := vaultErr(ctx, c.Addr(), c.vc.Auth().Token().RevokeSelfWithContext(ctx, ""))
	if err == nil {
		c.vc.ClearToken()
	}
	return err
}

// token is the Vault token the client holds ("" before Login): the agent scrubs it by value, never shows it.
func (c *Client) token() string { return c.vc.Token() }

// forget drops the token without revoking it; its leases then end with their TTL.
func (c *Client) forget() { c.vc.ClearToken() }

var errNotLoggedIn = errors.New("not logged in to vault")

// retry calls f until it succeeds, fails with an error that is not transient, or the deadline passes;
// the wait between attempts grows from 250 ms to 4 s.
func retry(ctx context.Context, deadline time.Time, f func(context.Context) error) error {
	wait := 250 * time.Millisecond
	start := time.Now()
	for {
		err := f(ctx)
		if err == nil || !transient(err) {
			return err
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("gave up after %s: %w", time.Since(start).Round(time.Second), err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %w)", context.Cause(ctx), err)
		case <-t.C:
		}
		wait = min(wait*2, 4*time.Second)
	}
}
