package approval

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

const (
	// MaxTokenTTL is the longest an approval token may live, from issue to expiry. Sign refuses longer
	// lifetimes and verification rejects tokens that claim one.
	MaxTokenTTL = 30 * time.Minute
	// DefaultTokenTTL is the lifetime of a token when the approver does not choose a shorter one.
	DefaultTokenTTL = MaxTokenTTL
	// ClockSkew is how far in the future a token's nbf and iat may lie, to absorb clock differences between the
	// approver's machine and the cluster. It is deliberately not applied to exp: an expired approval is expired.
	ClockSkew = 30 * time.Second
	// TokenType is the JWS "typ" header of approval tokens (RFC 8725 section 3.11), so that no other kind of
	// JWT signed by the same key can pass as an approval.
	TokenType = "approval+jwt"
	// MaxApprovers is the most approvals a call can require, and so the most approval tokens one Job may carry.
	MaxApprovers = 16
	// maxTokenLength bounds the input a verifier looks at.
	maxTokenLength = 8 << 10
)

// Claims is what an approval token asserts: approver Issuer approves, for the cluster Audience, the request
// Subject, which runs Tool with the parameters whose ParamsHash is given in Namespace (and, for
// terraform_apply, applies the plan with PlanDigest), between NotBefore and Expiry. ID is the token's unique
// ID (jti), recorded on use so the token works once. ApprovalsRequired is how many distinct approvers the
// approver's own tool found the call needs (a risky plan may need two): the call is admitted only with that
// many approvers' tokens.
//
// On the wire these are the JWT claims iss, aud (a single string), sub, jti, iat, nbf, exp (NumericDate,
// whole seconds) and the private claims tool, params_hash, namespace, plan_digest (omitted when empty) and
// approvals_required (omitted when 1, and absent means 1), all of them signed.
type Claims struct {
	Issuer     string    // approver key ID; also the JWS "kid" header
	Audience   string    // cluster ID
	Subject    string    // approval request ID
	ID         string    // random 128-bit token ID (jti), 32 hex characters
	IssuedAt   time.Time // iat
	NotBefore  time.Time // nbf
	Expiry     time.Time // exp
	Tool       string    // tool name
	ParamsHash string    // ParamsHash(Tool, params)
	Namespace  string    // target namespace
	PlanDigest string    // digest of the saved plan being applied; empty for other tools
	// ApprovalsRequired is the number of distinct approvers the call needs, 1 to MaxApprovers; 0 means 1.
	ApprovalsRequired int
}

// RequiredApprovals is ApprovalsRequired, with 0 (the claim absent) read as 1.
func (c *Claims) RequiredApprovals() int { return max(c.ApprovalsRequired, 1) }

// privateClaims are the non-registered claims of an approval token.
type privateClaims struct {
	Tool       string `json:"tool"`
	ParamsHash string `json:"params_hash"`
	Namespace  string `json:"namespace"`
	PlanDigest string `json:"plan_digest,omitempty"`
	// ApprovalsRequired is written only when more than 1, so a token of a one-person approval reads as before.
	ApprovalsRequired int `json:"approvals_required,omitempty"`
}

// NewTokenID returns a fresh random 128-bit token ID in hex.
func NewTokenID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token ID: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// NewClaims returns the claims that approve req: signed by keyID, for audience, issued (and valid from) now
// truncated to the second, expiring ttl later (DefaultTokenTTL when ttl is 0), with a fresh token ID, asking
// for req.ApprovalsRequired approvers.
func NewClaims(req *Request, keyID, audience string, now time.Time, ttl time.Duration) (Claims, error) {
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	if ttl < 0 || ttl > MaxTokenTTL {
		return Claims{}, fmt.Errorf("token lifetime %s is outside (0, %s]", ttl, MaxTokenTTL)
	}
	id, err := NewTokenID()
	if err != nil {
		return Claims{}, err
	}
	iat := now.Truncate(time.Second)
	return Claims{
		Issuer:     keyID,
		Audience:   audience,
		Subject:    req.ID,
		ID:         id,
		IssuedAt:   iat,
		NotBefore:  iat,
		Expiry:     iat.Add(ttl),
		Tool:       req.Tool,
		ParamsHash: req.ParamsHash,
		Namespace:  req.Namespace,
		PlanDigest: req.PlanDigest,

		ApprovalsRequired: req.ApprovalsRequired,
	}, nil
}

