package broker

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/atomicfile"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// Event names the agent writes, one JSON line each, on its event stream (the sidecar's stdout).
const (
	EventIssued       = "credential.issued"
	EventRevoked      = "credential.revoked"
	EventRevokeFailed = "credential.revoke_failed"
	// EventToolResult carries the tool's result: the one JSON object the tool wrote into its result file,
	// scrubbed, under "result" (or "error" when there is none or it is not a JSON object). It is the only
	// channel a result travels on: the tool's own output is never parsed.
	EventToolResult = "tool.result"
)

// MaxResultBytes bounds a tool's result (a saved plan travels in it, base64).
const MaxResultBytes = 4 << 20

// resultBinaryFields are result fields that hold binary data (base64) rather than text: a saved plan.
// They are checked for the credential's exact values but not pattern-scrubbed, which could corrupt them.
var resultBinaryFields = map[string]bool{"plan": true}

// Agent timing defaults.
const (
	DefaultLoginTimeout = 20 * time.Second
	// revokeTimeout bounds the revocation after the stop signal; the kubelet's grace period is longer.
	revokeTimeout = 10 * time.Second
)

// AgentConfig is what the credential agent needs; the admission webhook renders it as flags.
type AgentConfig struct {
	// VaultAddr is Vault's URL; VaultCAFile, when set, is the CA bundle that signs Vault's certificate.
	VaultAddr   string
	VaultCAFile string
	// VaultNamespace, when set, is the Vault Enterprise / HCP Vault namespace the auth method and the
	// secrets engine live in (the policy's spec.sandbox.credentialAgent.vaultNamespace).
	VaultNamespace string
	// AuthMount and AuthRole: where and as whom to log in.
	AuthMount string
	AuthRole  string
	// SecretsMount and SecretsRole: which Kubernetes secrets engine role mints the credential.
	SecretsMount string
	SecretsRole  string
	// Namespace is the target namespace the credential is for.
	Namespace string
	// Scope names the credential scope; it only labels events.
	Scope string
	// TokenFile holds the projected service-account token (audience: Vault) to log in with.
	TokenFile string
	// APIServer and APICAFile describe the API server the written kubeconfig points at.
	APIServer string
	APICAFile string
	// Out is where the kubeconfig is written.
	Out string
	// ResultFile, when set, is the tool's result file: the agent reports it as a tool.result event once
	// the credential is revoked.
	ResultFile string
	// DoneFile, when set (a warm Pod), is the marker the warm entry point writes once the claimed tool has
	// exited: the agent revokes and reports as soon as it appears, without waiting for the kubelet's stop
	// signal, and then stays up until that signal (a native sidecar that exits is restarted).
	DoneFile string
	// LoginTimeout bounds login and minting together, retries on transient errors included.
	LoginTimeout time.Duration
	// Events receives one JSON line per event. Nil discards them.
	Events io.Writer
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Validate reports every missing setting at once.
func (c *AgentConfig) Validate() error {
	var errs []error
	for _, f := range []struct{ name, value string }{
		{"vault address", c.VaultAddr}, {"auth mount", c.AuthMount}, {"auth role", c.AuthRole},
		{"secrets mount", c.SecretsMount}, {"secrets role", c.SecretsRole}, {"namespace", c.Namespace},
		{"token file", c.TokenFile}, {"API server", c.APIServer}, {"API server CA file", c.APICAFile},
		{"output path", c.Out},
	} {
		if strings.TrimSpace(f.value) == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.name))
		}
	}
	if c.LoginTimeout <= 0 {
		errs = append(errs, errors.New("login timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Agent fetches one credential, keeps it available as a kubeconfig file while the Pod runs, and revokes it
// when told to stop.
type Agent struct {
	cfg    AgentConfig
	client *Client

	mu   sync.Mutex
	cred *Credential
	// tokenExpiry is when the Vault token ends; Vault then revokes the lease by itself.
	tokenExpiry time.Time
	// scrubber removes the values the agent holds by value from events and errors (invariant 6: scrubbed by
	// the exact bytes issued, not only by pattern). Nil (patterns only) before Issue read the login token.
	scrubber *scrub.Scrubber
	// secrets are the values the agent holds, as Issue comes to hold them: the Pod's login token, the Vault
	// token the login returned, the credential's token.
	secrets [][]byte
	// loggedIn is set once Vault gave the agent a token and cleared once that token is revoked: while it is
	// set, a credential of this agent may be valid.
	loggedIn bool
}

// MayHoldCredential reports whether a Vault token of this agent, and so a credential it minted, may still be
// valid: it logged in and has not revoked the token since. A restarted agent may issue only when its
// predecessor's answer was false.
func (a *Agent) MayHoldCredential() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.loggedIn
}

func (a *Agent) setLoggedIn(v bool) {
	a.mu.Lock()
	a.loggedIn = v
	a.mu.Unlock()
}

// NewAgent checks the configuration and prepares the Vault client; it makes no request.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Events == nil {
		cfg.Events = io.Discard
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	client, err := NewClient(cfg.VaultAddr, cfg.VaultCAFile, cfg.VaultNamespace)
	if err != nil {
		return nil, err
	}
	client.now = cfg.Now
	return &Agent{cfg: cfg, client: client}, nil
}

// Run issues the credential, waits until ctx is done (the kubelet's SIGTERM once the tool has exited),
// then revokes it and reports the tool's result. An error before the credential is written means no
// kubeconfig exists and the tool never starts; an error after it means revocation failed and the lease
// ends with its TTL instead — and then the result is withheld (ReportResult), since the credential is live.
func (a *Agent) Run(ctx context.Context) error {
	if _, err := a.Issue(ctx); err != nil {
		return err
	}
	a.waitDone(ctx)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	err := a.Revoke(rctx)
	a.ReportResult()
	if a.cfg.DoneFile != "" {
		<-ctx.Done()
	}
	return err
}

// donePoll is how often a warm Pod's agent looks for the done marker: a stat of a memory-backed file. Under
// gVisor each look costs about 1.5 ms of CPU (a timer wake-up and a stat), so 5 ms took a quarter of a core
// for as long as the tool ran — a Terraform run for tens of seconds; 20 ms adds 10 ms to a call on average.
const donePoll = 20 * time.Millisecond

// waitDone returns when ctx is done or, with a DoneFile, when that file exists.
func (a *Agent) waitDone(ctx context.Context) {
	if a.cfg.DoneFile == "" {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(donePoll)
	defer t.Stop()
	for {
		if _, err := os.Stat(a.cfg.DoneFile); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ReportResult emits the tool's result file as a tool.result event. The tool has exited (the kubelet
// stops the sidecar only then). The result is parsed as one JSON object and scrubbed — its text fields by
// the patterns and by the exact values of the credential this agent issued, its binary fields (a saved
// plan) refused if they hold one of those values or their encodings, in their bytes or, for a zip archive
// (a saved plan is one, its entries compressed), in any entry unpacked — so nothing the tool wrote carries
// the credential out.
//
// Scrubbing finds only the encodings it knows; a tool may write the token in any other (hex, split in two).
// So the result is released only once no credential of this agent may be valid: it was revoked, had
// expired, or was never issued. While one may still be (Revoke not called yet, or Vault failed or refused
// the revocation), the tool.result event carries errWithheld instead, and the result stays in the Pod.
func (a *Agent) ReportResult() {
	if a.cfg.ResultFile == "" {
		return
	}
	code, hasCode := a.exitCode()
	fail := func(why string) {
		ev := map[string]any{"error": why}
		if hasCode {
			ev["exit_code"] = code
		}
		a.emit(EventToolResult, ev)
	}
	if a.MayHoldCredential() {
		fail(errWithheld)
		return
	}
	f, err := os.Open(a.cfg.ResultFile)
	if err != nil {
		fail("the tool wrote no result")
		return
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, MaxResultBytes+1))
	switch {
	case err != nil:
		fail("the tool's result cannot be read")
		return
	case len(raw) > MaxResultBytes:
		fail(fmt.Sprintf("the tool's result is larger than %d bytes", MaxResultBytes))
		return
	}
	var result map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&result); err != nil || dec.More() || result == nil {
		fail("the tool's result is not one JSON object")
		return
	}
	sc := a.Scrubber()
	clean := make(map[string]any, len(result))
	for k, v := range result {
		if s, ok := v.(string); ok && resultBinaryFields[k] {
			if sc.String(s) != s || a.holdsSecret(sc, s) {
				fail("the tool's result holds the credential")
				return
			}
			clean[k] = s
			continue
		}
		clean[k] = v
	}
	for k, v := range sc.Value(withoutBinary(clean)).(map[string]any) {
		clean[k] = v
	}
	ev := map[string]any{"result": clean}
	if hasCode {
		ev["exit_code"] = code
	}
	a.emitRaw(EventToolResult, ev)
}

// errWithheld is the tool.result error of a result withheld because the credential may still be valid.
const errWithheld = "the credential could not be revoked; the tool's result is withheld"

// exitCode is the claimed tool's exit code, which a warm Pod's entry point writes into the done marker.
func (a *Agent) exitCode() (int, bool) {
	if a.cfg.DoneFile == "" {
		return 0, false
	}
	b, err := os.ReadFile(a.cfg.DoneFile)
	if err != nil || len(b) > 8 {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

func withoutBinary(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if !resultBinaryFields[k] {
			out[k] = v
		}
	}
	return out
}

// maxUnpackedBytes bounds how much the agent unpacks of a binary field that is a zip archive (a saved plan)
// to look inside its entries, which it reads in small pieces (its memory limit is small): far more than the
// plan of a MaxResultBytes result unpacks to, far less than a zip bomb makes.
const maxUnpackedBytes = 128 << 20

// holdsSecret reports whether a binary field, decoded, holds one of the issued values (or one of their
// encodings). A saved plan is a zip archive whose entries Terraform compresses (Deflate), so the issued
// token would not appear among its bytes: the entries are unpacked and searched too. A field that is not
// base64, or an archive whose entries cannot all be read or that unpacks to more than maxUnpackedBytes,
// counts as holding one: what the agent cannot look inside, it does not let out.
func (a *Agent) holdsSecret(sc *scrub.Scrubber, b64 string) bool {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		// Not base64 (whole): its readers would decode what they can of it — the part before a stray '=',
		// say — which is no text the agent can scrub; and a binary field that does not decode is useless.
		return true
	}
	if sc.Holds(raw) {
		return true
	}
	for _, v := range a.secrets {
		if len(v) > 0 && bytes.Contains(raw, v) {
			return true
		}
	}
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		// Not an archive: its bytes, searched above, are all there is.
		return false
	}
	budget := &countingReader{left: maxUnpackedBytes}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			return true
		}
		budget.r = rc
		held, err := sc.HoldsIn(budget)
		rc.Close()
		if held || err != nil {
			return true
		}
	}
	return false
}

