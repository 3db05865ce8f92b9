package approver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	approvalstore "github.com/agent-sandbox/agent-sandbox/internal/approval/store"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

const (
	approveAudience   = "cluster-test"
	approvePassphrase = "correct horse battery staple"
)

// approvalEnv is an approvals database with requests in it and an approver key on disk, in t.TempDir().
type approvalEnv struct {
	dir     string
	db      string
	keyPath string
	key     *approval.PrivateKey
	store   *approvalstore.Store
}

func newApprovalEnv(t *testing.T) *approvalEnv {
	t.Helper()
	dir := t.TempDir()
	// Keep the defaults away from the real home directory.
	t.Setenv("HOME", dir)
	t.Setenv(approvalstore.EnvDB, "")
	t.Setenv(approval.EnvApproverKey, "")
	t.Setenv("XDG_STATE_HOME", "")
	e := &approvalEnv{dir: dir, db: filepath.Join(dir, "approvals.db"), keyPath: filepath.Join(dir, "approver.key")}
	var err error
	if e.key, err = approval.GenerateKey("alice"); err != nil {
		t.Fatal(err)
	}
	if err := e.key.WriteFile(e.keyPath, []byte(approvePassphrase), approval.WithScryptWorkFactor(10)); err != nil {
		t.Fatal(err)
	}
	if e.store, err = approvalstore.Open(e.db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	return e
}

func (e *approvalEnv) createRequest(t *testing.T, mutate func(*approval.Request)) *approval.Request {
	t.Helper()
	r := approval.Request{
		Tool:        "terraform_apply",
		Params:      map[string]any{"dir": "infra/prod", "auto_approve": true, "parallelism": 4},
		Namespace:   "demo",
		PlanSummary: "Plan: 0 to add, 1 to change, 1 to destroy.\n  - aws_db_instance.main",
		Signals:     []approval.Signal{{Name: "resource_delete", Match: "aws_db_instance.main will be destroyed"}},
	}
	if mutate != nil {
		mutate(&r)
	}
	got, err := e.store.CreateRequest(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (e *approvalEnv) status(t *testing.T, id string) approval.Status {
	t.Helper()
	r, err := e.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

// grant approves r directly through the library, as approve would.
func (e *approvalEnv) grant(t *testing.T, r *approval.Request) string {
	t.Helper()
	c, err := approval.NewClaims(r, e.key.KeyID(), approveAudience, time.Now(), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := approval.Sign(e.key, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Grant(context.Background(), r.ID, tok, &c); err != nil {
		t.Fatal(err)
	}
	return tok
}

func runApprovalCLI(t *testing.T, in io.Reader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = testMain(context.Background(), args, in, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestApproveRefusesWithoutTerminal(t *testing.T) {
	e := newApprovalEnv(t)
	r := e.createRequest(t, nil)
	typed := r.ID + "\n" + approvePassphrase + "\n"

	pipe := func(t *testing.T) io.Reader {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pr.Close() })
		go func() {
			pw.WriteString(typed)
			pw.Close()
		}()
		return pr
	}
	devNull := func(t *testing.T) io.Reader {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	tests := []struct {
		name string
		in   func(*testing.T) io.Reader
	}{
		{"buffer", func(*testing.T) io.Reader { return bytes.NewBufferString(typed) }},
		{"pipe", pipe},
		{"dev null", devNull},
		{"nil file", func(*testing.T) io.Reader { return (*os.File)(nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runApprovalCLI(t, tt.in(t), "approve", r.ID, "--db", e.db, "--key", e.keyPath, "--audience", approveAudience)
			if code != 2 {
				t.Errorf("exit code = %d, want 2", code)
			}
			if stderr != noTerminalMessage+"\n" {
				t.Errorf("stderr = %q, want the one-line explanation", stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if st := e.status(t, r.ID); st != approval.StatusPending {
				t.Errorf("request is %s, want pending", st)
			}
		})
	}
}

// TestApproveHasNoNonInteractivePath guards the design rule that approve takes nothing that could replace the
// person at the terminal.
func TestApproveHasNoNonInteractivePath(t *testing.T) {
	cmd := NewApproveCommand(cli.IO{})
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	// kubeconfig, provider-mirror, sandbox-namespace and terraform only let approve read and describe the
	// saved plan a request is bound to.
	want := "audience db key kubeconfig policy provider-mirror sandbox-namespace terraform ttl"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("approve flags = %q, want exactly %q", got, want)
	}
}

// TestApproveRefusesAPlanItCannotVerify: a request bound to a saved plan is not approved when approve
// cannot read and describe that plan itself (here: no cluster to read it from); it stays pending.
func TestApproveRefusesAPlanItCannotVerify(t *testing.T) {
	e := newApprovalEnv(t)
	r := e.createRequest(t, func(r *approval.Request) { r.PlanDigest = strings.Repeat("ab", 32) })
	s := startPTY(t, "approve", r.ID, "--db", e.db, "--key", e.keyPath, "--audience", approveAudience,
		"--kubeconfig", filepath.Join(e.dir, "no-such-kubeconfig"))
	if code := s.Wait(); code != 1 {
		t.Fatalf("exit %d; terminal:\n%s", code, s.Output())
	}
	s.Expect("could not be verified")
	if strings.Contains(s.Output(), "Passphrase") || e.status(t, r.ID) != approval.StatusPending {
		t.Fatalf("approve went on without verifying the plan:\n%s", s.Output())
	}
}

// startPTY runs the command line args on a pseudo-terminal, as a person at a terminal would.
func startPTY(t *testing.T, args ...string) *harness.TestTerminal {
	t.Helper()
	return harness.StartTestTerminal(t, func(tty *os.File) int { return testMain(context.Background(), args, tty, tty, tty) })
}

func TestApproveThroughPTY(t *testing.T) {
	e := newApprovalEnv(t)
	r := e.createRequest(t, nil)
	s := startPTY(t, "approve", r.ID, "--db", e.db, "--key", e.keyPath, "--audience", approveAudience, "--ttl", "10m")
	s.Expect("or \"yes\": ")
	shown := s.Output()
	for _, want := range []string{
		r.ID, "terraform_apply", "demo", `"infra/prod"`, "parallelism",
		"1 to destroy", "DESTRUCTIVE SIGNALS (1)", "resource_delete: aws_db_instance.main will be destroyed",
	} {
		if !strings.Contains(shown, want) {
			t.Errorf("approve did not show %q before asking:\n%s", want, shown)
		}
	}
	s.Send(r.ID + "\n")
	s.Expect("Passphrase for approver key")
	s.SendSecret(approvePassphrase + "\n")
	if code := s.Wait(); code != 0 {
		t.Fatalf("exit code = %d; terminal:\n%s", code, s.Output())
	}
	s.Expect("approved " + r.ID + " (token id ")
	if strings.Contains(s.Output(), approvePassphrase) {
		t.Error("the passphrase was echoed")
	}

	got, err := e.store.Get(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != approval.StatusGranted || got.Approver != "alice" || got.TokenExpiry.Sub(got.DecidedAt) > 10*time.Minute+time.Second {
		t.Fatalf("after approve: %+v", *got)
	}
	tokens, err := e.store.Consume(context.Background(), r.ID, r.Tool, r.ParamsHash)
	if err != nil || len(tokens) != 1 {
		t.Fatal(len(tokens), err)
	}
	token := tokens[0]
	v := approval.NewVerifier(e.key.KeySet(), approveAudience, time.Now)
	want := approval.Expectation{Tool: r.Tool, ParamsHash: r.ParamsHash, Namespace: r.Namespace, PlanDigest: r.PlanDigest}
	claims, err := v.Consume(context.Background(), token, want, newMapLedger())
	if err != nil {
		t.Fatalf("the webhook's verifier refuses the approval: %v", err)
	}
	if claims.Subject != r.ID || claims.ID != got.TokenID {
		t.Errorf("claims = %+v", claims)
	}
	if strings.Contains(s.Output(), token) {
		t.Error("approve printed the token")
	}
}

func TestApproveThroughPTYRefusals(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(*testing.T, *approvalEnv, *approval.Request)
		confirm   string // typed at the confirmation prompt; empty: the command fails before asking
		pass      string // typed at the passphrase prompt; empty: not asked
		wantError string
		wantState approval.Status
	}{
		{name: "wrong passphrase", confirm: "yes\n", pass: "not the passphrase\n", wantError: "wrong passphrase", wantState: approval.StatusPending},
		{name: "wrong confirmation", confirm: "no\n", wantError: "confirmation did not match", wantState: approval.StatusPending},
		{
			name: "denied request",
			setup: func(t *testing.T, e *approvalEnv, r *approval.Request) {
				_ = e.store.Deny(context.Background(), r.ID, "bob", "no")
			},
			wantError: "it is denied",
			wantState: approval.StatusDenied,
		},
		{
			name: "consumed request",
			setup: func(t *testing.T, e *approvalEnv, r *approval.Request) {
				e.grant(t, r)
				if _, err := e.store.Consume(context.Background(), r.ID, r.Tool, r.ParamsHash); err != nil {
					t.Fatal(err)
				}
			},
			wantError: "it is consumed",
			wantState: approval.StatusConsumed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newApprovalEnv(t)
			r := e.createRequest(t, nil)
			if tt.setup != nil {
				tt.setup(t, e, r)
			}
			s := startPTY(t, "approve", r.ID, "--db", e.db, "--key", e.keyPath, "--audience", approveAudience)
			if tt.confirm != "" {
				s.Expect("or \"yes\": ")
				s.Send(tt.confirm)
			}
			if tt.pass != "" {
				s.Expect("Passphrase for approver key")
				s.SendSecret(tt.pass)
			}
			if code := s.Wait(); code != 1 {
				t.Errorf("exit code = %d, want 1", code)
			}
			s.Expect(tt.wantError)
			if st := e.status(t, r.ID); st != tt.wantState {
				t.Errorf("request is %s, want %s", st, tt.wantState)
			}
		})
	}
}

func TestApproveValidation(t *testing.T) {
	e := newApprovalEnv(t)
	r := e.createRequest(t, nil)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no audience", []string{"--key", e.keyPath}, "--audience"},
		{"ttl too long", []string{"--key", e.keyPath, "--audience", "c", "--ttl", "31m"}, "--ttl"},
		{"ttl longer than the policy's", []string{"--key", e.keyPath, "--policy", shortTTLPolicy(t, e.dir), "--ttl", "20m"}, "spec.approval.tokenTTL (10m0s)"},
		{"missing key", []string{"--key", filepath.Join(e.dir, "nope"), "--audience", "c"}, "agent-sandbox keygen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startPTY(t, append([]string{"approve", r.ID, "--db", e.db}, tt.args...)...)
			if code := s.Wait(); code != 1 {
				t.Errorf("exit code = %d, want 1", code)
			}
			s.Expect(tt.want)
		})
	}
}

func TestApprovalsListAndShow(t *testing.T) {
	e := newApprovalEnv(t)
	pending := e.createRequest(t, func(r *approval.Request) {
		r.Params["note"] = "\x1b[2Jhidden\u202e"
		r.PlanSummary = "line one\n\x1b]0;evil\x07line two"
	})
	granted := e.createRequest(t, func(r *approval.Request) { r.Tool = "kubectl_delete"; r.Namespace = "apps" })
	token := e.grant(t, granted)
	sig := token[strings.LastIndexByte(token, '.')+1:]
	none := bytes.NewReader(nil)

	code, out, stderr := runApprovalCLI(t, none, "approvals", "list", "--db", e.db)
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"ID", "TOOL", "STATUS", "NAMESPACE", pending.ID, granted.ID, "terraform_apply", "kubectl_delete", "pending", "granted", "apps"} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}

	code, out, _ = runApprovalCLI(t, none, "approvals", "list", "--db", e.db, "--status", "granted")
	if code != 0 || !strings.Contains(out, granted.ID) || strings.Contains(out, pending.ID) {
		t.Errorf("list --status granted (exit %d):\n%s", code, out)
	}
	code, out, _ = runApprovalCLI(t, none, "approvals", "list", "--db", e.db, "--status", "denied")
	if code != 0 || !strings.Contains(out, "no denied approval requests") {
		t.Errorf("list --status denied (exit %d):\n%s", code, out)
	}
	if code, _, stderr := runApprovalCLI(t, none, "approvals", "list", "--db", e.db, "--status", "bogus"); code != cli.ExitUsage || !strings.HasPrefix(stderr, "error: ") {
		t.Errorf("list --status bogus: exit %d, stderr %q", code, stderr)
	}

	code, out, _ = runApprovalCLI(t, none, "approvals", "show", pending.ID, "--db", e.db)
	if code != 0 {
		t.Fatalf("show: exit %d", code)
	}
	for _, want := range []string{pending.ID, "terraform_apply", "demo", "line one", "line two", "DESTRUCTIVE SIGNALS", "aws_db_instance.main will be destroyed", `"infra/prod"`} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	if strings.ContainsAny(out, "\x1b\x07\u202e") {
		t.Errorf("show passed terminal control characters through:\n%q", out)
	}

	code, out, _ = runApprovalCLI(t, none, "approvals", "show", granted.ID, "--db", e.db)
	if code != 0 || !strings.Contains(out, "Token ID") {
		t.Errorf("show granted (exit %d):\n%s", code, out)
	}
	_, listOut, _ := runApprovalCLI(t, none, "approvals", "list", "--db", e.db)
	for name, o := range map[string]string{"show": out, "list": listOut} {
		if strings.Contains(o, sig) || strings.Contains(o, token[:24]) {
			t.Errorf("%s printed the token", name)
		}
	}

	if code, _, stderr := runApprovalCLI(t, none, "approvals", "show", "req-nothinghere", "--db", e.db); code != cli.ExitNotFound || !strings.Contains(stderr, "not found") {
		t.Errorf("show unknown: exit %d, stderr %q", code, stderr)
	}
}

func TestDeny(t *testing.T) {
	e := newApprovalEnv(t)
	r := e.createRequest(t, nil)
	code, out, stderr := runApprovalCLI(t, bytes.NewReader(nil), "deny", r.ID, "--db", e.db, "--reason", "too risky on a Friday")
	if code != 0 || out != "denied "+r.ID+"\n" {
		t.Fatalf("deny: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	got, _ := e.store.Get(context.Background(), r.ID)
	if got.Status != approval.StatusDenied || got.Reason != "too risky on a Friday" || got.Approver == "" {
		t.Errorf("after deny: %+v", *got)
	}
	code, _, stderr = runApprovalCLI(t, bytes.NewReader(nil), "deny", r.ID, "--db", e.db)
	if code != 1 || !strings.Contains(stderr, "not pending") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("second deny: exit %d, stderr %q", code, stderr)
	}
}

func TestKeygenWithPassphraseFile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	passFile := filepath.Join(dir, "pass")
	if err := os.WriteFile(passFile, []byte(approvePassphrase+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, "keys", "approver.key")
	code, out, stderr := runApprovalCLI(t, bytes.NewReader(nil), "keygen", "--out", keyPath, "--key-id", "alice", "--passphrase-file", passFile)
	if code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, stderr)
	}
	jwksPath := keyPath + ".jwks.json"
	for _, want := range []string{"alice", keyPath, jwksPath, `{"keys": [...]}`} {
		if !strings.Contains(out, want) {
			t.Errorf("keygen output lacks %q:\n%s", want, out)
		}
	}
	st, err := os.Stat(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("private key mode = %v, want 0600", st.Mode().Perm())
	}
	key, err := approval.LoadPrivateKey(keyPath, []byte(approvePassphrase))
	if err != nil {
		t.Fatalf("LoadPrivateKey: %v", err)
	}
	data, err := os.ReadFile(jwksPath)
	if err != nil {
		t.Fatal(err)
	}
	set, err := approval.LoadKeySet(data)
	if err != nil {
		t.Fatalf("LoadKeySet: %v", err)
	}
	if ids := set.KeyIDs(); len(ids) != 1 || ids[0] != "alice" || key.KeyID() != "alice" {
		t.Errorf("key IDs: set %v, key %s", ids, key.KeyID())
	}

	// No overwriting without --force, and nothing changes.
	before, _ := os.ReadFile(keyPath)
	code, _, stderr = runApprovalCLI(t, bytes.NewReader(nil), "keygen", "--out", keyPath, "--passphrase-file", passFile)
	if code != 1 || !strings.Contains(stderr, "--force") {
		t.Errorf("keygen over existing files: exit %d, stderr %q", code, stderr)
	}
	if after, _ := os.ReadFile(keyPath); !bytes.Equal(before, after) {
		t.Error("refused keygen changed the key file")
	}

	short := filepath.Join(dir, "short")
	_ = os.WriteFile(short, []byte("tooshort\n"), 0o600)
	if code, _, stderr := runApprovalCLI(t, bytes.NewReader(nil), "keygen", "--out", filepath.Join(dir, "k2"), "--passphrase-file", short); code != 1 || !strings.Contains(stderr, "at least 12") {
		t.Errorf("short passphrase: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runApprovalCLI(t, bytes.NewReader(nil), "keygen", "--out", filepath.Join(dir, "k3")); code != 1 || !strings.Contains(stderr, "interactive terminal") {
		t.Errorf("keygen without terminal: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "k3")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("keygen without a passphrase wrote a key")
	}
}

func TestKeygenThroughPTY(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	keyPath := filepath.Join(dir, "approver.key")
	s := startPTY(t, "keygen", "--out", keyPath)
	s.Expect("Passphrase for the new approver key: ")
	s.SendSecret(approvePassphrase + "\n")
	s.Expect("Same passphrase again: ")
	s.SendSecret(approvePassphrase + "\n")
	if code := s.Wait(); code != 0 {
		t.Fatalf("keygen: exit %d:\n%s", code, s.Output())
	}
	s.Expect("generated approver key approver-")
	if strings.Contains(s.Output(), approvePassphrase) {
		t.Error("the passphrase was echoed")
	}
	if _, err := approval.LoadPrivateKey(keyPath, []byte(approvePassphrase)); err != nil {
		t.Fatalf("LoadPrivateKey: %v", err)
	}
}

func TestSafeLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text é", "plain text é"},
		{"a\x1b[31mb", `a\u001b[31mb`},
		{"new\nline", `new\u000aline`},
		{"bidi\u202eflip", `bidi\u202eflip`},
		{"bad\xffbyte", `bad\xffbyte`},
		{`back\slash`, `back\\slash`},
	}
	for _, tt := range tests {
		if got := safeLine(tt.in); got != tt.want {
			t.Errorf("safeLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := safeText("a\nb\tc\x1b"); got != "a\nb\tc\\u001b" {
		t.Errorf("safeText = %q", got)
	}
}

// mapLedger is the smallest Ledger: a map, as the webhook's would be across replicas.
type mapLedger struct {
	mu   sync.Mutex
	seen map[string]bool
}

func newMapLedger() *mapLedger { return &mapLedger{seen: map[string]bool{}} }

func (l *mapLedger) Record(_ context.Context, id string, _ time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[id] {
		return approval.ErrReplayed
	}
	l.seen[id] = true
	return nil
}

func (l *mapLedger) Seen(_ context.Context, id string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[id], nil
}

// shortTTLPolicy writes the shipped policy with spec.approval.tokenTTL set to 10m into dir.
func shortTTLPolicy(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile("../../../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	short := strings.Replace(string(data), "tokenTTL: 30m", "tokenTTL: 10m", 1)
	if short == string(data) {
		t.Fatal("the shipped policy has no tokenTTL: 30m to shorten")
	}
	path := filepath.Join(dir, "short-ttl-policy.yaml")
	if err := os.WriteFile(path, []byte(short), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestApprovePolicyTokenTTLGoverns: without --ttl, approve signs for the policy's spec.approval.tokenTTL,
// the lifetime the webhook enforces.
func TestApprovePolicyTokenTTLGoverns(t *testing.T) {
	e := newApprovalEnv(t)
	r := e.createRequest(t, nil)
	s := startPTY(t, "approve", r.ID, "--db", e.db, "--key", e.keyPath, "--policy", shortTTLPolicy(t, e.dir))
	s.Expect("expires 10m0s after you confirm")
	if code := confirmWithPassphrase(s); code != 0 {
		t.Fatalf("exit code = %d; terminal:\n%s", code, s.Output())
	}
	got, err := e.store.Get(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if life := got.TokenExpiry.Sub(got.DecidedAt); life > 10*time.Minute+time.Second || life < 9*time.Minute {
		t.Errorf("the approval lives %s, want the policy's 10m", life)
	}
}

// writeKey writes a new approver key with id to dir, under the test passphrase, and returns it and its path.
func writeKey(t *testing.T, dir, id string) (*approval.PrivateKey, string) {
	t.Helper()
	k, err := approval.GenerateKey(id)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, id+".key")
	if err := k.WriteFile(path, []byte(approvePassphrase), approval.WithScryptWorkFactor(10)); err != nil {
		t.Fatal(err)
	}
	return k, path
}

// confirmWithPassphrase answers approve's confirmation with "yes" and its passphrase prompt with the test
// passphrase, and returns approve's exit code.
func confirmWithPassphrase(s *harness.TestTerminal) int {
	s.Expect("or \"yes\": ")
	s.Send("yes\n")
	s.Expect("Passphrase for approver key")
	s.SendSecret(approvePassphrase + "\n")
	return s.Wait()
}

// approveAt runs approve for id with the key at keyPath through a terminal, confirming and typing the
// passphrase, and returns the session after the command ended.
func (e *approvalEnv) approveAt(t *testing.T, id, keyPath string) (*harness.TestTerminal, int) {
	t.Helper()
	s := startPTY(t, "approve", id, "--db", e.db, "--key", keyPath, "--audience", approveAudience)
	return s, confirmWithPassphrase(s)
}

// TestApproveTwoApprovers: approve on a request that needs two approvers says who approved already and how
// many are still needed, refuses (exit 1) a second approval with the same key, and says when a grant
// completes the set; approvals list and show say "1 of 2 approvals" and name the approvers.
func TestApproveTwoApprovers(t *testing.T) {
	e := newApprovalEnv(t)
	bob, bobKey := writeKey(t, e.dir, "bob")
	r := e.createRequest(t, func(r *approval.Request) { r.ApprovalsRequired = 2 })
	none := bytes.NewReader(nil)

	s, code := e.approveAt(t, r.ID, e.keyPath)
	if code != 0 {
		t.Fatalf("alice: exit %d:\n%s", code, s.Output())
	}
	for _, want := range []string{
		"This call needs 2 distinct approvers; nobody has approved it yet (yours makes 1 of 2)",
		"approved " + r.ID + " (token id ",
		"1 of 2 approvals: 1 more needed; ask another approver to run `agent-sandbox approve " + r.ID + "`",
	} {
		s.Expect(want)
	}
	if st := e.status(t, r.ID); st != approval.StatusPending {
		t.Fatalf("after one of two approvals the request is %s", st)
	}

	_, listOut, _ := runApprovalCLI(t, none, "approvals", "list", "--db", e.db)
	if !strings.Contains(listOut, "APPROVALS") || !strings.Contains(listOut, "1 of 2 approvals") || !strings.Contains(listOut, "alice") {
		t.Errorf("list does not show 1 of 2 approvals by alice:\n%s", listOut)
	}
	_, showOut, _ := runApprovalCLI(t, none, "approvals", "show", r.ID, "--db", e.db)
	if !strings.Contains(showOut, "1 of 2 approvals") || !strings.Contains(showOut, "approver 1") || !strings.Contains(showOut, "alice at ") {
		t.Errorf("show does not list the approvers so far:\n%s", showOut)
	}

	s, code = e.approveAt(t, r.ID, e.keyPath)
	if code != 1 {
		t.Fatalf("alice again: exit %d, want 1:\n%s", code, s.Output())
	}
	for _, want := range []string{"1 of 2 approvals so far, by alice", "already approved", "the same approver twice counts once"} {
		s.Expect(want)
	}
	if got, _ := e.store.Get(context.Background(), r.ID); got.Approvals() != 1 || got.Status != approval.StatusPending {
		t.Fatalf("alice twice: %s, %s", got.Progress(), got.Status)
	}

	s, code = e.approveAt(t, r.ID, bobKey)
	if code != 0 {
		t.Fatalf("bob: exit %d:\n%s", code, s.Output())
	}
	for _, want := range []string{"1 of 2 approvals so far, by alice", "1 more needed, yours included", "2 of 2 approvals: the set is complete (alice, bob)"} {
		s.Expect(want)
	}
	if st := e.status(t, r.ID); st != approval.StatusGranted {
		t.Fatalf("after both approvals the request is %s", st)
	}
	_, jsonOut, _ := runApprovalCLI(t, none, "approvals", "show", r.ID, "--db", e.db, "-o", "json")
	var one requestJSON
	if err := json.Unmarshal([]byte(jsonOut), &one); err != nil || one.Approvals != 2 || one.ApprovalsRequired != 2 || len(one.Grants) != 2 ||
		one.Grants[0].Approver != "alice" || one.Grants[1].Approver != "bob" || one.Grants[0].TokenID == "" {
		t.Errorf("show -o json: %v\n%s", err, jsonOut)
	}

	tokens, err := e.store.Consume(context.Background(), r.ID, r.Tool, r.ParamsHash)
	if err != nil || len(tokens) != 2 {
		t.Fatalf("Consume: %d tokens, %v", len(tokens), err)
	}
	keys := e.key.KeySet()
	if err := keys.Merge(bob.KeySet()); err != nil {
		t.Fatal(err)
	}
	v := approval.NewVerifier(keys, approveAudience, time.Now)
	want := approval.Expectation{Tool: r.Tool, ParamsHash: r.ParamsHash, Namespace: r.Namespace, PlanDigest: r.PlanDigest}
	a, err := v.ConsumeAll(context.Background(), tokens, want, newMapLedger())
	if err != nil || a.Required != 2 {
		t.Fatalf("the webhook's verifier on both approvals: %+v, %v", a, err)
	}
}

// TestApproveRaisesApprovalsRequired: when approve's own count of the approvers a call needs is higher than
// the request's, it raises the request and signs that number into the token.
func TestApproveRaisesApprovalsRequired(t *testing.T) {
	e := newApprovalEnv(t)
	r := e.createRequest(t, nil)
	o := &approveOptions{storeFlags: storeFlags{DBPath: e.db}, ID: r.ID, KeyPath: e.keyPath, Audience: approveAudience,
		TTL: 10 * time.Minute, now: time.Now, required: func(*verifiedPlan) int { return 2 }}
	s := harness.StartTestTerminal(t, func(tty *os.File) int {
		if err := o.Run(context.Background(), cli.IO{In: tty, Out: tty, ErrOut: tty}, tty); err != nil {
			fmt.Fprintln(tty, "error:", err)
			return 1
		}
		return 0
	})
	s.Expect("This call needs 2 distinct approvers; nobody has approved it yet")
	if code := confirmWithPassphrase(s); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.Output())
	}
	s.Expect("1 of 2 approvals: 1 more needed")
	got, err := e.store.Get(context.Background(), r.ID)
	if err != nil || got.ApprovalsRequired != 2 || got.Status != approval.StatusPending || got.Approvals() != 1 {
		t.Fatalf("after approve: %+v, %v", got, err)
	}
	if requiredApprovals(nil) != 1 || requiredApprovals(&verifiedPlan{}) != 1 {
		t.Error("the hook asks for more than one approver before the plan rules exist")
	}
}
