package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"testing"

	vaultapi "github.com/hashicorp/vault/api"
)

func TestVaultErrorClassification(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err      error
		is       error
		text     string
		retrying bool
	}{
		{&vaultapi.ResponseError{StatusCode: 403, Errors: []string{"permission denied"}}, ErrPermissionDenied, "permission denied", false},
		{&vaultapi.ResponseError{StatusCode: 403, Errors: []string{"2 errors occurred:\n\t* permission denied\n\t* invalid token\n\n"}}, ErrPermissionDenied, "permission denied; invalid token", false},
		{&vaultapi.ResponseError{StatusCode: 400, Errors: []string{"invalid role name \"x\""}}, ErrRejected, `invalid role name "x"`, false},
		{&vaultapi.ResponseError{StatusCode: 503, Errors: []string{"Vault is sealed"}}, ErrVaultUnavailable, "Vault is sealed", true},
		{&vaultapi.ResponseError{StatusCode: 429}, ErrVaultUnavailable, "vault answered HTTP 429", true},
		{&vaultapi.ResponseError{StatusCode: 502, RawError: true, Errors: []string{"<html>bad gateway</html>"}}, ErrVaultUnavailable, "vault answered HTTP 502", true},
		{&url.Error{Op: "Put", URL: "http://127.0.0.1:1/v1/x", Err: fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED)}, ErrVaultUnreachable,
			"vault at http://127.0.0.1:1 is unreachable: dial tcp 127.0.0.1:1: connection refused", true},
	} {
		err := vaultErr(ctx, "http://127.0.0.1:1", fmt.Errorf("wrapped: %w", tc.err))
		if !errors.Is(err, tc.is) {
			t.Errorf("%v is not %v", err, tc.is)
		}
		if err.Error() != tc.text {
			t.Errorf("text %q, want %q", err.Error(), tc.text)
		}
		if transient(err) != tc.retrying {
			t.Errorf("%v: transient = %v", err, !tc.retrying)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := vaultErr(cctx, "x", errors.New("boom")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if vaultErr(ctx, "x", nil) != nil {
		t.Error("nil error converted")
	}
}