// errTooLarge: an archive unpacks to more than maxUnpackedBytes.
var errTooLarge = errors.New("the archive unpacks to too many bytes")

// countingReader reads from r until left bytes have been read in all, then fails with errTooLarge.
type countingReader struct {
	r    io.Reader
	left int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// Issue logs in, mints the credential and writes the kubeconfig atomically, then emits credential.issued.
// Transient failures are retried until LoginTimeout has passed; a refusal fails at once. On failure no
// kubeconfig is left behind and any Vault token obtained is revoked.
func (a *Agent) Issue(ctx context.Context) (*Credential, error) {
	c := &a.cfg
	jwt, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("read service-account token: %w", err)
	}
	jwt = []byte(strings.TrimSpace(string(jwt)))
	if len(jwt) == 0 {
		return nil, fmt.Errorf("read service-account token: %s is empty", c.TokenFile)
	}
	a.remember(jwt)
	ca, err := os.ReadFile(c.APICAFile)
	if err != nil {
		return nil, fmt.Errorf("read API server CA: %w", err)
	}
	deadline := time.Now().Add(c.LoginTimeout)
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(vaultTimeout))
	defer cancel()

	var tokenTTL time.Duration
	err = retry(ctx, deadline, func(ctx context.Context) error {
		var err error
		tokenTTL, err = a.client.Login(ctx, c.AuthMount, c.AuthRole, jwt)
		return err
	})
	loggedIn := c.Now()
	if err != nil {
		return nil, fmt.Errorf("vault login as role %s failed: %w", c.AuthRole, err)
	}
	a.setLoggedIn(true)
	// From here on Vault may echo the token it gave the agent in any error: scrub it by value too.
	a.remember([]byte(a.client.token()))
	cred, err := a.mintAndWrite(ctx, deadline, ca)
	if err != nil {
		// Revoking the token revokes whatever lease it may already hold.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
		defer rcancel()
		if rerr := a.revokeSelf(rctx); rerr != nil {
			a.client.forget()
		} else {
			a.setLoggedIn(false)
		}
		return nil, err
	}
	a.remember([]byte(cred.Token))
	a.mu.Lock()
	a.cred = cred
	a.tokenExpiry = loggedIn.Add(tokenTTL)
	a.mu.Unlock()
	a.emit(EventIssued, map[string]any{
		"lease_id":        cred.LeaseID,
		"ttl_seconds":     int64(cred.TTL / time.Second),
		"service_account": cred.ServiceAccount,
	})
	return cred, nil
}

