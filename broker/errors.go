package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
)

// Sentinel errors. Every error this package returns from a Vault call is a *VaultError that matches one of
// the first four with errors.Is.
var (
	// ErrVaultUnreachable: no HTTP answer from Vault at all (connection refused, DNS, timeout).
	ErrVaultUnreachable = errors.New("vault is unreachable")
	// ErrVaultUnavailable: Vault answered but cannot serve now (5xx, 429: sealed, standby, overloaded).
	ErrVaultUnavailable = errors.New("vault is unavailable")
	// ErrPermissionDenied: Vault refused the token or the login (HTTP 403).
	ErrPermissionDenied = errors.New("permission denied")
	// ErrRejected: Vault rejected the request itself (another 4xx), for example a namespace the role
	// does not allow or a login role that does not exist.
	ErrRejected = errors.New("rejected by vault")

	// ErrTokenRefused: the token given to Configure is not valid at all.
	ErrTokenRefused = errors.New("the Vault token was refused")
	// ErrMountConflict: the mount path the policy names is taken by a different kind of engine.
	ErrMountConflict = errors.New("mount path is used by another engine")
	// ErrNotManaged: an ACL policy with a name agent-sandbox uses exists and was not written by
	// agent-sandbox (its text lacks managedPolicyHeader); Configure neither overwrites nor deletes it.
	ErrNotManaged = errors.New("vault object was not created by agent-sandbox")
	// ErrReviewerTokenMissing: the token controller did not fill Vault's service-account token Secret.
	ErrReviewerTokenMissing = errors.New("service-account token secret was not filled")
	// ErrNamespaceMissing: a namespace a tool targets does not exist, so Vault cannot be given rights there.
	ErrNamespaceMissing = errors.New("target namespace does not exist")
	// ErrNoCredential: Vault answered a creds request without a token.
	ErrNoCredential = errors.New("vault returned no credential")
)

// VaultError is a failed Vault request, reduced to what is safe and useful to print: Vault's own messages
// (never a request body), or the network error for an unreachable server.
type VaultError struct {
	// Addr is Vault's address.
	Addr string
	// Status is the HTTP status, 0 when Vault did not answer.
	Status int
	// Messages are Vault's error messages.
	Messages []string
	// Err is the transport error when Status is 0.
	Err error
}

func (e *VaultError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("vault at %s is unreachable: %v", e.Addr, e.Err)
	}
	if len(e.Messages) == 0 {
		return fmt.Sprintf("vault answered HTTP %d", e.Status)
	}
	return strings.Join(e.Messages, "; ")
}

// Unwrap returns the transport error, if any.
func (e *VaultError) Unwrap() error { return e.Err }

// Is maps the HTTP status onto the package's sentinels.
func (e *VaultError) Is(target error) bool {
	switch target {
	case ErrVaultUnreachable:
		return e.Status == 0
	case ErrVaultUnavailable:
		return e.Status >= 500 || e.Status == http.StatusTooManyRequests
	case ErrPermissionDenied:
		return e.Status == http.StatusForbidden
	case ErrRejected:
		return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusForbidden && e.Status != http.StatusTooManyRequests
	}
	return false
}

// transient reports whether retrying the same request later may succeed. A certificate that does not
// verify will not verify on the next attempt either.
func transient(err error) bool {
	if isCertificateError(err) {
		return false
	}
	return errors.Is(err, ErrVaultUnreachable) || errors.Is(err, ErrVaultUnavailable)
}

func isCertificateError(err error) bool {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
	)
	return errors.As(err, &verr) || errors.As(err, &uerr) || errors.As(err, &herr) || errors.As(err, &cerr)
}

// vaultErr converts an error from vaultapi into a *VaultError; when ctx is done it returns the context's
// cause instead.
func vaultErr(ctx context.Context, addr string, err error) error {
	if err == nil {
		return nil
	}
	var re *vaultapi.ResponseError
	if errors.As(err, &re) {
		msgs := make([]string, 0, len(re.Errors))
		for _, m := range re.Errors {
			msgs = append(msgs, splitMultiError(m)...)
		}
		if re.RawError {
			// An unparsable body (a proxy's HTML page, say) is not worth printing.
			msgs = nil
		}
		return &VaultError{Addr: addr, Status: re.StatusCode, Messages: msgs}
	}
	if ctx.Err() != nil {
		// Our own cancellation (SIGTERM, a deadline), not Vault's fault.
		return context.Cause(ctx)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return &VaultError{Addr: addr, Err: ue.Err}
	}
	return &VaultError{Addr: addr, Err: err}
}

// splitMultiError turns Vault's "2 errors occurred:\n\t* permission denied\n\t* invalid token" into its
// items; any other message becomes one line.
func splitMultiError(m string) []string {
	m = strings.TrimSpace(m)
	if m == "" {
		return nil
	}
	head, rest, ok := strings.Cut(m, "\n")
	if !ok || !strings.HasSuffix(head, " occurred:") {
		return []string{oneline.Fold(m)}
	}
	var out []string
	for _, line := range strings.Split(rest, "\n") {
		if item, ok := strings.CutPrefix(strings.TrimSpace(line), "* "); ok && strings.TrimSpace(item) != "" {
			out = append(out, oneline.Fold(item))
		}
	}
	if len(out) == 0 {
		return []string{oneline.Fold(m)}
	}
	return out
}