// validate checks that c is complete and within the lifetime limit. Times are compared in whole seconds, the
// precision they travel with.
func (c *Claims) validate() error {
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"iss", c.Issuer}, {"aud", c.Audience}, {"sub", c.Subject}, {"jti", c.ID}, {"tool", c.Tool},
	} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	for _, f := range []struct {
		name  string
		value time.Time
	}{{"iat", c.IssuedAt}, {"nbf", c.NotBefore}, {"exp", c.Expiry}} {
		if f.value.IsZero() {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing claims %s", ErrMalformed, strings.Join(missing, ", "))
	}
	if !isParamsHash(c.ParamsHash) {
		return fmt.Errorf("%w: params_hash is not a SHA-256 hex digest", ErrMalformed)
	}
	if c.ApprovalsRequired < 0 || c.ApprovalsRequired > MaxApprovers {
		return fmt.Errorf("%w: approvals_required %d is outside [1, %d]", ErrMalformed, c.ApprovalsRequired, MaxApprovers)
	}
	iat, nbf, exp := c.IssuedAt.Unix(), c.NotBefore.Unix(), c.Expiry.Unix()
	if exp <= iat || exp <= nbf {
		return fmt.Errorf("%w: expiry is not after issue", ErrMalformed)
	}
	if time.Duration(exp-iat)*time.Second > MaxTokenTTL {
		return fmt.Errorf("%w: lifetime %s exceeds the maximum %s", ErrMalformed, time.Duration(exp-iat)*time.Second, MaxTokenTTL)
	}
	return nil
}

// Sign returns the approval token for c, a JWS in compact serialization signed with EdDSA by key, with
// headers alg "EdDSA", kid key.KeyID() and typ TokenType. An empty c.Issuer is set to key.KeyID(); any other
// issuer is refused. All other claims must be set (see NewClaims), and the lifetime may not exceed MaxTokenTTL.
func Sign(key *PrivateKey, c Claims) (string, error) {
	if key == nil {
		return "", errors.New("sign approval: no key")
	}
	if c.Issuer == "" {
		c.Issuer = key.id
	}
	if c.Issuer != key.id {
		return "", fmt.Errorf("sign approval: issuer %q is not the signing key %q", c.Issuer, key.id)
	}
	if err := c.validate(); err != nil {
		return "", fmt.Errorf("sign approval: %w", err)
	}
	signer, err := jose.NewSigner(
		jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: key.key, KeyID: key.id}},
		(&jose.SignerOptions{}).WithType(TokenType),
	)
	if err != nil {
		return "", fmt.Errorf("sign approval: %w", err)
	}
	reg := jwt.Claims{
		Issuer:    c.Issuer,
		Subject:   c.Subject,
		Audience:  jwt.Audience{c.Audience},
		Expiry:    jwt.NewNumericDate(c.Expiry),
		NotBefore: jwt.NewNumericDate(c.NotBefore),
		IssuedAt:  jwt.NewNumericDate(c.IssuedAt),
		ID:        c.ID,
	}
	priv := privateClaims{Tool: c.Tool, ParamsHash: c.ParamsHash, Namespace: c.Namespace, PlanDigest: c.PlanDigest}
	if n := c.RequiredApprovals(); n > 1 {
		priv.ApprovalsRequired = n
	}
	token, err := jwt.Signed(signer).Claims(reg).Claims(priv).Serialize()
	if err != nil {
		return "", fmt.Errorf("sign approval: %w", err)
	}
	return token, nil
}

// Expectation is what the admission webhook derived from the object it admits: the tool, the hash of its
// parameters, the target namespace and, for terraform_apply, the digest of the plan being applied. A token is
// accepted only if its claims equal all four (an empty PlanDigest matches only a token without one).
type Expectation struct {
	Tool       string
	ParamsHash string
	Namespace  string
	PlanDigest string
}

