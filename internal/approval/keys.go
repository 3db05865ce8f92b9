package approval

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"filippo.io/age"
	"filippo.io/age/armor"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/agent-sandbox/agent-sandbox/internal/atomicfile"
)

const (
	// MinPassphraseLength is the shortest passphrase accepted for a new key file.
	MinPassphraseLength = 12
	// DefaultScryptWorkFactor is the scrypt work factor (log2 N) of new key files: age's default, about a
	// second of CPU to try one passphrase.
	DefaultScryptWorkFactor = 18
	// maxKeyIDLength bounds key IDs, which appear in token headers and on terminals.
	maxKeyIDLength = 64
	// pemKeyIDHeader is the PEM header carrying the key ID inside the decrypted key file.
	pemKeyIDHeader = "Key-Id"
	// maxKeyFileSize bounds what LoadPrivateKey reads.
	maxKeyFileSize = 64 << 10
)

// PrivateKey is an approver's ed25519 signing key and its key ID. The key material never leaves the value:
// String and GoString print only the key ID.
type PrivateKey struct {
	id  string
	key ed25519.PrivateKey
}

// GenerateKey creates a new approver key. An empty keyID is replaced by DeriveKeyID of the new public key.
func GenerateKey(keyID string) (*PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	if keyID == "" {
		keyID = DeriveKeyID(pub)
	}
	if err := ValidateKeyID(keyID); err != nil {
		return nil, err
	}
	return &PrivateKey{id: keyID, key: priv}, nil
}

// DeriveKeyID returns the default key ID of a public key: "approver-" and the first 8 bytes of its SHA-256 in
// hex.
func DeriveKeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "approver-" + hex.EncodeToString(sum[:8])
}

// ValidateKeyID checks that a key ID is 1 to 64 characters from [A-Za-z0-9._-]: it is printed on terminals and
// travels in token headers, so it stays plain.
func ValidateKeyID(id string) error {
	if id == "" || len(id) > maxKeyIDLength {
		return fmt.Errorf("key ID must be 1 to %d characters", maxKeyIDLength)
	}
	for _, c := range []byte(id) {
		if !isKeyIDChar(c) {
			return fmt.Errorf("key ID %q: only letters, digits, '.', '_' and '-' are allowed", id)
		}
	}
	return nil
}

func isKeyIDChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// KeyID returns the key's ID, which tokens carry as "kid" and "iss".
func (k *PrivateKey) KeyID() string { return k.id }

// Public returns the public half of the key.
func (k *PrivateKey) Public() ed25519.PublicKey { return k.key.Public().(ed25519.PublicKey) }

// KeySet returns a key set holding only this key's public half.
func (k *PrivateKey) KeySet() *KeySet {
	return &KeySet{keys: map[string]ed25519.PublicKey{k.id: k.Public()}}
}

// String identifies the key without revealing it.
func (k *PrivateKey) String() string { return "approver key " + k.id }

// GoString identifies the key without revealing it, also under %#v.
func (k *PrivateKey) GoString() string {
	return "approval.PrivateKey{id: " + fmt.Sprintf("%q", k.id) + "}"
}

// WriteOption changes how WriteFile writes a key file.
type WriteOption func(*writeConfig)

type writeConfig struct {
	overwrite  bool
	workFactor int
}

// WithOverwrite lets WriteFile replace an existing file (atomically, by renaming a new file over it).
func WithOverwrite(overwrite bool) WriteOption {
	return func(c *writeConfig) { c.overwrite = overwrite }
}

// WithScryptWorkFactor sets the scrypt work factor (log2 N, 10 to 22) of the passphrase encryption. Lower
// values make brute-forcing the passphrase cheaper; they exist for tests.
func WithScryptWorkFactor(logN int) WriteOption {
	return func(c *writeConfig) { c.workFactor = logN }
}

// WriteFile writes the private key to path, encrypted with passphrase: an ASCII-armored age file (scrypt
// recipient) whose plaintext is a PKCS#8 "PRIVATE KEY" PEM block with a "Key-Id" header. The file is created
// with mode 0600 (its directory with 0700 if missing) and an existing file is refused with an error wrapping
// fs.ErrExist unless WithOverwrite(true) is given.
func (k *PrivateKey) WriteFile(path string, passphrase []byte, opts ...WriteOption) error {
	cfg := writeConfig{workFactor: DefaultScryptWorkFactor}
	for _, o := range opts {
		o(&cfg)
	}
	if len(passphrase) < MinPassphraseLength {
		return fmt.Errorf("passphrase must be at least %d characters", MinPassphraseLength)
	}
	if cfg.workFactor < 10 || cfg.workFactor > 22 {
		return fmt.Errorf("scrypt work factor %d is outside 10..22", cfg.workFactor)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k.key)
	if err != nil {
		return fmt.Errorf("encode private key: %w", err)
	}
	plain := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Headers: map[string]string{pemKeyIDHeader: k.id}, Bytes: der})
	defer clear(plain)
	clear(der)

	recipient, err := age.NewScryptRecipient(string(passphrase))
	if err != nil {
		return fmt.Errorf("passphrase recipient: %w", err)
	}
	recipient.SetWorkFactor(cfg.workFactor)
	var out bytes.Buffer
	armored := armor.NewWriter(&out)
	enc, err := age.Encrypt(armored, recipient)
	if err != nil {
		return fmt.Errorf("encrypt private key: %w", err)
	}
	if _, err := enc.Write(plain); err != nil {
		return fmt.Errorf("encrypt private key: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("encrypt private key: %w", err)
	}
	if err := armored.Close(); err != nil {
		return fmt.Errorf("encrypt private key: %w", err)
	}
	return writePrivateFile(path, out.Bytes(), cfg.overwrite)
}