// mintAndWrite mints the credential (retrying transient failures until deadline) and writes the kubeconfig.
func (a *Agent) mintAndWrite(ctx context.Context, deadline time.Time, ca []byte) (*Credential, error) {
	c := &a.cfg
	var cred *Credential
	err := retry(ctx, deadline, func(ctx context.Context) error {
		var err error
		cred, err = a.client.Mint(ctx, c.SecretsMount, c.SecretsRole, c.Namespace)
		return err
	})
	if errors.Is(err, ErrPermissionDenied) {
		// Vault says no more than "permission denied"; say what its policy allows.
		err = fmt.Errorf("%w (the tool's Vault policy lets it mint only in the namespaces the agent-sandbox policy gives the tool, "+
			"with no other parameter; after changing them, run agent-sandbox vault configure)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("vault credential %s/creds/%s for namespace %s failed: %w", mountPath(c.SecretsMount), c.SecretsRole, c.Namespace, err)
	}
	kc, err := RenderKubeconfig(c.APIServer, ca, cred)
	if err == nil {
		err = atomicfile.Write(c.Out, kc, KubeconfigMode)
	}
	if err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	return cred, nil
}

// Revoke revokes the agent's Vault token (and with it the credential's lease), removes the kubeconfig and
// emits credential.revoked. A Vault token that has already expired took its lease with it; that counts as
// revoked.
func (a *Agent) Revoke(ctx context.Context) error {
	a.mu.Lock()
	cred, tokenExpiry := a.cred, a.tokenExpiry
	a.cred = nil
	a.mu.Unlock()
	if cred == nil {
		return nil
	}
	rmErr := os.Remove(a.cfg.Out)
	if errors.Is(rmErr, os.ErrNotExist) {
		rmErr = nil
	}
	began := a.cfg.Now()
	err := a.revokeSelf(ctx)
	// Vault refuses an expired token; its expiry already revoked the lease.
	expired := errors.Is(err, ErrPermissionDenied) && !a.cfg.Now().Before(tokenExpiry)
	if err != nil && !expired {
		a.client.forget()
		a.emit(EventRevokeFailed, map[string]any{
			"lease_id":        cred.LeaseID,
			"service_account": cred.ServiceAccount,
			"error":           err.Error(),
		})
		return errors.Join(fmt.Errorf("vault revoke failed (the lease ends with its TTL at %s): %w",
			cred.ExpiresAt().UTC().Format(time.RFC3339), err), removeErr(a.cfg.Out, rmErr))
	}
	a.setLoggedIn(false)
	fields := map[string]any{"lease_id": cred.LeaseID, "service_account": cred.ServiceAccount,
		"took_ms": a.cfg.Now().Sub(began).Milliseconds()}
	if expired {
		fields["expired"] = true
	}
	a.emit(EventRevoked, fields)
	return removeErr(a.cfg.Out, rmErr)
}

// revokeSelf revokes the agent's Vault token, retrying transient failures (a standby answering 503 during a
// leader election, a connection reset) until ctx's deadline, revokeTimeout when it has none: given up, the
// credential stays valid until its lease's TTL, minutes after the Job ended.
func (a *Agent) revokeSelf(ctx context.Context) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(revokeTimeout)
	}
	return retry(ctx, deadline, a.client.RevokeSelf)
}