func (e Expectation) validate() error {
	if e.Tool == "" || !isParamsHash(e.ParamsHash) {
		return errors.New("approval expectation needs a tool and a SHA-256 params hash")
	}
	return nil
}

// Ledger remembers which token IDs were used. The admission webhook provides one that is shared by all its
// replicas (for example, creating an object named after the ID and treating "already exists" as a replay).
type Ledger interface {
	// Record stores tokenID atomically: of any number of concurrent calls with the same ID, across all
	// replicas, exactly one succeeds and the others return an error wrapping ErrReplayed. The ID must be kept
	// at least until expires plus ClockSkew (a margin for clocks that differ between replicas); after that the
	// token is refused as expired anyway.
	Record(ctx context.Context, tokenID string, expires time.Time) error
	// Seen reports whether tokenID was recorded before, and records nothing. It may miss a Record that is
	// under way (Record decides); it must never report an ID that was not recorded.
	Seen(ctx context.Context, tokenID string) (bool, error)
}

// Verifier checks approval tokens against a set of trusted approver keys and one audience (the cluster ID).
type Verifier struct {
	keys     *KeySet
	audience string
	now      func() time.Time
	// maxLifetime is the policy's token lifetime (spec.approval.tokenTTL); MaxTokenTTL when zero.
	maxLifetime time.Duration
}

// NewVerifier returns a Verifier trusting keys, accepting only tokens addressed to audience, and reading the
// time from now (time.Now if nil). A Verifier without keys or without an audience accepts nothing.
func NewVerifier(keys *KeySet, audience string, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{keys: keys, audience: audience, now: now}
}

// WithMaxLifetime makes v refuse (ErrTooLong) a token whose lifetime, from issue to expiry, is longer than
// d: the policy's spec.approval.tokenTTL, which may only shorten MaxTokenTTL. It returns v.
func (v *Verifier) WithMaxLifetime(d time.Duration) *Verifier {
	if d > 0 && d < MaxTokenTTL {
		v.maxLifetime = d
	}
	return v
}

// Approvals is what a verified set of approval tokens for one call says.
type Approvals struct {
	// Claims are the tokens' claims, in the order the tokens were given.
	Claims []*Claims
	// Approvers are the distinct approver key IDs, sorted.
	Approvers []string
	// Required is the number of distinct approvers the call needs: the largest approvals_required of the
	// tokens (1 when none asks for more).
	Required int
}

// NotEnoughApprovalsError is the refusal of a set of tokens signed by fewer distinct approvers than the call
// needs. It matches ErrNotEnoughApprovals.
type NotEnoughApprovalsError struct {
	Have, Need int // distinct approvers, and approvers needed
	// Repeated is set when one approver signed more than one of the tokens: the same approver twice counts once.
	Repeated bool
}

func (e *NotEnoughApprovalsError) Error() string {
	msg := fmt.Sprintf("%s: %d distinct approvers needed", Progress(e.Have, e.Need), e.Need)
	if e.Repeated {
		msg += " (the same approver twice counts once)"
	}
	return msg
}

// Is makes errors.Is(err, ErrNotEnoughApprovals) hold.
func (e *NotEnoughApprovalsError) Is(target error) bool { return target == ErrNotEnoughApprovals }

// Progress says that have of need approvals are given, as "1 of 2 approvals" (or "0 of 1 approval").
func Progress(have, need int) string {
	if need == 1 {
		return fmt.Sprintf("%d of 1 approval", have)
	}
	return fmt.Sprintf("%d of %d approvals", have, need)
}

