package sandbox

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// A warm Pod runs only what admission admitted (issue 22). The admission webhook signs every claim it sees
// on the main pods resource (contract.AnnotationClaimSignature) and admits the claim only with its own valid
// signature; the warm Pod's entry point and credential agent verify that signature against the webhook's
// public keys, which the webhook's injection rendered into the Pod's own command line, before they mint or
// run anything. A claim written any other way — through pods/status, which the API server lets change
// annotations without the pods admission webhooks seeing it — carries no valid signature and is refused in
// the Pod. The signature binds the claim's exact bytes to one Pod (namespace, name, UID) and to the claim's
// request ID, so it cannot be moved to another Pod, or to a later Pod of the same name.

// claimSignatureContext separates claim signatures from anything else an Ed25519 key might ever sign.
const claimSignatureContext = "agent-sandbox.dev/claim-signature/v1"

// claimSignaturePrefix starts a signature annotation: the format's version, then the raw base64url signature.
const claimSignaturePrefix = "v1."

// DryRunClaimSignature is what the webhook writes instead of a signature on a server-side dry run: a dry
// run's response is returned to the client, and a real signature in it would be a signed claim that no
// ledger recorded. It verifies nowhere.
const DryRunClaimSignature = "unsigned: dry run"

// PodIdentity names the Pod a claim signature is bound to.
type PodIdentity struct {
	Namespace, Name, UID string
}

func (p PodIdentity) String() string { return p.Namespace + "/" + p.Name + " (UID " + p.UID + ")" }

// claimSigningMessage is the byte string a claim signature covers: the context, then each field
// length-prefixed, so no two different (Pod, request ID, claim) tuples give the same message.
func claimSigningMessage(pod PodIdentity, requestID, claim string) []byte {
	var b []byte
	for _, f := range []string{claimSignatureContext, pod.Namespace, pod.Name, pod.UID, requestID, claim} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// SignClaim returns the AnnotationClaimSignature value for claim (the exact annotation bytes) on pod.
func SignClaim(key ed25519.PrivateKey, pod PodIdentity, claim string) (string, error) {
	if len(key) != ed25519.PrivateKeySize {
		return "", errors.New("the claim signing key is not an Ed25519 private key")
	}
	c, err := ParseClaim(claim)
	if err != nil {
		return "", err
	}
	if pod.Namespace == "" || pod.Name == "" || pod.UID == "" {
		return "", fmt.Errorf("cannot sign a claim for a Pod without namespace, name and UID (%s)", pod)
	}
	sig := ed25519.Sign(key, claimSigningMessage(pod, c.RequestID, claim))
	return claimSignaturePrefix + base64.RawURLEncoding.EncodeToString(sig), nil
}

// ErrClaimUnsigned and ErrClaimSignature are the two ways a claim fails verification.
var (
	ErrClaimUnsigned  = errors.New("the claim carries no signature of the admission webhook")
	ErrClaimSignature = errors.New("the claim's signature is not the admission webhook's for this Pod")
)

// VerifyClaim checks that signature is a valid signature, by one of keys, of claim on pod, and returns the
// parsed claim. It is what a warm Pod checks before it mints or runs anything, and what the webhook checks
// before it admits a claim.
func VerifyClaim(keys []ed25519.PublicKey, pod PodIdentity, claim, signature string) (*Claim, error) {
	c, err := ParseClaim(claim)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no claim verification keys: every claim is refused")
	}
	if signature == "" {
		return nil, fmt.Errorf("%w (request %s on Pod %s)", ErrClaimUnsigned, c.RequestID, pod)
	}
	raw, ok := strings.CutPrefix(signature, claimSignaturePrefix)
	sig, err := base64.RawURLEncoding.DecodeString(raw)
	if !ok || err != nil || len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("%w: it is not a %s<base64url Ed25519 signature> (request %s on Pod %s)", ErrClaimSignature, claimSignaturePrefix, c.RequestID, pod)
	}
	msg := claimSigningMessage(pod, c.RequestID, claim)
	for _, k := range keys {
		if len(k) == ed25519.PublicKeySize && ed25519.Verify(k, msg, sig) {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: it does not verify with any of its %d key(s) for request %s on Pod %s", ErrClaimSignature, len(keys), c.RequestID, pod)
}

// FormatClaimKeys renders public keys as the --claim-keys flag value: comma-separated raw base64url.
func FormatClaimKeys(keys []ed25519.PublicKey) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = base64.RawURLEncoding.EncodeToString(k)
	}
	return strings.Join(parts, ",")
}

// ParseClaimKeys reads a --claim-keys flag value. An empty value or a malformed key is an error: a warm
// Pod without the webhook's keys cannot tell an admitted claim from a forged one.
func ParseClaimKeys(s string) ([]ed25519.PublicKey, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("no claim verification keys (--claim-keys): a warm Pod cannot verify its claim")
	}
	var keys []ed25519.PublicKey
	for i, part := range strings.Split(s, ",") {
		b, err := base64.RawURLEncoding.DecodeString(part)
		if err != nil || len(b) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("claim verification key %d is not a base64url Ed25519 public key", i+1)
		}
		keys = append(keys, ed25519.PublicKey(b))
	}
	return keys, nil
}

// ReadClaimFiles reads what a warm Pod's claim volume holds next to the claim at claimPath: the claim's
// signature and the Pod's own identity (downward API). A missing or empty identity file is an error.
func ReadClaimFiles(claimPath string) (signature string, pod PodIdentity, err error) {
	dir := filepath.Dir(claimPath)
	read := func(name string, must bool) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !(os.IsNotExist(err) && !must) {
			return "", fmt.Errorf("read %s of the claim volume: %w", name, err)
		}
		v := strings.TrimSpace(string(b))
		if must && v == "" {
			return "", fmt.Errorf("the claim volume's %s is empty", name)
		}
		return v, nil
	}
	if signature, err = read(contract.ClaimSignatureFile, false); err != nil {
		return "", pod, err
	}
	if pod.Namespace, err = read(contract.PodNamespaceFile, true); err != nil {
		return "", pod, err
	}
	if pod.Name, err = read(contract.PodNameFile, true); err != nil {
		return "", pod, err
	}
	if pod.UID, err = read(contract.PodUIDFile, true); err != nil {
		return "", pod, err
	}
	return signature, pod, nil
}
