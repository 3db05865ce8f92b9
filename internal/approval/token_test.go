package approval

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

const testAudience = "cluster-a"

// memLedger is an in-memory Ledger for tests.
type memLedger struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func newMemLedger() *memLedger { return &memLedger{seen: map[string]time.Time{}} }

func (l *memLedger) Record(_ context.Context, id string, expires time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[id]; ok {
		return fmt.Errorf("token %s: %w", id, ErrReplayed)
	}
	l.seen[id] = expires
	return nil
}

func (l *memLedger) Seen(_ context.Context, id string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.seen[id]
	return ok, nil
}

func (l *memLedger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

// failingLedger fails every Record with err.
type failingLedger struct{ err error }

func (l failingLedger) Record(context.Context, string, time.Time) error { return l.err }

func (l failingLedger) Seen(context.Context, string) (bool, error) { return false, nil }

// tokenFixture is one approver, one request and a verifier at a fixed time.
type tokenFixture struct {
	key    *PrivateKey
	now    time.Time
	claims Claims
	want   Expectation
}

func newTokenFixture(t testing.TB) *tokenFixture {
	t.Helper()
	key := mustKey(t, "alice")
	params := map[string]any{"dir": "infra", "replicas": 2}
	hash, err := ParamsHash("terraform_apply", params)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	req := &Request{ID: "req-0123456789ab", Tool: "terraform_apply", ParamsHash: hash, Namespace: "demo", PlanDigest: "sha256:abc"}
	c, err := NewClaims(req, key.KeyID(), testAudience, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &tokenFixture{
		key:    key,
		now:    now,
		claims: c,
		want:   Expectation{Tool: req.Tool, ParamsHash: hash, Namespace: "demo", PlanDigest: "sha256:abc"},
	}
}

func (f *tokenFixture) verifier(at time.Time) *Verifier {
	return NewVerifier(f.key.KeySet(), testAudience, func() time.Time { return at })
}

func (f *tokenFixture) sign(t testing.TB, mutate func(*Claims)) string {
	t.Helper()
	c := f.claims
	if mutate != nil {
		mutate(&c)
	}
	tok, err := Sign(f.key, c)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return tok
}

// rawToken signs arbitrary header fields and claims, bypassing Sign's checks, to build hostile tokens.
func rawToken(t testing.TB, alg jose.SignatureAlgorithm, key any, kid, typ string, claims any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithHeader("kid", kid)
	if typ != "" {
		opts = opts.WithType(jose.ContentType(typ))
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatalf("NewSigner: %v", err)
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatalf("Serialize: %v", err)
	}
	return tok
}

// wireClaims returns the JSON claims of c as Sign would write them.
func wireClaims(c Claims) map[string]any {
	m := map[string]any{
		"iss": c.Issuer, "aud": c.Audience, "sub": c.Subject, "jti": c.ID,
		"iat": c.IssuedAt.Unix(), "nbf": c.NotBefore.Unix(), "exp": c.Expiry.Unix(),
		"tool": c.Tool, "params_hash": c.ParamsHash, "namespace": c.Namespace,
	}
	if c.PlanDigest != "" {
		m["plan_digest"] = c.PlanDigest
	}
	if c.ApprovalsRequired > 1 {
		m["approvals_required"] = c.ApprovalsRequired
	}
	return m
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// tokenSentinels are the errors a verification can end in; each case must match exactly one.
var tokenSentinels = []error{
	ErrMalformed, ErrBadSignature, ErrUnknownKey, ErrExpired, ErrNotYetValid, ErrWrongAudience, ErrWrongTool,
	ErrParamsMismatch, ErrWrongNamespace, ErrPlanMismatch, ErrReplayed, ErrTooLong, ErrNotEnoughApprovals,
	ErrDuplicateApprover, ErrOtherRequest,
}

func TestVerifierConsume(t *testing.T) {
	f := newTokenFixture(t)
	valid := f.sign(t, nil)
	parts := strings.Split(valid, ".")
	mallory := mustKey(t, "mallory")
	impostor := mustKey(t, "alice") // another key claiming alice's ID
	pub := []byte(f.key.Public())
	twoParts := strings.Split(f.sign(t, func(c *Claims) { c.ApprovalsRequired = 2 }), ".")

	tests := []struct {
		name  string
		token string
		at    time.Time    // verifier clock; f.now if zero
		want  *Expectation // f.want if nil
		err   error
	}{
		{name: "valid", token: valid},
		{name: "valid until the last second", token: valid, at: f.claims.Expiry.Add(-time.Nanosecond)},
		{name: "expired", token: valid, at: f.claims.Expiry.Add(time.Minute), err: ErrExpired},
		{name: "expired exactly at exp, no skew", token: valid, at: f.claims.Expiry, err: ErrExpired},
		{name: "issued in the future within skew", token: valid, at: f.now.Add(-20 * time.Second)},
		{name: "issued in the future beyond skew", token: valid, at: f.now.Add(-ClockSkew - time.Second), err: ErrNotYetValid},
		{name: "nbf beyond skew", token: f.sign(t, func(c *Claims) { c.NotBefore = f.now.Add(2 * time.Minute) }), err: ErrNotYetValid},
		{name: "wrong params", token: valid, want: &Expectation{Tool: f.want.Tool, ParamsHash: strings.Repeat("0", 64), Namespace: "demo", PlanDigest: "sha256:abc"}, err: ErrParamsMismatch},
		{name: "wrong tool", token: valid, want: &Expectation{Tool: "kubectl_delete", ParamsHash: f.want.ParamsHash, Namespace: "demo", PlanDigest: "sha256:abc"}, err: ErrWrongTool},
		{name: "wrong namespace", token: valid, want: &Expectation{Tool: f.want.Tool, ParamsHash: f.want.ParamsHash, Namespace: "kube-system", PlanDigest: "sha256:abc"}, err: ErrWrongNamespace},
		{name: "wrong plan", token: valid, want: &Expectation{Tool: f.want.Tool, ParamsHash: f.want.ParamsHash, Namespace: "demo", PlanDigest: "sha256:other"}, err: ErrPlanMismatch},
		{name: "plan expected but absent", token: f.sign(t, func(c *Claims) { c.PlanDigest = "" }), err: ErrPlanMismatch},
		{name: "wrong audience", token: f.sign(t, func(c *Claims) { c.Audience = "cluster-b" }), err: ErrWrongAudience},
		{name: "forged signature", token: parts[0] + "." + parts[1] + "." + flipFirstChar(parts[2]), err: ErrBadSignature},
		{name: "empty signature", token: parts[0] + "." + parts[1] + ".", err: ErrBadSignature},
		{name: "tampered payload", token: parts[0] + "." + b64(mustJSON(t, wireClaims(withTool(f.claims, "kubectl_delete")))) + "." + parts[2], err: ErrBadSignature},
		{name: "signed by an unknown key", token: mustSign(t, mallory, withIssuer(f.claims, "mallory")), err: ErrUnknownKey},
		{name: "signed by another key under a trusted kid", token: mustSign(t, impostor, f.claims), err: ErrBadSignature},
		{name: "alg none", token: b64(`{"alg":"none","kid":"alice","typ":"approval+jwt"}`) + "." + parts[1] + ".", err: ErrBadSignature},
		{name: "HS256 keyed with the public key", token: rawToken(t, jose.HS256, pub, "alice", TokenType, wireClaims(f.claims)), err: ErrBadSignature},
		{name: "alg RS256 header", token: b64(`{"alg":"RS256","kid":"alice","typ":"approval+jwt"}`) + "." + parts[1] + "." + parts[2], err: ErrBadSignature},
		{name: "missing typ", token: rawToken(t, jose.EdDSA, f.key.key, "alice", "", wireClaims(f.claims)), err: ErrMalformed},
		{name: "other typ", token: rawToken(t, jose.EdDSA, f.key.key, "alice", "JWT", wireClaims(f.claims)), err: ErrMalformed},
		{name: "issuer is not kid", token: rawToken(t, jose.EdDSA, f.key.key, "alice", TokenType, wireClaims(withIssuer(f.claims, "bob"))), err: ErrMalformed},
		{name: "lifetime over 30m", token: rawToken(t, jose.EdDSA, f.key.key, "alice", TokenType, wireClaims(withExpiry(f.claims, f.now.Add(MaxTokenTTL+time.Second)))), err: ErrMalformed},
		{name: "missing jti", token: rawToken(t, jose.EdDSA, f.key.key, "alice", TokenType, without(wireClaims(f.claims), "jti")), err: ErrMalformed},
		{name: "missing exp", token: rawToken(t, jose.EdDSA, f.key.key, "alice", TokenType, without(wireClaims(f.claims), "exp")), err: ErrMalformed},
		{name: "two audiences", token: rawToken(t, jose.EdDSA, f.key.key, "alice", TokenType, with(wireClaims(f.claims), "aud", []string{testAudience, "x"})), err: ErrMalformed},
		{name: "approvals_required 1 written out", token: rawToken(t, jose.EdDSA, f.key.key, "alice", TokenType, with(wireClaims(f.claims), "approvals_required", 1))},
		{name: "approvals_required 2, alone", token: f.sign(t, func(c *Claims) { c.ApprovalsRequired = 2 }), err: ErrNotEnoughApprovals},
		{name: "approvals_required 0 written out", token: rawToken(t, jose.EdDSA, f.key.key, "alice", TokenType, with(wireClaims(f.claims), "approvals_required", 0))},
		{name: "approvals_required negative", token: rawToken(t, jose.EdDSA, f.key.key, "alice", TokenType, with(wireClaims(f.claims), "approvals_required", -1)), err: ErrMalformed},
		{name: "approvals_required beyond the maximum", token: rawToken(t, jose.EdDSA, f.key.key, "alice", TokenType, with(wireClaims(f.claims), "approvals_required", MaxApprovers+1)), err: ErrMalformed},
		{name: "approvals_required not an integer", token: rawToken(t, jose.EdDSA, f.key.key, "alice", TokenType, with(wireClaims(f.claims), "approvals_required", 1.5)), err: ErrMalformed},
		{name: "approvals_required a string", token: rawToken(t, jose.EdDSA, f.key.key, "alice", TokenType, with(wireClaims(f.claims), "approvals_required", "1")), err: ErrMalformed},
		{name: "approvals_required removed from a token that asks for 2", token: twoParts[0] + "." + b64(mustJSON(t, wireClaims(f.claims))) + "." + twoParts[2], err: ErrBadSignature},
		{name: "empty", token: "", err: ErrMalformed},
		{name: "garbage", token: "not-a-token", err: ErrMalformed},
		{name: "JSON serialization", token: `{"payload":"` + parts[1] + `"}`, err: ErrMalformed},
		{name: "padded base64", token: parts[0] + "=." + parts[1] + "." + parts[2], err: ErrMalformed},
		{name: "non-canonical base64", token: parts[0] + "." + parts[1] + "." + bumpTrailingBits(parts[2]), err: ErrMalformed},
		{name: "four parts", token: valid + ".x", err: ErrMalformed},
		{name: "too long", token: valid + strings.Repeat("A", maxTokenLength), err: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := tt.at
			if at.IsZero() {
				at = f.now
			}
			want := f.want
			if tt.want != nil {
				want = *tt.want
			}
			ledger := newMemLedger()
			c, err := f.verifier(at).Consume(context.Background(), tt.token, want, ledger)
			if tt.err == nil {
				if err != nil {
					t.Fatalf("Consume: %v", err)
				}
				if !c.EqualWire(&f.claims) {
					t.Errorf("claims = %+v, want %+v", c, f.claims)
				}
				if ledger.len() != 1 {
					t.Errorf("ledger has %d entries, want 1", ledger.len())
				}
				return
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("Consume error = %v, want %v", err, tt.err)
			}
			for _, other := range tokenSentinels {
				if other != tt.err && errors.Is(err, other) {
					t.Errorf("error %v also matches %v", err, other)
				}
			}
			if ledger.len() != 0 {
				t.Errorf("a rejected token was recorded")
			}
			if tt.token != "" && len(tt.token) > 20 && strings.Contains(err.Error(), tt.token) {
				t.Errorf("error message contains the token")
			}
			// CheckDryRun applies the same checks.
			if _, err := f.verifier(at).CheckDryRun(tt.token, want); !errors.Is(err, tt.err) {
				t.Errorf("CheckDryRun error = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestVerifierReplayAndDryRun(t *testing.T) {
	f := newTokenFixture(t)
	token := f.sign(t, nil)
	v := f.verifier(f.now)
	ledger := newMemLedger()
	ctx := context.Background()

	for range 3 {
		if _, err := v.CheckDryRun(token, f.want); err != nil {
			t.Fatalf("CheckDryRun: %v", err)
		}
	}
	if ledger.len() != 0 {
		t.Fatal("CheckDryRun recorded the token")
	}
	c, err := v.Consume(ctx, token, f.want, ledger)
	if err != nil {
		t.Fatalf("Consume after dry runs: %v", err)
	}
	if _, err := v.Consume(ctx, token, f.want, ledger); !errors.Is(err, ErrReplayed) {
		t.Fatalf("second Consume error = %v, want ErrReplayed", err)
	}
	if !ledger.seen[c.ID].Equal(f.claims.Expiry) {
		t.Errorf("ledger expiry = %v, want %v", ledger.seen[c.ID], f.claims.Expiry)
	}
}

// admitted counts the consumers of a race that succeeded, from their errors (closed when all ended): every
// other one must have been refused as a replay.
func admitted(t *testing.T, errs <-chan error) int {
	t.Helper()
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrReplayed):
			t.Errorf("unexpected error %v", err)
		}
	}
	return ok
}

func TestVerifierConsumeConcurrent(t *testing.T) {
	f := newTokenFixture(t)
	token := f.sign(t, nil)
	v := f.verifier(f.now)
	ledger := newMemLedger()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			_, err := v.Consume(context.Background(), token, f.want, ledger)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	if ok := admitted(t, errs); ok != 1 {
		t.Errorf("%d consumers succeeded, want exactly 1", ok)
	}
}

func TestVerifierFailsClosed(t *testing.T) {
	f := newTokenFixture(t)
	token := f.sign(t, nil)
	ctx := context.Background()
	boom := errors.New("ledger unavailable")
	if _, err := f.verifier(f.now).Consume(ctx, token, f.want, failingLedger{boom}); !errors.Is(err, boom) {
		t.Errorf("ledger failure: err = %v, want it passed on", err)
	}
	if _, err := f.verifier(f.now).Consume(ctx, token, f.want, nil); err == nil {
		t.Error("nil ledger accepted")
	}
	for name, v := range map[string]*Verifier{
		"no audience": NewVerifier(f.key.KeySet(), "", func() time.Time { return f.now }),
		"no keys":     NewVerifier(nil, testAudience, func() time.Time { return f.now }),
	} {
		if _, err := v.Consume(ctx, token, f.want, newMemLedger()); err == nil {
			t.Errorf("%s: token accepted", name)
		}
	}
	for _, want := range []Expectation{{}, {Tool: "terraform_apply"}, {Tool: "terraform_apply", ParamsHash: "abc"}} {
		if _, err := f.verifier(f.now).Consume(ctx, token, want, newMemLedger()); err == nil {
			t.Errorf("incomplete expectation %+v accepted", want)
		}
	}
}

func TestVerifierMultipleApprovers(t *testing.T) {
	f := newTokenFixture(t)
	bob := mustKey(t, "bob")
	set := f.key.KeySet()
	if err := set.Merge(bob.KeySet()); err != nil {
		t.Fatal(err)
	}
	v := NewVerifier(set, testAudience, func() time.Time { return f.now })
	for _, k := range []*PrivateKey{f.key, bob} {
		c := f.claims
		c.Issuer = ""
		c.ID, _ = NewTokenID()
		tok, err := Sign(k, c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := v.Consume(context.Background(), tok, f.want, newMemLedger())
		if err != nil {
			t.Fatalf("token of %s: %v", k.KeyID(), err)
		}
		if got.Issuer != k.KeyID() {
			t.Errorf("issuer = %q, want %q", got.Issuer, k.KeyID())
		}
	}
}

func TestSignRefuses(t *testing.T) {
	f := newTokenFixture(t)
	tests := []struct {
		name   string
		mutate func(*Claims)
	}{
		{"lifetime over 30m", func(c *Claims) { c.Expiry = c.IssuedAt.Add(MaxTokenTTL + time.Second) }},
		{"expiry before issue", func(c *Claims) { c.Expiry = c.IssuedAt.Add(-time.Second) }},
		{"other issuer", func(c *Claims) { c.Issuer = "bob" }},
		{"no audience", func(c *Claims) { c.Audience = "" }},
		{"no subject", func(c *Claims) { c.Subject = "" }},
		{"no ID", func(c *Claims) { c.ID = "" }},
		{"no tool", func(c *Claims) { c.Tool = "" }},
		{"bad params hash", func(c *Claims) { c.ParamsHash = "xyz" }},
		{"no issue time", func(c *Claims) { c.IssuedAt = time.Time{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := f.claims
			tt.mutate(&c)
			if tok, err := Sign(f.key, c); err == nil {
				t.Fatalf("Sign accepted: %s", tok)
			}
		})
	}
	if _, err := Sign(nil, f.claims); err == nil {
		t.Error("Sign without key accepted")
	}
	req := &Request{ID: "req-0123456789ab", Tool: "t", ParamsHash: f.want.ParamsHash}
	if _, err := NewClaims(req, "alice", testAudience, f.now, MaxTokenTTL+time.Minute); err == nil {
		t.Error("NewClaims accepted a TTL over the maximum")
	}
	c, err := NewClaims(req, "alice", testAudience, f.now.Add(500*time.Millisecond), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !c.IssuedAt.Equal(f.now) || c.Expiry.Sub(c.IssuedAt) != 10*time.Minute || len(c.ID) != 32 {
		t.Errorf("NewClaims = %+v", c)
	}
}

func TestTokenHeaders(t *testing.T) {
	f := newTokenFixture(t)
	tok := f.sign(t, nil)
	h, err := splitCompact(tok)
	if err != nil {
		t.Fatal(err)
	}
	if h.Alg != "EdDSA" || h.Kid != "alice" || h.Typ != TokenType {
		t.Errorf("header = %+v", h)
	}
	payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		t.Fatal(err)
	}
	if m["aud"] != testAudience {
		t.Errorf("aud = %#v, want a single string", m["aud"])
	}
	for _, k := range []string{"iss", "sub", "jti", "iat", "nbf", "exp", "tool", "params_hash", "namespace", "plan_digest"} {
		if _, ok := m[k]; !ok {
			t.Errorf("claim %s missing from %s", k, payload)
		}
	}
}

// FuzzConsume feeds arbitrary strings to Consume: it must never panic, and nothing but the genuine token may
// ever be accepted (a fresh ledger each time, so the genuine one is).
func FuzzConsume(f *testing.F) {
	fx := newTokenFixture(f)
	valid := fx.sign(f, nil)
	parts := strings.Split(valid, ".")
	for _, seed := range []string{
		valid, "", ".", "..", "a.b.c", parts[0] + "." + parts[1] + ".", parts[0] + ".." + parts[2],
		b64(`{"alg":"none","kid":"alice","typ":"approval+jwt"}`) + "." + parts[1] + ".",
		parts[0] + "." + parts[1] + "." + flipFirstChar(parts[2]),
		strings.ToUpper(valid), valid + "=", " " + valid,
	} {
		f.Add(seed)
	}
	v := fx.verifier(fx.now)
	f.Fuzz(func(t *testing.T, token string) {
		c, err := v.Consume(context.Background(), token, fx.want, newMemLedger())
		if err == nil && token != valid {
			t.Fatalf("accepted a token other than the genuine one: %q -> %+v", token, c)
		}
		if err == nil && c == nil {
			t.Fatal("nil claims without error")
		}
		// Decoding without verification may succeed for well-formed strings; it must just not panic.
		_, _ = UnverifiedClaims(token)
	})
}

func BenchmarkVerify(b *testing.B) {
	f := newTokenFixture(b)
	token := f.sign(b, nil)
	v := f.verifier(f.now)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.CheckDryRun(token, f.want); err != nil {
			b.Fatal(err)
		}
	}
}

func mustSign(t testing.TB, k *PrivateKey, c Claims) string {
	t.Helper()
	tok, err := Sign(k, c)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return tok
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func withTool(c Claims, tool string) Claims             { c.Tool = tool; return c }
func withIssuer(c Claims, iss string) Claims            { c.Issuer = iss; return c }
func withExpiry(c Claims, exp time.Time) Claims         { c.Expiry = exp; return c }
func without(m map[string]any, k string) map[string]any { delete(m, k); return m }
func with(m map[string]any, k string, v any) map[string]any {
	m[k] = v
	return m
}

// flipFirstChar changes the first base64url character of s, which changes the first decoded byte.
func flipFirstChar(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

// bumpTrailingBits changes the unused low bits of the last character of an unpadded base64url string whose
// length is not a multiple of 4, giving a different spelling of the same bytes.
func bumpTrailingBits(s string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, s[len(s)-1])
	return s[:len(s)-1] + string(alphabet[last^1])
}

var _ Ledger = (*memLedger)(nil)

// TestVerifierPolicyLifetime: a policy's shorter spec.approval.tokenTTL governs verification; a token
// within it passes, one beyond it fails with ErrTooLong, and a lifetime longer than MaxTokenTTL cannot be
// configured.
func TestVerifierPolicyLifetime(t *testing.T) {
	f := newTokenFixture(t)
	short := f.sign(t, func(c *Claims) { c.Expiry = c.IssuedAt.Add(5 * time.Minute) })
	long := f.sign(t, nil) // DefaultTokenTTL
	v := f.verifier(f.now).WithMaxLifetime(10 * time.Minute)
	if _, err := v.CheckDryRun(short, f.want); err != nil {
		t.Errorf("a 5m token under a 10m policy: %v", err)
	}
	if _, err := v.CheckDryRun(long, f.want); !errors.Is(err, ErrTooLong) {
		t.Errorf("a 30m token under a 10m policy: %v, want ErrTooLong", err)
	}
	if _, err := f.verifier(f.now).WithMaxLifetime(2*MaxTokenTTL).CheckDryRun(long, f.want); err != nil {
		t.Errorf("a policy lifetime beyond MaxTokenTTL must not loosen anything, nor refuse a valid token: %v", err)
	}
}

// approverSet is three trusted approvers and a verifier that trusts them all, for the two-person rule.
type approverSet struct {
	*tokenFixture
	alice, bob, carol *PrivateKey
	v                 *Verifier
}

func newApproverSet(t testing.TB) *approverSet {
	t.Helper()
	f := newTokenFixture(t)
	a := &approverSet{tokenFixture: f, alice: f.key, bob: mustKey(t, "bob"), carol: mustKey(t, "carol")}
	set := a.alice.KeySet()
	for _, k := range []*PrivateKey{a.bob, a.carol} {
		if err := set.Merge(k.KeySet()); err != nil {
			t.Fatal(err)
		}
	}
	a.v = NewVerifier(set, testAudience, func() time.Time { return f.now })
	return a
}

// token signs the fixture's claims with key, under a fresh token ID, asking for need approvers (0: the
// claim left out); mutate changes the claims further.
func (a *approverSet) token(t testing.TB, key *PrivateKey, need int, mutate func(*Claims)) string {
	t.Helper()
	c := a.claims
	c.Issuer = key.KeyID()
	c.ID, _ = NewTokenID()
	c.ApprovalsRequired = need
	if mutate != nil {
		mutate(&c)
	}
	return mustSign(t, key, c)
}

// TestVerifierConsumeAll: the tokens of one Job are admitted only when each verifies and together they are
// signed by as many distinct approvers as the largest approvals_required asks for; the same approver twice
// counts once, and the tokens must approve one request.
func TestVerifierConsumeAll(t *testing.T) {
	a := newApproverSet(t)
	mallory := mustKey(t, "mallory")
	same := a.token(t, a.alice, 2, nil)
	many := make([]string, MaxApprovers+1)
	for i := range many {
		many[i] = a.token(t, a.alice, 0, nil)
	}
	tests := []struct {
		name      string
		tokens    []string
		err       error
		approvers []string // on success
		required  int      // on success
		have      int      // for ErrNotEnoughApprovals
		need      int
		repeated  bool
	}{
		{name: "one of one", tokens: []string{a.token(t, a.alice, 0, nil)}, approvers: []string{"alice"}, required: 1},
		{name: "two of two", tokens: []string{a.token(t, a.bob, 2, nil), a.token(t, a.alice, 2, nil)}, approvers: []string{"alice", "bob"}, required: 2},
		{name: "three of two", tokens: []string{a.token(t, a.alice, 2, nil), a.token(t, a.bob, 2, nil), a.token(t, a.carol, 2, nil)}, approvers: []string{"alice", "bob", "carol"}, required: 2},
		{name: "one asks for two, the other for nothing", tokens: []string{a.token(t, a.alice, 0, nil), a.token(t, a.bob, 2, nil)}, approvers: []string{"alice", "bob"}, required: 2},
		{name: "one of two", tokens: []string{a.token(t, a.alice, 2, nil)}, err: ErrNotEnoughApprovals, have: 1, need: 2},
		{name: "the same approver twice counts once", tokens: []string{a.token(t, a.alice, 2, nil), a.token(t, a.alice, 2, nil)}, err: ErrNotEnoughApprovals, have: 1, need: 2, repeated: true},
		{name: "the largest approvals_required governs", tokens: []string{a.token(t, a.alice, 2, nil), a.token(t, a.bob, 3, nil)}, err: ErrNotEnoughApprovals, have: 2, need: 3},
		{name: "the same approver twice where one is enough", tokens: []string{a.token(t, a.alice, 0, nil), a.token(t, a.alice, 0, nil)}, err: ErrDuplicateApprover},
		{name: "the same token twice", tokens: []string{same, same}, err: ErrReplayed},
		{name: "a token for another request", tokens: []string{a.token(t, a.alice, 2, nil), a.token(t, a.bob, 2, func(c *Claims) { c.Subject = "req-aaaaaaaaaaaa" })}, err: ErrOtherRequest},
		{name: "a token for other parameters", tokens: []string{a.token(t, a.alice, 2, nil), a.token(t, a.bob, 2, func(c *Claims) { c.ParamsHash = strings.Repeat("0", 64) })}, err: ErrParamsMismatch},
		{name: "a token for another plan", tokens: []string{a.token(t, a.alice, 2, nil), a.token(t, a.bob, 2, func(c *Claims) { c.PlanDigest = "sha256:other" })}, err: ErrPlanMismatch},
		{name: "an expired second token", tokens: []string{a.token(t, a.alice, 2, nil), a.token(t, a.bob, 2, func(c *Claims) {
			c.IssuedAt, c.NotBefore, c.Expiry = a.now.Add(-20*time.Minute), a.now.Add(-20*time.Minute), a.now.Add(-time.Minute)
		})}, err: ErrExpired},
		{name: "a second token from an untrusted key", tokens: []string{a.token(t, a.alice, 2, nil), a.token(t, mallory, 2, nil)}, err: ErrUnknownKey},
		{name: "a forged second token", tokens: []string{a.token(t, a.alice, 2, nil), flipSignature(a.token(t, a.bob, 2, nil))}, err: ErrBadSignature},
		{name: "an empty token in the list", tokens: []string{a.token(t, a.alice, 2, nil), ""}, err: ErrMalformed},
		{name: "no token", tokens: nil, err: ErrMalformed},
		{name: "more tokens than approvers can be required", tokens: many, err: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ledger := newMemLedger()
			got, err := a.v.ConsumeAll(context.Background(), tt.tokens, a.want, ledger)
			_, dryErr := a.v.CheckDryRunAll(tt.tokens, a.want)
			if tt.err == nil {
				if err != nil || dryErr != nil {
					t.Fatalf("ConsumeAll: %v; CheckDryRunAll: %v", err, dryErr)
				}
				if fmt.Sprint(got.Approvers) != fmt.Sprint(tt.approvers) || got.Required != tt.required || len(got.Claims) != len(tt.tokens) {
					t.Errorf("approvals = %v, %d required, %d claims; want %v, %d", got.Approvers, got.Required, len(got.Claims), tt.approvers, tt.required)
				}
				if ledger.len() != len(tt.tokens) {
					t.Errorf("ledger has %d entries, want %d", ledger.len(), len(tt.tokens))
				}
				return
			}
			if !errors.Is(err, tt.err) || !errors.Is(dryErr, tt.err) {
				t.Fatalf("ConsumeAll error = %v, CheckDryRunAll error = %v; want %v", err, dryErr, tt.err)
			}
			for _, other := range tokenSentinels {
				if other != tt.err && errors.Is(err, other) {
					t.Errorf("error %v also matches %v", err, other)
				}
			}
			if ledger.len() != 0 {
				t.Errorf("a refused set recorded %d token IDs", ledger.len())
			}
			var ne *NotEnoughApprovalsError
			if tt.err == ErrNotEnoughApprovals {
				if !errors.As(err, &ne) || ne.Have != tt.have || ne.Need != tt.need || ne.Repeated != tt.repeated {
					t.Fatalf("error %#v, want %d of %d (repeated %v)", err, tt.have, tt.need, tt.repeated)
				}
				if want := fmt.Sprintf("%d of %d approvals", tt.have, tt.need); !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
				if tt.repeated != strings.Contains(err.Error(), "the same approver twice counts once") {
					t.Errorf("error %q and repeated %v", err, tt.repeated)
				}
			}
		})
	}
}

// TestVerifierConsumeAllReplay: a set with one used token is refused and burns none of the others, which
// still admit a Job with fresh company; a replay of either token of an admitted pair is refused.
func TestVerifierConsumeAllReplay(t *testing.T) {
	a := newApproverSet(t)
	ctx := context.Background()
	ledger := newMemLedger()
	alice, bob := a.token(t, a.alice, 2, nil), a.token(t, a.bob, 2, nil)
	if _, err := a.v.ConsumeAll(ctx, []string{alice, bob}, a.want, ledger); err != nil {
		t.Fatalf("the pair: %v", err)
	}
	fresh := a.token(t, a.bob, 2, nil)
	if _, err := a.v.ConsumeAll(ctx, []string{alice, fresh}, a.want, ledger); !errors.Is(err, ErrReplayed) {
		t.Fatalf("alice's used token with bob's fresh one: %v, want ErrReplayed", err)
	}
	if c, _ := UnverifiedClaims(fresh); ledger.seen[c.ID] != (time.Time{}) {
		t.Fatal("the refused set burnt bob's fresh token")
	}
	if _, err := a.v.ConsumeAll(ctx, []string{a.token(t, a.carol, 2, nil), bob}, a.want, ledger); !errors.Is(err, ErrReplayed) {
		t.Fatalf("bob's used token with carol's: %v, want ErrReplayed", err)
	}
	if _, err := a.v.ConsumeAll(ctx, []string{a.token(t, a.alice, 2, nil), fresh}, a.want, ledger); err != nil {
		t.Fatalf("bob's unburnt token with a fresh one of alice: %v", err)
	}
	if _, err := a.v.ConsumeAll(ctx, []string{a.token(t, a.alice, 2, nil), a.token(t, a.bob, 2, nil)}, a.want, failingLedger{errors.New("down")}); err == nil {
		t.Fatal("a failing ledger admitted a pair")
	}
}

// TestVerifierConsumeAllConcurrent races 64 Jobs carrying one pair of approvals, half of them listing the
// tokens in the other order: at most one is admitted, and exactly one when all list them alike.
func TestVerifierConsumeAllConcurrent(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("mixed order=%v", mixed), func(t *testing.T) {
			a := newApproverSet(t)
			alice, bob := a.token(t, a.alice, 2, nil), a.token(t, a.bob, 2, nil)
			ledger := newMemLedger()
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			start := make(chan struct{})
			for i := range 64 {
				set := []string{alice, bob}
				if mixed && i%2 == 1 {
					set = []string{bob, alice}
				}
				wg.Go(func() {
					<-start
					_, err := a.v.ConsumeAll(context.Background(), set, a.want, ledger)
					errs <- err
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			if ok := admitted(t, errs); ok > 1 || (!mixed && ok != 1) {
				t.Errorf("%d Jobs admitted with one pair of approvals", ok)
			}
		})
	}
}

// TestApprovalsRequiredClaim: approvals_required is signed with the rest, written only when more than 1, read
// back as written, and bounded by Sign.
func TestApprovalsRequiredClaim(t *testing.T) {
	f := newTokenFixture(t)
	payload := func(tok string) map[string]any {
		b, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for need, want := range map[int]any{0: nil, 1: nil, 2: float64(2), MaxApprovers: float64(MaxApprovers)} {
		m := payload(f.sign(t, func(c *Claims) { c.ApprovalsRequired = need }))
		if m["approvals_required"] != want {
			t.Errorf("approvals_required %d is written as %#v, want %#v", need, m["approvals_required"], want)
		}
	}
	for _, need := range []int{-1, MaxApprovers + 1} {
		c := f.claims
		c.ApprovalsRequired = need
		if _, err := Sign(f.key, c); err == nil {
			t.Errorf("Sign accepted approvals_required %d", need)
		}
	}
	c := f.claims
	c.ApprovalsRequired = 2
	back, err := UnverifiedClaims(mustSign(t, f.key, c))
	if err != nil || back.ApprovalsRequired != 2 || !back.EqualWire(&c) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	one := f.claims
	one.ApprovalsRequired = 1
	if !one.EqualWire(&f.claims) {
		t.Error("approvals_required 1 and absent differ on the wire")
	}
}

// flipSignature changes the first character of a token's signature.
func flipSignature(tok string) string {
	i := strings.LastIndexByte(tok, '.')
	return tok[:i+1] + flipFirstChar(tok[i+1:])
}