// Consume verifies token against want and, only if every check passed, records its ID in ledger, so that the
// token can never be accepted again. It is ConsumeAll of a single token: a token that asks for more than one
// approver is refused on its own (ErrNotEnoughApprovals).
//
// The checks, each failing with its own sentinel: well-formed compact JWS with typ TokenType (ErrMalformed);
// alg EdDSA (ErrBadSignature); kid in the key set (ErrUnknownKey); signature valid for that key
// (ErrBadSignature); iss equal to kid and all claims present (ErrMalformed); audience (ErrWrongAudience); not
// past exp, no skew (ErrExpired); nbf and iat not later than now plus ClockSkew (ErrNotYetValid); lifetime at
// most MaxTokenTTL (ErrMalformed) and at most the policy's (ErrTooLong, see WithMaxLifetime); tool (ErrWrongTool); params hash (ErrParamsMismatch); namespace
// (ErrWrongNamespace); plan digest (ErrPlanMismatch); approvals required (ErrNotEnoughApprovals); and finally
// the ledger (ErrReplayed).
func (v *Verifier) Consume(ctx context.Context, token string, want Expectation, ledger Ledger) (*Claims, error) {
	a, err := v.ConsumeAll(ctx, []string{token}, want, ledger)
	if err != nil {
		return nil, err
	}
	return a.Claims[0], nil
}

// ConsumeAll verifies the approval tokens one Job carries against want and, only if every check passed,
// records every token's ID in ledger. It is the only way to accept approvals: there is deliberately no
// verify-only call for real requests.
//
// Each token must pass every check of Consume but the count. Together they must approve one request (the same
// subject; ErrOtherRequest), be signed by as many distinct approvers as the largest approvals_required among
// them asks for (ErrNotEnoughApprovals, a *NotEnoughApprovalsError saying "1 of 2 approvals"; the same
// approver twice counts once), and not repeat an approver (ErrDuplicateApprover). Then the ledger: every ID is
// looked up first and, if none was used (else ErrReplayed), each is recorded (ErrReplayed if one was used in
// the meantime). So a set with one used token burns none of the others, as far as the ledger allows: only a
// replay that races this very call can leave the IDs recorded before it spent.
func (v *Verifier) ConsumeAll(ctx context.Context, tokens []string, want Expectation, ledger Ledger) (*Approvals, error) {
	if ledger == nil {
		return nil, errors.New("consume approval: no ledger")
	}
	a, err := v.verifyAll(tokens, want)
	if err != nil {
		return nil, err
	}
	for _, c := range a.Claims {
		used, err := ledger.Seen(ctx, c.ID)
		if err != nil {
			return nil, fmt.Errorf("consume approval %s: %w", c.ID, err)
		}
		if used {
			return nil, fmt.Errorf("consume approval %s: %w", c.ID, ErrReplayed)
		}
	}
	for _, c := range a.Claims {
		if err := ledger.Record(ctx, c.ID, c.Expiry); err != nil {
			return nil, fmt.Errorf("consume approval %s: %w", c.ID, err)
		}
	}
	return a, nil
}

// CheckDryRun runs every check of Consume except the ledger: it consumes nothing, so the same token still
// works for the real request. It must only be used for admission requests with dryRun set, which persist
// nothing; using it for anything else would let one approval admit any number of objects.
func (v *Verifier) CheckDryRun(token string, want Expectation) (*Claims, error) {
	a, err := v.CheckDryRunAll([]string{token}, want)
	if err != nil {
		return nil, err
	}
	return a.Claims[0], nil
}

// CheckDryRunAll runs every check of ConsumeAll except the ledger, for admission dry runs (see CheckDryRun).
func (v *Verifier) CheckDryRunAll(tokens []string, want Expectation) (*Approvals, error) {
	return v.verifyAll(tokens, want)
}

