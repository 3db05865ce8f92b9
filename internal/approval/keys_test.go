package approval

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
)

// testWorkFactor keeps scrypt cheap in tests.
const testWorkFactor = 10

var testPassphrase = []byte("correct horse battery staple")

func mustKey(t testing.TB, id string) *PrivateKey {
	t.Helper()
	k, err := GenerateKey(id)
	if err != nil {
		t.Fatalf("GenerateKey: %v", err)
	}
	return k
}

func TestGenerateKeyIDs(t *testing.T) {
	k := mustKey(t, "")
	if got, want := k.KeyID(), DeriveKeyID(k.Public()); got != want {
		t.Errorf("default key ID = %q, want %q", got, want)
	}
	if !strings.HasPrefix(k.KeyID(), "approver-") || len(k.KeyID()) != len("approver-")+16 {
		t.Errorf("default key ID %q is not approver- and 16 hex digits", k.KeyID())
	}
	if got := mustKey(t, "alice.laptop_1").KeyID(); got != "alice.laptop_1" {
		t.Errorf("given key ID = %q", got)
	}
	for _, bad := range []string{"a b", "a/b", "é", strings.Repeat("a", 65), "a\n"} {
		if _, err := GenerateKey(bad); err == nil {
			t.Errorf("GenerateKey(%q) accepted an invalid key ID", bad)
		}
	}
}

func TestPrivateKeyDoesNotPrintItself(t *testing.T) {
	k := mustKey(t, "alice")
	secret := fmt.Sprintf("%x", []byte(k.key))
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(format, k); strings.Contains(out, secret[:16]) || !strings.Contains(out, "alice") {
			t.Errorf("%s prints %q", format, out)
		}
	}
}

func TestKeyFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "approver.key")
	k := mustKey(t, "alice")
	if err := k.WriteFile(path, testPassphrase, WithScryptWorkFactor(testWorkFactor)); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode = %v, want 0600", st.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "-----BEGIN AGE ENCRYPTED FILE-----") {
		t.Errorf("key file is not armored age:\n%s", data)
	}
	if strings.Contains(string(data), "PRIVATE KEY") {
		t.Errorf("key file holds a plaintext PEM")
	}

	got, err := LoadPrivateKey(path, testPassphrase)
	if err != nil {
		t.Fatalf("LoadPrivateKey: %v", err)
	}
	if got.KeyID() != "alice" || !got.Public().Equal(k.Public()) || !got.key.Equal(k.key) {
		t.Errorf("loaded key %v differs from written key %v", got, k)
	}

	if _, err := LoadPrivateKey(path, []byte("wrong passphrase!!")); !errors.Is(err, ErrBadPassphrase) {
		t.Errorf("wrong passphrase: err = %v, want ErrBadPassphrase", err)
	}
	if _, err := LoadPrivateKey(path, nil); !errors.Is(err, ErrBadPassphrase) {
		t.Errorf("empty passphrase: err = %v, want ErrBadPassphrase", err)
	}
	if _, err := LoadPrivateKey(filepath.Join(dir, "missing"), testPassphrase); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v, want fs.ErrNotExist", err)
	}

	other := mustKey(t, "bob")
	if err := other.WriteFile(path, testPassphrase, WithScryptWorkFactor(testWorkFactor)); !errors.Is(err, fs.ErrExist) {
		t.Errorf("overwrite without force: err = %v, want fs.ErrExist", err)
	}
	if got, _ := LoadPrivateKey(path, testPassphrase); got == nil || got.KeyID() != "alice" {
		t.Errorf("refused overwrite changed the file")
	}
	if err := other.WriteFile(path, testPassphrase, WithScryptWorkFactor(testWorkFactor), WithOverwrite(true)); err != nil {
		t.Fatalf("overwrite with force: %v", err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("replaced key file mode = %v, want 0600", st.Mode().Perm())
	}
	if got, _ := LoadPrivateKey(path, testPassphrase); got == nil || got.KeyID() != "bob" {
		t.Errorf("forced overwrite did not replace the key")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestWriteFileRefusesWeakSettings(t *testing.T) {
	k := mustKey(t, "alice")
	dir := t.TempDir()
	if err := k.WriteFile(filepath.Join(dir, "a"), []byte("short"), WithScryptWorkFactor(testWorkFactor)); err == nil {
		t.Error("short passphrase accepted")
	}
	if err := k.WriteFile(filepath.Join(dir, "b"), testPassphrase, WithScryptWorkFactor(4)); err == nil {
		t.Error("work factor 4 accepted")
	}
}

func TestLoadPrivateKeyRejectsGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k")
	if err := os.WriteFile(path, []byte("not an age file"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrivateKey(path, testPassphrase); err == nil || errors.Is(err, ErrBadPassphrase) {
		t.Errorf("garbage file: err = %v, want a decoding error", err)
	}
}

func TestKeySetJSON(t *testing.T) {
	alice, bob := mustKey(t, "alice"), mustKey(t, "bob")
	data, err := alice.KeySet().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Keys) != 1 {
		t.Fatalf("keys = %v", raw.Keys)
	}
	for k, want := range map[string]string{"kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA", "kid": "alice"} {
		if raw.Keys[0][k] != want {
			t.Errorf("%s = %v, want %s", k, raw.Keys[0][k], want)
		}
	}
	if _, ok := raw.Keys[0]["d"]; ok {
		t.Error("public JWKS carries d")
	}

	// Merging approvers is concatenating the "keys" arrays.
	bobData, _ := bob.KeySet().MarshalJSON()
	var a, b struct {
		Keys []json.RawMessage `json:"keys"`
	}
	_ = json.Unmarshal(data, &a)
	_ = json.Unmarshal(bobData, &b)
	merged, _ := json.Marshal(map[string]any{"keys": append(a.Keys, b.Keys...)})
	set, err := LoadKeySet(merged)
	if err != nil {
		t.Fatalf("LoadKeySet(merged): %v", err)
	}
	if got := set.KeyIDs(); len(got) != 2 || got[0] != "alice" || got[1] != "bob" {
		t.Errorf("KeyIDs = %v", got)
	}
	if pub, ok := set.lookup("bob"); !ok || !pub.Equal(bob.Public()) {
		t.Errorf("bob's key not found")
	}

	viaMerge := alice.KeySet()
	if err := viaMerge.Merge(bob.KeySet()); err != nil || viaMerge.Len() != 2 {
		t.Errorf("Merge: %v, len %d", err, viaMerge.Len())
	}
	if err := viaMerge.Merge(mustKey(t, "bob").KeySet()); err == nil {
		t.Error("Merge accepted a second key under an existing ID")
	}
	// One key under a second ID would make one person two distinct approvers of a two-person plan.
	if err := viaMerge.Merge(&KeySet{keys: map[string]ed25519.PublicKey{"alice-2": alice.Public()}}); err == nil {
		t.Error("Merge accepted alice's key again under another ID")
	}
	if err := viaMerge.Merge(alice.KeySet()); err != nil {
		t.Errorf("Merge of the very same key and ID: %v", err)
	}
}

func TestKeySetWritePublicFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "alice.jwks.json")
	k := mustKey(t, "alice")
	if err := k.KeySet().WritePublicFile(path, false); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	set, err := LoadKeySet(data)
	if err != nil || set.Len() != 1 {
		t.Fatalf("LoadKeySet(written file) = %v, %v", set, err)
	}
	if err := k.KeySet().WritePublicFile(path, false); !errors.Is(err, fs.ErrExist) {
		t.Errorf("overwrite: err = %v, want fs.ErrExist", err)
	}
}