// writePrivateFile writes data to path with mode 0600. Without overwrite it uses O_EXCL, so it never replaces
// anything; with overwrite it renames a fresh 0600 file over the old one, so no reader sees a partial key.
func writePrivateFile(path string, data []byte, overwrite bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create key directory: %w", err)
	}
	if !overwrite {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			os.Remove(path)
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			os.Remove(path)
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	}
	return atomicfile.Write(path, data, 0o600)
}

// LoadPrivateKey reads and decrypts a key file written by WriteFile. A passphrase that does not open the file
// (or a file that is not passphrase-encrypted) gives an error wrapping ErrBadPassphrase.
func LoadPrivateKey(path string, passphrase []byte) (*PrivateKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open key file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read key file %s: %w", path, err)
	}
	if len(data) > maxKeyFileSize {
		return nil, fmt.Errorf("key file %s is larger than %d bytes", path, maxKeyFileSize)
	}
	key, err := decryptPrivateKey(data, passphrase)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return key, nil
}

func decryptPrivateKey(data, passphrase []byte) (*PrivateKey, error) {
	identity, err := age.NewScryptIdentity(string(passphrase))
	if err != nil {
		// age refuses an empty passphrase; no key file has one.
		return nil, fmt.Errorf("%w: %w", ErrBadPassphrase, err)
	}
	r, err := age.Decrypt(armor.NewReader(bytes.NewReader(data)), identity)
	if err != nil {
		if errors.Is(err, age.ErrIncorrectIdentity) {
			return nil, ErrBadPassphrase
		}
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	plain, err := io.ReadAll(io.LimitReader(r, maxKeyFileSize))
	if err != nil {
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	defer clear(plain)
	block, _ := pem.Decode(plain)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("no PRIVATE KEY block inside the encrypted file")
	}
	defer clear(block.Bytes)
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	priv, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key is %T, not ed25519", parsed)
	}
	id := block.Headers[pemKeyIDHeader]
	if id == "" {
		id = DeriveKeyID(priv.Public().(ed25519.PublicKey))
	}
	if err := ValidateKeyID(id); err != nil {
		return nil, err
	}
	return &PrivateKey{id: id, key: priv}, nil
}

// KeySet is the set of approver public keys a Verifier trusts, indexed by key ID.
//
// On disk and in configuration it is a JWK Set (RFC 7517 section 5): {"keys": [JWK, ...]}, each JWK an Ed25519
// public key ({"kty":"OKP","crv":"Ed25519","x":...,"kid":...,"use":"sig","alg":"EdDSA"}). A set is just that
// JSON array of keys, so trusting several approvers means concatenating the "keys" arrays of their
// `agent-sandbox keygen` .jwks.json files into one object (for example with
// `jq -s '{keys: map(.keys[])}' alice.jwks.json bob.jwks.json`), or calling Merge.
type KeySet struct {
	keys map[string]ed25519.PublicKey
}

// privateJWKMembers are the JWK members that carry secret material (RFC 7518 section 6, RFC 8037).
var privateJWKMembers = []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k", "priv"}

// LoadKeySet parses a JWK Set of approver public keys. Every key must be an Ed25519 public key ("kty" "OKP",
// "crv" "Ed25519") with a valid, unique "kid"; "use", if present, must be "sig" and "alg", if present,
// "EdDSA". Private key material anywhere is refused, as is an empty set.
func LoadKeySet(data []byte) (*KeySet, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("parse JWK set: %w", err)
	}
	if len(raw.Keys) == 0 {
		return nil, errors.New("JWK set has no keys")
	}
	set := &KeySet{keys: make(map[string]ed25519.PublicKey, len(raw.Keys))}
	for i, rk := range raw.Keys {
		id, pub, err := parsePublicJWK(rk)
		if err != nil {
			return nil, fmt.Errorf("JWK set key %d: %w", i, err)
		}
		if _, dup := set.keys[id]; dup {
			return nil, fmt.Errorf("JWK set key %d: duplicate kid %q", i, id)
		}
		if other := set.idOf(pub); other != "" {
			return nil, fmt.Errorf("JWK set key %d: %w", i, sameKeyTwice(id, other))
		}
		set.keys[id] = pub
	}
	return set, nil
}

// idOf returns the key ID under which the set holds pub, or "".
func (s *KeySet) idOf(pub ed25519.PublicKey) string {
	for id, have := range s.keys {
		if have.Equal(pub) {
			return id
		}
	}
	return ""
}