// verifyAll verifies each token and then the set.
func (v *Verifier) verifyAll(tokens []string, want Expectation) (*Approvals, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%w: no token", ErrMalformed)
	}
	if len(tokens) > MaxApprovers {
		return nil, fmt.Errorf("%w: %d tokens, at most %d", ErrMalformed, len(tokens), MaxApprovers)
	}
	a := &Approvals{Claims: make([]*Claims, 0, len(tokens)), Required: 1}
	seen := map[string]bool{}
	repeated := false
	for i, tok := range tokens {
		c, err := v.verify(tok, want)
		if err != nil {
			if len(tokens) > 1 {
				return nil, fmt.Errorf("approval token %d of %d: %w", i+1, len(tokens), err)
			}
			return nil, err
		}
		if first := a.Claims; len(first) > 0 && c.Subject != first[0].Subject {
			// Tool, parameters, namespace and plan are each the expectation's already.
			return nil, fmt.Errorf("%w: token %d approves %q, token 1 %q", ErrOtherRequest, i+1, c.Subject, first[0].Subject)
		}
		for _, o := range a.Claims {
			if o.ID == c.ID {
				return nil, fmt.Errorf("%w: token ID %s twice", ErrReplayed, c.ID)
			}
		}
		a.Claims = append(a.Claims, c)
		a.Required = max(a.Required, c.RequiredApprovals())
		if seen[c.Issuer] {
			repeated = true
			continue
		}
		seen[c.Issuer] = true
		a.Approvers = append(a.Approvers, c.Issuer)
	}
	slices.Sort(a.Approvers)
	if len(a.Approvers) < a.Required {
		return nil, &NotEnoughApprovalsError{Have: len(a.Approvers), Need: a.Required, Repeated: repeated}
	}
	if repeated {
		return nil, ErrDuplicateApprover
	}
	return a, nil
}

// tokenHeader is the part of the JOSE header looked at before verification.
type tokenHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ"`
}

// splitCompact checks the compact serialization strictly (three canonical unpadded base64url parts, so a token
// has exactly one spelling) and returns the decoded header.
func splitCompact(token string) (tokenHeader, error) {
	var h tokenHeader
	if len(token) > maxTokenLength {
		return h, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, maxTokenLength)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return h, fmt.Errorf("%w: not a compact JWS", ErrMalformed)
	}
	enc := base64.RawURLEncoding.Strict()
	var header []byte
	for i, p := range parts {
		if p == "" && i < 2 {
			// An empty signature is left to fail verification, so that alg "none" tokens are refused as
			// unsigned (ErrBadSignature) rather than as malformed.
			return h, fmt.Errorf("%w: empty part %d", ErrMalformed, i)
		}
		b, err := enc.DecodeString(p)
		if err != nil {
			return h, fmt.Errorf("%w: part %d is not base64url", ErrMalformed, i)
		}
		if i == 0 {
			header = b
		}
	}
	if err := json.Unmarshal(header, &h); err != nil {
		return h, fmt.Errorf("%w: header: %w", ErrMalformed, err)
	}
	return h, nil
}

// tokenClaims is the decoded payload of an approval token.
type tokenClaims struct {
	jwt.Claims
	privateClaims
}

func (t *tokenClaims) claims() *Claims {
	c := &Claims{
		Issuer:     t.Issuer,
		Subject:    t.Subject,
		ID:         t.ID,
		Tool:       t.Tool,
		ParamsHash: t.ParamsHash,
		Namespace:  t.Namespace,
		PlanDigest: t.PlanDigest,

		ApprovalsRequired: t.ApprovalsRequired,
	}
	if len(t.Audience) == 1 {
		c.Audience = t.Audience[0]
	}
	if t.IssuedAt != nil {
		c.IssuedAt = t.IssuedAt.Time()
	}
	if t.NotBefore != nil {
		c.NotBefore = t.NotBefore.Time()
	}
	if t.Expiry != nil {
		c.Expiry = t.Expiry.Time()
	}
	return c
}

