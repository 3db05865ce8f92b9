package broker

import (
	"context"
	"fmt"
	"strings"
	"time"

	vaultapi "github.com/hashicorp/vault/api"
)

// vaultTimeout bounds one HTTP request to Vault.
const vaultTimeout = 15 * time.Second

// newVaultClient builds a Vault client for addr. It never takes a token or a namespace from the environment
// (VAULT_TOKEN, VAULT_NAMESPACE): the caller sets the ones it means to use. namespace, when not empty, is the
// Vault Enterprise / HCP Vault namespace every request is made in (the X-Vault-Namespace header); empty is
// the root namespace. Retries are the caller's business, so the client makes none and a failure is reported
// at once.
func newVaultClient(addr, caFile, namespace string) (*vaultapi.Client, error) {
	cfg := vaultapi.DefaultConfig()
	if cfg.Error != nil {
		return nil, fmt.Errorf("vault client configuration: %w", cfg.Error)
	}
	cfg.Address = addr
	cfg.MaxRetries = 0
	cfg.Timeout = vaultTimeout
	if caFile != "" {
		if err := cfg.ConfigureTLS(&vaultapi.TLSConfig{CACert: caFile}); err != nil {
			return nil, fmt.Errorf("vault CA %s: %w", caFile, err)
		}
	}
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("vault client: %w", err)
	}
	c.ClearToken()
	// A namespace from the environment would silently redirect every path: only the caller's counts.
	c.ClearNamespace()
	if namespace = strings.Trim(namespace, "/"); namespace != "" {
		c.SetNamespace(namespace)
	}
	return c, nil
}

// vaultCall runs one request and converts its error.
func vaultCall[T any](ctx context.Context, c *vaultapi.Client, f func(context.Context) (T, error)) (T, error) {
	v, err := f(ctx)
	return v, vaultErr(ctx, c.Address(), err)
}

// mountPath is a mount path as used inside request paths: no leading or trailing slash.
func mountPath(path string) string { return strings.Trim(path, "/") }