// sameKeyTwice is the error of a key set that would hold one public key under two key IDs. Distinct
// approvers are told apart by key ID, so such a set would let one person count as two for a plan that needs
// two approvers.
func sameKeyTwice(id, other string) error {
	return fmt.Errorf("key ID %q is the public key of key ID %q again: one key is one approver, so it may be trusted under one key ID only", id, other)
}

func parsePublicJWK(data []byte) (string, ed25519.PublicKey, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return "", nil, fmt.Errorf("parse JWK: %w", err)
	}
	for _, m := range privateJWKMembers {
		if _, ok := members[m]; ok {
			var kid string
			_ = json.Unmarshal(members["kid"], &kid) // only to name the key in the message
			return "", nil, fmt.Errorf("JWK %q carries %w (%q): publish only the public key", kid, ErrPrivateKeyMaterial, m)
		}
	}
	var head struct {
		Kty string `json:"kty"`
		Crv string `json:"crv"`
		Use string `json:"use"`
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return "", nil, fmt.Errorf("parse JWK: %w", err)
	}
	if head.Kty != "OKP" || head.Crv != "Ed25519" {
		return "", nil, fmt.Errorf("JWK %q is kty %q crv %q: only Ed25519 (OKP) keys are accepted", head.Kid, head.Kty, head.Crv)
	}
	if head.Use != "" && head.Use != "sig" {
		return "", nil, fmt.Errorf("JWK %q has use %q, want \"sig\"", head.Kid, head.Use)
	}
	if head.Alg != "" && head.Alg != string(jose.EdDSA) {
		return "", nil, fmt.Errorf("JWK %q has alg %q, want %q", head.Kid, head.Alg, jose.EdDSA)
	}
	if err := ValidateKeyID(head.Kid); err != nil {
		return "", nil, fmt.Errorf("JWK kid: %w", err)
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(data); err != nil {
		return "", nil, fmt.Errorf("JWK %q: %w", head.Kid, err)
	}
	pub, ok := jwk.Key.(ed25519.PublicKey)
	if !ok || !jwk.IsPublic() {
		return "", nil, fmt.Errorf("JWK %q is not an Ed25519 public key", head.Kid)
	}
	return head.Kid, pub, nil
}

// MarshalJSON writes the set as a JWK Set, keys ordered by key ID.
func (s *KeySet) MarshalJSON() ([]byte, error) {
	jwks := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for _, id := range s.KeyIDs() {
		jwks.Keys = append(jwks.Keys, jose.JSONWebKey{
			Key:       s.keys[id],
			KeyID:     id,
			Algorithm: string(jose.EdDSA),
			Use:       "sig",
		})
	}
	return json.Marshal(jwks)
}

// KeyIDs returns the key IDs in the set, sorted.
func (s *KeySet) KeyIDs() []string {
	if s == nil {
		return nil
	}
	ids := make([]string, 0, len(s.keys))
	for id := range s.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Len returns the number of keys in the set.
func (s *KeySet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.keys)
}

// Merge adds other's keys to s. A key ID present in both with different keys is an error and leaves s
// unchanged.
func (s *KeySet) Merge(other *KeySet) error {
	for id, pub := range other.keys {
		if have, ok := s.keys[id]; ok && !have.Equal(pub) {
			return fmt.Errorf("key ID %q names two different keys", id)
		}
		if have := s.idOf(pub); have != "" && have != id {
			return sameKeyTwice(id, have)
		}
	}
	if s.keys == nil {
		s.keys = make(map[string]ed25519.PublicKey, len(other.keys))
	}
	for id, pub := range other.keys {
		s.keys[id] = pub
	}
	return nil
}

// lookup returns the public key for a key ID.
func (s *KeySet) lookup(id string) (ed25519.PublicKey, bool) {
	if s == nil {
		return nil, false
	}
	pub, ok := s.keys[id]
	return pub, ok
}

// Encode returns the key set as the file WritePublicFile writes: indented JSON, keys ordered by key ID,
// ending in a newline.
func (s *KeySet) Encode() ([]byte, error) {
	data, err := s.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode JWK set: %w", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, data, "", "  "); err != nil {
		return nil, fmt.Errorf("encode JWK set: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// WritePublicFile writes the key set as indented JSON to path with mode 0644. An existing file is refused with
// an error wrapping fs.ErrExist unless overwrite is true.
func (s *KeySet) WritePublicFile(path string, overwrite bool) error {
	out, err := s.Encode()
	if err != nil {
		return err
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if !overwrite {
		flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create directory for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.Write(out); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// DefaultKeyPath returns where the approver's private key lives by default: $AGENT_SANDBOX_APPROVER_KEY, else
// ~/.config/agent-sandbox/approver.key.
func DefaultKeyPath() (string, error) {
	if p := os.Getenv(EnvApproverKey); p != "" {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("default key path: %w", err)
	}
	return filepath.Join(home, ".config", "agent-sandbox", "approver.key"), nil
}

// EnvApproverKey names the environment variable that overrides DefaultKeyPath.
const EnvApproverKey = "AGENT_SANDBOX_APPROVER_KEY"