func TestLoadKeySetRejects(t *testing.T) {
	alice := mustKey(t, "alice")
	jwk := func(key any, kid, alg, use string) string {
		b, err := json.Marshal(jose.JSONWebKey{Key: key, KeyID: kid, Algorithm: alg, Use: use})
		if err != nil {
			t.Fatalf("marshal %T: %v", key, err)
		}
		return string(b)
	}
	set := func(keys ...string) []byte { return []byte(`{"keys":[` + strings.Join(keys, ",") + `]}`) }
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	good := jwk(alice.Public(), "alice", "EdDSA", "sig")

	tests := []struct {
		name string
		data []byte
	}{
		{"not JSON", []byte("{")},
		{"empty set", set()},
		{"no keys member", []byte(`{}`)},
		{"private ed25519", set(jwk(ed25519.PrivateKey(alice.key), "alice", "EdDSA", "sig"))},
		{"RSA public", set(jwk(&rsaKey.PublicKey, "r", "RS256", "sig"))},
		{"EC public", set(jwk(&ecKey.PublicKey, "e", "ES256", "sig"))},
		{"symmetric", set(`{"kty":"oct","k":"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0","kid":"h"}`)},
		{"X25519", set(`{"kty":"OKP","crv":"X25519","x":"hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo","kid":"x"}`)},
		{"missing kid", set(jwk(alice.Public(), "", "EdDSA", "sig"))},
		{"bad kid", set(jwk(alice.Public(), "a b", "EdDSA", "sig"))},
		{"duplicate kid", set(good, jwk(mustKey(t, "x").Public(), "alice", "EdDSA", "sig"))},
		{"one key under two kids", set(good, jwk(alice.Public(), "alice-laptop", "EdDSA", "sig"))},
		{"encryption use", set(jwk(alice.Public(), "alice", "EdDSA", "enc"))},
		{"other alg", set(jwk(alice.Public(), "alice", "ES256", "sig"))},
		{"short x", set(`{"kty":"OKP","crv":"Ed25519","x":"AAAA","kid":"alice"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s, err := LoadKeySet(tt.data); err == nil {
				t.Fatalf("LoadKeySet accepted %s: %v", tt.data, s.KeyIDs())
			}
		})
	}
	if _, err := LoadKeySet(set(good)); err != nil {
		t.Fatalf("LoadKeySet(good) = %v", err)
	}
	// use and alg are optional.
	if _, err := LoadKeySet(set(jwk(alice.Public(), "alice", "", ""))); err != nil {
		t.Fatalf("LoadKeySet without use/alg = %v", err)
	}
}

func TestDefaultPaths(t *testing.T) {
	t.Setenv(EnvApproverKey, "/k/approver.key")
	if p, _ := DefaultKeyPath(); p != "/k/approver.key" {
		t.Errorf("DefaultKeyPath = %q", p)
	}
	t.Setenv(EnvApproverKey, "")
	t.Setenv("HOME", "/home/u")
	if p, _ := DefaultKeyPath(); p != "/home/u/.config/agent-sandbox/approver.key" {
		t.Errorf("DefaultKeyPath = %q", p)
	}
}
