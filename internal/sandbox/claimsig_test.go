package sandbox

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

const testClaim = `{"requestID":"req-0123456789ab","tool":"k8s_get_pod_status","namespace":"demo-app","params":{"namespace":"demo-app"},"argv":["/agent-sandbox","run","pod-status","--namespace=demo-app"],"auditHead":"5a5a"}`

func testKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// TestClaimSignature: a signature verifies for exactly the claim and the Pod it was made for, with the
// signer's key, and for nothing else.
func TestClaimSignature(t *testing.T) {
	pub, priv := testKey(t)
	otherPub, otherPriv := testKey(t)
	pod := PodIdentity{Namespace: "agent-sandbox", Name: "as-k8s-get-pod-status-w0123456789a-abcde", UID: "a1b2c3d4-0000-4000-8000-000000000001"}
	sig, err := SignClaim(priv, pod, testClaim)
	if err != nil {
		t.Fatal(err)
	}
	c, err := VerifyClaim([]ed25519.PublicKey{pub}, pod, testClaim, sig)
	if err != nil || c.RequestID != "req-0123456789ab" {
		t.Fatalf("the webhook's own signature did not verify: %v", err)
	}
	// Rotation: any of the keys.
	if _, err := VerifyClaim([]ed25519.PublicKey{otherPub, pub}, pod, testClaim, sig); err != nil {
		t.Fatalf("the signature did not verify with the second key: %v", err)
	}

	otherSig, _ := SignClaim(otherPriv, pod, testClaim)
	forged := strings.Replace(testClaim, `"--namespace=demo-app"]`, `"--namespace=demo-app","--all-namespaces"]`, 1)
	tests := []struct {
		name             string
		keys             []ed25519.PublicKey
		pod              PodIdentity
		claim, signature string
		want             error
	}{
		{"unsigned", []ed25519.PublicKey{pub}, pod, testClaim, "", ErrClaimUnsigned},
		{"signed by another key", []ed25519.PublicKey{pub}, pod, testClaim, otherSig, ErrClaimSignature},
		{"claim changed after signing", []ed25519.PublicKey{pub}, pod, forged, sig, ErrClaimSignature},
		{"another Pod's name", []ed25519.PublicKey{pub}, PodIdentity{pod.Namespace, pod.Name + "x", pod.UID}, testClaim, sig, ErrClaimSignature},
		{"a later Pod of the same name", []ed25519.PublicKey{pub}, PodIdentity{pod.Namespace, pod.Name, "a1b2c3d4-0000-4000-8000-000000000002"}, testClaim, sig, ErrClaimSignature},
		{"another namespace", []ed25519.PublicKey{pub}, PodIdentity{"default", pod.Name, pod.UID}, testClaim, sig, ErrClaimSignature},
		{"the dry-run marker", []ed25519.PublicKey{pub}, pod, testClaim, DryRunClaimSignature, ErrClaimSignature},
		{"not base64", []ed25519.PublicKey{pub}, pod, testClaim, "v1.!!!", ErrClaimSignature},
		{"another version", []ed25519.PublicKey{pub}, pod, testClaim, "v2." + strings.TrimPrefix(sig, "v1."), ErrClaimSignature},
		{"truncated", []ed25519.PublicKey{pub}, pod, testClaim, sig[:len(sig)-4], ErrClaimSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := VerifyClaim(tt.keys, tt.pod, tt.claim, tt.signature)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := VerifyClaim(nil, pod, testClaim, sig); err == nil {
		t.Fatal("verified without keys")
	}
	// The request ID is bound separately from the claim bytes: a message for another request ID differs.
	if string(claimSigningMessage(pod, "req-a", testClaim)) == string(claimSigningMessage(pod, "req-b", testClaim)) {
		t.Fatal("the request ID is not part of the signed message")
	}
	// Length prefixes: moving a byte from one field to the next changes the message.
	if string(claimSigningMessage(PodIdentity{"ab", "c", "u"}, "r", "x")) == string(claimSigningMessage(PodIdentity{"a", "bc", "u"}, "r", "x")) {
		t.Fatal("field boundaries are not part of the signed message")
	}
}

func TestClaimKeysFlag(t *testing.T) {
	a, _ := testKey(t)
	b, _ := testKey(t)
	got, err := ParseClaimKeys(FormatClaimKeys([]ed25519.PublicKey{a, b}))
	if err != nil || len(got) != 2 || !got[0].Equal(a) || !got[1].Equal(b) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for _, bad := range []string{"", " ", "abc", FormatClaimKeys([]ed25519.PublicKey{a}) + ",", "AAAA"} {
		if _, err := ParseClaimKeys(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestReadClaimFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	claim := filepath.Join(dir, "claim")
	write("claim", testClaim)
	write(contract.PodNamespaceFile, "agent-sandbox")
	write(contract.PodNameFile, "p")
	if _, _, err := ReadClaimFiles(claim); err == nil {
		t.Fatal("read without the Pod's UID")
	}
	write(contract.PodUIDFile, "u")
	sig, pod, err := ReadClaimFiles(claim)
	if err != nil || sig != "" || pod != (PodIdentity{"agent-sandbox", "p", "u"}) {
		t.Fatalf("got %q %v %v", sig, pod, err)
	}
	write(contract.ClaimSignatureFile, "v1.x")
	if sig, _, _ := ReadClaimFiles(claim); sig != "v1.x" {
		t.Fatalf("signature %q", sig)
	}
}
