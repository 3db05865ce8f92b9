package broker

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"

	"github.com/go-jose/go-jose/v4"
	"k8s.io/client-go/kubernetes"
)

// clusterTokenKeys reads the cluster's service-account token issuer and the public keys that verify its
// tokens from the API server's OIDC discovery endpoints, the keys as PEM (what Vault's JWT auth method
// takes as jwt_validation_pubkeys), sorted so that an unchanged key set compares equal.
func clusterTokenKeys(ctx context.Context, kube kubernetes.Interface) (string, []string, error) {
	rc := kube.Discovery().RESTClient()
	raw, err := rc.Get().AbsPath("/.well-known/openid-configuration").DoRaw(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("read the cluster's service-account issuer (/.well-known/openid-configuration): %w", err)
	}
	var disc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(raw, &disc); err != nil || disc.Issuer == "" {
		return "", nil, fmt.Errorf("the cluster's OIDC discovery document names no issuer: %v", err)
	}
	raw, err = rc.Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("read the cluster's service-account signing keys (/openid/v1/jwks): %w", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		return "", nil, fmt.Errorf("decode the cluster's signing keys: %w", err)
	}
	var pems []string
	for _, k := range set.Keys {
		der, err := x509.MarshalPKIXPublicKey(k.Key)
		if err != nil {
			return "", nil, fmt.Errorf("signing key %s: %w", k.KeyID, err)
		}
		// Vault stores a key without its trailing newline; write it that way, so that an unchanged key
		// set compares equal.
		pems = append(pems, strings.TrimSpace(string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))))
	}
	if len(pems) == 0 {
		return "", nil, fmt.Errorf("the cluster publishes no service-account signing key")
	}
	slices.Sort(pems)
	return disc.Issuer, pems, nil
}