func decodeClaims(payload []byte) (*Claims, error) {
	var tc tokenClaims
	if err := json.Unmarshal(payload, &tc); err != nil {
		return nil, fmt.Errorf("%w: claims: %w", ErrMalformed, err)
	}
	if len(tc.Audience) > 1 {
		return nil, fmt.Errorf("%w: more than one audience", ErrMalformed)
	}
	c := tc.claims()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (v *Verifier) verify(token string, want Expectation) (*Claims, error) {
	if err := want.validate(); err != nil {
		return nil, err
	}
	if v.audience == "" || v.keys.Len() == 0 {
		return nil, errors.New("approval verifier has no audience or no keys")
	}
	h, err := splitCompact(token)
	if err != nil {
		return nil, err
	}
	if h.Alg != string(jose.EdDSA) {
		return nil, fmt.Errorf("%w: algorithm %q is not EdDSA", ErrBadSignature, h.Alg)
	}
	if h.Typ != TokenType {
		return nil, fmt.Errorf("%w: typ %q is not %q", ErrMalformed, h.Typ, TokenType)
	}
	pub, ok := v.keys.lookup(h.Kid)
	if !ok {
		return nil, fmt.Errorf("%w: kid %q", ErrUnknownKey, h.Kid)
	}
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(jws.Signatures) != 1 || jws.Signatures[0].Header.KeyID != h.Kid {
		return nil, fmt.Errorf("%w: ambiguous header", ErrMalformed)
	}
	payload, err := jws.Verify(pub)
	if err != nil {
		return nil, fmt.Errorf("%w: key %q", ErrBadSignature, h.Kid)
	}
	c, err := decodeClaims(payload)
	if err != nil {
		return nil, err
	}
	if c.Issuer != h.Kid {
		return nil, fmt.Errorf("%w: issuer %q is not the signing key %q", ErrMalformed, c.Issuer, h.Kid)
	}
	if c.Audience != v.audience {
		return nil, fmt.Errorf("%w: %q", ErrWrongAudience, c.Audience)
	}
	if v.maxLifetime > 0 && c.Expiry.Sub(c.IssuedAt) > v.maxLifetime {
		return nil, fmt.Errorf("%w: %s, the policy allows %s", ErrTooLong, c.Expiry.Sub(c.IssuedAt), v.maxLifetime)
	}
	now := v.now()
	if !now.Before(c.Expiry) {
		return nil, fmt.Errorf("%w: at %s", ErrExpired, c.Expiry.UTC().Format(time.RFC3339))
	}
	if c.NotBefore.After(now.Add(ClockSkew)) || c.IssuedAt.After(now.Add(ClockSkew)) {
		return nil, fmt.Errorf("%w: valid from %s", ErrNotYetValid, c.NotBefore.UTC().Format(time.RFC3339))
	}
	switch {
	case c.Tool != want.Tool:
		return nil, fmt.Errorf("%w: token is for %q", ErrWrongTool, c.Tool)
	case c.ParamsHash != want.ParamsHash:
		return nil, ErrParamsMismatch
	case c.Namespace != want.Namespace:
		return nil, fmt.Errorf("%w: token is for %q", ErrWrongNamespace, c.Namespace)
	case c.PlanDigest != want.PlanDigest:
		return nil, ErrPlanMismatch
	}
	return c, nil
}

// UnverifiedClaims decodes a token's claims without checking its signature. Store.Grant uses it only to check
// that a token it is given matches the claims it is told, never to trust anything.
// ClaimedApprovers are the sorted, distinct approver key IDs that tokens claim to be signed by, read
// without verifying them: what a Job's rendering says of its approvers ({{approvers}}). It decides nothing:
// the webhook admits the Job only after verifying every token (ConsumeAll), so an admitted Job's claimed
// approvers are its verified ones. A token that cannot be read claims nobody.
func ClaimedApprovers(tokens []string) []string {
	var ids []string
	for _, t := range tokens {
		if c, err := UnverifiedClaims(t); err == nil && c.Issuer != "" {
			ids = append(ids, c.Issuer)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// UnverifiedClaims reads a token's claims WITHOUT checking its signature: for bookkeeping of a token that
// the admission webhook verifies (the approvals store records which approver granted what). Never decide on them.
func UnverifiedClaims(token string) (*Claims, error) {
	if _, err := splitCompact(token); err != nil {
		return nil, err
	}
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return decodeClaims(jws.UnsafePayloadWithoutVerification())
}

// EqualWire reports whether two claims are equal at the precision they travel with.
func (c *Claims) EqualWire(o *Claims) bool {
	return c.Issuer == o.Issuer && c.Audience == o.Audience && c.Subject == o.Subject && c.ID == o.ID &&
		c.IssuedAt.Unix() == o.IssuedAt.Unix() && c.NotBefore.Unix() == o.NotBefore.Unix() &&
		c.Expiry.Unix() == o.Expiry.Unix() && c.Tool == o.Tool && c.ParamsHash == o.ParamsHash &&
		c.Namespace == o.Namespace && c.PlanDigest == o.PlanDigest && c.RequiredApprovals() == o.RequiredApprovals()
}