func removeErr(path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("remove kubeconfig %s: %w", filepath.Clean(path), err)
}

// emit writes one event line. Everything passes through package scrub first; the credential's token
// is never among the fields in the first place.
func (a *Agent) emit(name string, fields map[string]any) {
	a.writeEvent(a.Scrubber().Value(a.event(name, fields)))
}

// emitRaw writes one event line whose fields were scrubbed already.
func (a *Agent) emitRaw(name string, fields map[string]any) {
	a.writeEvent(a.event(name, fields))
}

// event is one event line's object: its name, the agent's scope and namespace, the time, and fields.
func (a *Agent) event(name string, fields map[string]any) map[string]any {
	ev := map[string]any{
		"event":     name,
		"scope":     a.cfg.Scope,
		"namespace": a.cfg.Namespace,
		"time":      a.cfg.Now().UTC().Format(time.RFC3339Nano),
	}
	for k, v := range fields {
		ev[k] = v
	}
	return ev
}

// writeEvent writes ev as one JSON line on the events stream; an event that cannot be encoded is dropped.
func (a *Agent) writeEvent(ev any) {
	line, err := json.Marshal(ev)
	if err != nil {
		return
	}
	_, _ = a.cfg.Events.Write(append(line, '\n'))
}

// Scrubber returns what the agent scrubs its events with: the patterns, and by value every secret the agent
// has come to hold — the Pod's login token once read, the Vault token once logged in, the issued credential's
// token once minted. Callers printing the agent's errors use it too. It is safe to call at any time.
func (a *Agent) Scrubber() *scrub.Scrubber {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.scrubber
}

// remember adds values to those the agent scrubs by value.
func (a *Agent) remember(values ...[]byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, v := range values {
		if len(v) > 0 {
			a.secrets = append(a.secrets, v)
		}
	}
	a.scrubber = exactScrubber(a.secrets...)
}

// exactScrubber returns a Scrubber for those of the values that can be scrubbed by value (scrub.New
// refuses values under 8 bytes, which no Vault or Kubernetes token is); the patterns apply regardless.
func exactScrubber(values ...[]byte) *scrub.Scrubber {
	var ok [][]byte
	for _, v := range values {
		if _, err := scrub.New(v); err == nil {
			ok = append(ok, v)
		}
	}
	s, _ := scrub.New(ok...)
	return s
}

// KubeconfigReady reports whether the kubeconfig at path exists and is not empty: what the sidecar's
// postStart hook (`cred-agent ready`) waits for, which holds the tool container back until the credential
// is in place.
func KubeconfigReady(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("kubeconfig not ready: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return fmt.Errorf("kubeconfig not ready: %s is empty", path)
	}
	return nil
}
