package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testClock is a settable clock shared by a test and the stores it opens.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock {
	return &testClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func openTestStore(t testing.TB, path string, clock *testClock) *Store {
	t.Helper()
	s, err := Open(path, WithClock(clock.Now))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// storeFixture is a store on a real SQLite file, an approver key, and a settable clock.
type storeFixture struct {
	path  string
	clock *testClock
	store *Store
	key   *approval.PrivateKey
}

func newStoreFixture(t testing.TB) *storeFixture {
	t.Helper()
	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "state", "approvals.db")
	return &storeFixture{path: path, clock: clock, store: openTestStore(t, path, clock), key: mustKey(t, "alice")}
}

func testRequest() approval.Request {
	return approval.Request{
		Tool:        "terraform_apply",
		Params:      map[string]any{"dir": "infra", "replicas": 2, "force": true},
		Namespace:   "demo",
		PlanDigest:  "sha256:abc",
		PlanSummary: "1 to destroy",
		Signals:     []approval.Signal{{Name: "resource_delete", Match: "aws_db_instance.main will be destroyed"}},
	}
}

func (f *storeFixture) create(t testing.TB) *approval.Request {
	t.Helper()
	r, err := f.store.CreateRequest(context.Background(), testRequest())
	if err != nil {
		t.Fatalf("CreateRequest: %v", err)
	}
	return r
}

// grant signs a token for r as the fixture's approver and stores it, returning the token and its claims.
func (f *storeFixture) grant(t testing.TB, r *approval.Request, ttl time.Duration) (string, *approval.Claims) {
	t.Helper()
	tok, c := f.signAs(t, f.key, r, ttl)
	if err := f.store.Grant(context.Background(), r.ID, tok, &c); err != nil {
		t.Fatalf("Grant: %v", err)
	}
	return tok, &c
}

func TestOpen(t *testing.T) {
	f := newStoreFixture(t)
	st, err := os.Stat(f.path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("database mode = %v, want 0600", st.Mode().Perm())
	}
	if dir, _ := os.Stat(filepath.Dir(f.path)); dir.Mode().Perm() != 0o700 {
		t.Errorf("database directory mode = %v, want 0700", dir.Mode().Perm())
	}
	ctx := context.Background()
	for pragma, want := range map[string]string{"journal_mode": "wal", "busy_timeout": "5000", "foreign_keys": "1", "synchronous": "1"} {
		var got string
		if err := f.store.db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
	var versions int
	if err := f.store.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&versions); err != nil || versions != 3 {
		t.Errorf("schema_migrations rows = %d, %v", versions, err)
	}
	// Reopening applies nothing twice, and the data is still there.
	r := f.create(t)
	for _, suffix := range []string{"-wal", "-shm"} {
		st, err := os.Stat(f.path + suffix)
		if err != nil {
			t.Errorf("stat %s: %v", suffix, err)
		} else if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v, want 0600", suffix, st.Mode().Perm())
		}
	}
	again := openTestStore(t, f.path, f.clock)
	if _, err := again.Get(ctx, r.ID); err != nil {
		t.Errorf("Get after reopen: %v", err)
	}
	if _, err := again.db.ExecContext(ctx, "INSERT INTO schema_migrations VALUES (999, 'future', 0)"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(f.path); err == nil {
		t.Error("Open accepted a database from a newer schema")
	}
}

func TestCreateRequest(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	r := f.create(t)
	if !approval.ValidRequestID(r.ID) {
		t.Errorf("ID %q is not req- and 12 base32 characters", r.ID)
	}
	wantHash, _ := approval.ParamsHash("terraform_apply", testRequest().Params)
	if r.ParamsHash != wantHash {
		t.Errorf("approval.ParamsHash = %s, want %s", r.ParamsHash, wantHash)
	}
	if r.Status != approval.StatusPending || !r.CreatedAt.Equal(f.clock.Now()) || !r.ExpiresAt.Equal(f.clock.Now().Add(approval.DefaultRequestTTL)) {
		t.Errorf("request = %+v", *r)
	}
	if r.Params["replicas"] != int64(2) || r.Params["dir"] != "infra" || r.Params["force"] != true {
		t.Errorf("params read back as %#v", r.Params)
	}
	if len(r.Signals) != 1 || r.Signals[0].Name != "resource_delete" || r.PlanSummary != "1 to destroy" || r.PlanDigest != "sha256:abc" {
		t.Errorf("request = %+v", *r)
	}
	if h, _ := approval.ParamsHash(r.Tool, r.Params); h != r.ParamsHash {
		t.Errorf("params read back hash to %s, stored %s", h, r.ParamsHash)
	}

	bad := []struct {
		name   string
		mutate func(*approval.Request)
		err    error
	}{
		{"no tool", func(r *approval.Request) { r.Tool = "" }, approval.ErrInvalidParams},
		{"nested params", func(r *approval.Request) { r.Params = map[string]any{"a": map[string]any{}} }, approval.ErrInvalidParams},
		{"wrong given hash", func(r *approval.Request) { r.ParamsHash = strings.Repeat("0", 64) }, approval.ErrParamsMismatch},
		{"not pending", func(r *approval.Request) { r.Status = approval.StatusGranted }, nil},
		{"bad ID", func(r *approval.Request) { r.ID = "req-X" }, nil},
		{"expiry before creation", func(r *approval.Request) { r.ExpiresAt = f.clock.Now().Add(-time.Hour) }, nil},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			req := testRequest()
			tt.mutate(&req)
			_, err := f.store.CreateRequest(ctx, req)
			if err == nil || (tt.err != nil && !errors.Is(err, tt.err)) {
				t.Fatalf("CreateRequest error = %v, want %v", err, tt.err)
			}
		})
	}
	given := testRequest()
	given.ID = "req-0123456789ab"
	if r, err := f.store.CreateRequest(ctx, given); err != nil || r.ID != given.ID {
		t.Fatalf("CreateRequest with ID = %v, %v", r, err)
	}
	if _, err := f.store.CreateRequest(ctx, given); err == nil {
		t.Error("duplicate ID accepted")
	}
	if _, err := f.store.Get(ctx, "req-nothinghere"); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("Get(unknown) error = %v, want approval.ErrNotFound", err)
	}
}

func TestRequestStatusLifecycle(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	pending := f.create(t)
	granted := f.create(t)
	denied := f.create(t)
	consumed := f.create(t)
	f.grant(t, granted, 10*time.Minute)
	if err := f.store.Deny(ctx, denied.ID, "bob", "not today"); err != nil {
		t.Fatalf("Deny: %v", err)
	}
	f.grant(t, consumed, 0)
	if _, err := f.store.Consume(ctx, consumed.ID, consumed.Tool, consumed.ParamsHash); err != nil {
		t.Fatalf("Consume: %v", err)
	}

	statuses := func() map[string]approval.Status {
		all, err := f.store.List(ctx, approval.ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]approval.Status{}
		for _, r := range all {
			m[r.ID] = r.Status
		}
		return m
	}
	want := map[string]approval.Status{pending.ID: approval.StatusPending, granted.ID: approval.StatusGranted, denied.ID: approval.StatusDenied, consumed.ID: approval.StatusConsumed}
	if got := statuses(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("statuses = %v, want %v", got, want)
	}
	d, _ := f.store.Get(ctx, denied.ID)
	if d.Approver != "bob" || d.Reason != "not today" || d.DecidedAt.IsZero() {
		t.Errorf("denied request = %+v", *d)
	}
	g, _ := f.store.Get(ctx, granted.ID)
	if g.Approver != "alice" || g.TokenID == "" || !g.TokenExpiry.Equal(f.clock.Now().Add(10*time.Minute)) {
		t.Errorf("granted request = %+v", *g)
	}

	// Past the token expiry the grant reads as expired; past the request expiry so does the pending one.
	f.clock.Add(11 * time.Minute)
	want[granted.ID] = approval.StatusExpired
	if got := statuses(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after 11m: statuses = %v, want %v", got, want)
	}
	f.clock.Add(approval.DefaultRequestTTL)
	want[pending.ID] = approval.StatusExpired
	if got := statuses(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after a day: statuses = %v, want %v", got, want)
	}
	for st, n := range map[approval.Status]int{approval.StatusExpired: 2, approval.StatusDenied: 1, approval.StatusConsumed: 1, approval.StatusPending: 0, approval.StatusGranted: 0} {
		got, err := f.store.List(ctx, approval.ListFilter{Status: st})
		if err != nil || len(got) != n {
			t.Errorf("List(%s) = %d requests, %v; want %d", st, len(got), err, n)
		}
	}
	if got, _ := f.store.List(ctx, approval.ListFilter{Limit: 3}); len(got) != 3 {
		t.Errorf("List(limit 3) = %d requests", len(got))
	}
	if _, err := f.store.List(ctx, approval.ListFilter{Status: "bogus"}); err == nil {
		t.Error("List accepted an unknown status")
	}
}

func TestFindPendingAndGranted(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	first := f.create(t)
	f.clock.Add(time.Second)
	second := f.create(t)
	if got, err := f.store.FindPending(ctx, first.Tool, first.ParamsHash); err != nil || got.ID != second.ID {
		t.Errorf("FindPending = %v, %v; want the newest, %s", got, err, second.ID)
	}
	if _, err := f.store.FindGranted(ctx, first.Tool, first.ParamsHash); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("FindGranted before a grant: err = %v, want approval.ErrNotFound", err)
	}
	f.grant(t, first, 5*time.Minute)
	if got, err := f.store.FindGranted(ctx, first.Tool, first.ParamsHash); err != nil || got.ID != first.ID {
		t.Errorf("FindGranted = %v, %v; want %s", got, err, first.ID)
	}
	if _, err := f.store.FindPending(ctx, "other_tool", first.ParamsHash); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("FindPending(other tool): err = %v, want approval.ErrNotFound", err)
	}
	f.clock.Add(5 * time.Minute)
	if _, err := f.store.FindGranted(ctx, first.Tool, first.ParamsHash); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("FindGranted after token expiry: err = %v, want approval.ErrNotFound", err)
	}
	f.clock.Add(approval.DefaultRequestTTL)
	if _, err := f.store.FindPending(ctx, first.Tool, first.ParamsHash); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("FindPending after request expiry: err = %v, want approval.ErrNotFound", err)
	}
}

func TestGrantChecks(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	sign := func(r *approval.Request, mutate func(*approval.Claims)) (string, *approval.Claims) {
		c, err := approval.NewClaims(r, "alice", testAudience, f.clock.Now(), 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		mutate(&c)
		tok, err := approval.Sign(f.key, c)
		if err != nil {
			t.Fatal(err)
		}
		return tok, &c
	}
	r := f.create(t)
	tests := []struct {
		name   string
		mutate func(*approval.Claims)
		err    error
	}{
		{"wrong tool", func(c *approval.Claims) { c.Tool = "kubectl_delete" }, approval.ErrWrongTool},
		{"wrong params", func(c *approval.Claims) { c.ParamsHash = strings.Repeat("0", 64) }, approval.ErrParamsMismatch},
		{"wrong namespace", func(c *approval.Claims) { c.Namespace = "kube-system" }, approval.ErrWrongNamespace},
		{"wrong plan", func(c *approval.Claims) { c.PlanDigest = "sha256:other" }, approval.ErrPlanMismatch},
		{"other request", func(c *approval.Claims) { c.Subject = "req-aaaaaaaaaaaa" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, c := sign(r, tt.mutate)
			err := f.store.Grant(ctx, r.ID, tok, c)
			if err == nil || (tt.err != nil && !errors.Is(err, tt.err)) {
				t.Fatalf("approval.Grant error = %v, want %v", err, tt.err)
			}
		})
	}
	// A token that does not carry the claims it comes with.
	tokA, _ := sign(r, func(*approval.Claims) {})
	_, cB := sign(r, func(*approval.Claims) {})
	if err := f.store.Grant(ctx, r.ID, tokA, cB); err == nil {
		t.Error("approval.Grant accepted a token with other claims")
	}
	if err := f.store.Grant(ctx, r.ID, "garbage", cB); !errors.Is(err, approval.ErrMalformed) {
		t.Errorf("approval.Grant(garbage token) error = %v, want approval.ErrMalformed", err)
	}
	if err := f.store.Grant(ctx, r.ID, tokA, nil); err == nil {
		t.Error("approval.Grant accepted nil claims")
	}
	if got, _ := f.store.Get(ctx, r.ID); got.Status != approval.StatusPending {
		t.Fatalf("failed grants changed the status to %s", got.Status)
	}

	f.grant(t, r, 0)
	tok2, c2 := sign(r, func(*approval.Claims) {})
	if err := f.store.Grant(ctx, r.ID, tok2, c2); !errors.Is(err, approval.ErrNotPending) {
		t.Errorf("second approval.Grant error = %v, want approval.ErrNotPending", err)
	}
	if err := f.store.Deny(ctx, r.ID, "bob", ""); !errors.Is(err, approval.ErrNotPending) {
		t.Errorf("Deny of a granted request: err = %v, want approval.ErrNotPending", err)
	}

	denied := f.create(t)
	if err := f.store.Deny(ctx, denied.ID, "bob", "no"); err != nil {
		t.Fatal(err)
	}
	tok3, c3 := sign(denied, func(*approval.Claims) {})
	if err := f.store.Grant(ctx, denied.ID, tok3, c3); !errors.Is(err, approval.ErrNotPending) {
		t.Errorf("approval.Grant of a denied request: err = %v, want approval.ErrNotPending", err)
	}
	if err := f.store.Deny(ctx, "req-nothinghere", "bob", ""); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("Deny(unknown) error = %v, want approval.ErrNotFound", err)
	}

	old := f.create(t)
	f.clock.Add(approval.DefaultRequestTTL + time.Minute)
	tok4, c4 := sign(old, func(*approval.Claims) {})
	if err := f.store.Grant(ctx, old.ID, tok4, c4); !errors.Is(err, approval.ErrNotPending) || !errors.Is(err, approval.ErrExpired) {
		t.Errorf("approval.Grant of an expired request: err = %v, want approval.ErrNotPending and approval.ErrExpired", err)
	}
	if err := f.store.Deny(ctx, old.ID, "bob", ""); !errors.Is(err, approval.ErrExpired) {
		t.Errorf("Deny of an expired request: err = %v, want approval.ErrExpired", err)
	}

	fresh := f.create(t)
	expiredTok, expiredClaims := sign(fresh, func(*approval.Claims) {})
	f.clock.Add(11 * time.Minute)
	if err := f.store.Grant(ctx, fresh.ID, expiredTok, expiredClaims); !errors.Is(err, approval.ErrExpired) {
		t.Errorf("approval.Grant with an expired token: err = %v, want approval.ErrExpired", err)
	}
}

func TestConsume(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	r := f.create(t)
	tok, c := f.grant(t, r, 10*time.Minute)

	tests := []struct {
		name       string
		id, tool   string
		paramsHash string
		err        error
	}{
		{"unknown request", "req-nothinghere", r.Tool, r.ParamsHash, approval.ErrNotFound},
		{"wrong tool", r.ID, "kubectl_delete", r.ParamsHash, approval.ErrWrongTool},
		{"wrong params", r.ID, r.Tool, strings.Repeat("0", 64), approval.ErrParamsMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := f.store.Consume(ctx, tt.id, tt.tool, tt.paramsHash); !errors.Is(err, tt.err) || got != nil {
				t.Fatalf("Consume = %q, %v; want %v", got, err, tt.err)
			}
		})
	}
	tokens, err := f.store.Consume(ctx, r.ID, r.Tool, r.ParamsHash)
	if err != nil || len(tokens) != 1 || tokens[0] != tok {
		t.Fatalf("Consume = %d tokens, %v; want the granted token", len(tokens), err)
	}
	got := tokens[0]
	if _, err := f.store.Consume(ctx, r.ID, r.Tool, r.ParamsHash); !errors.Is(err, approval.ErrConsumed) {
		t.Errorf("second Consume error = %v, want approval.ErrConsumed", err)
	}
	after, _ := f.store.Get(ctx, r.ID)
	if after.Status != approval.StatusConsumed || after.ConsumedAt.IsZero() {
		t.Errorf("after Consume: %+v", *after)
	}

	// The consumed token is what the webhook accepts, once.
	v := approval.NewVerifier(f.key.KeySet(), testAudience, f.clock.Now)
	want := approval.Expectation{Tool: r.Tool, ParamsHash: r.ParamsHash, Namespace: r.Namespace, PlanDigest: r.PlanDigest}
	if claims, err := v.Consume(ctx, got, want, newMemLedger()); err != nil || claims.ID != c.ID || claims.Subject != r.ID {
		t.Errorf("approval.Verifier.Consume(stored token) = %+v, %v", claims, err)
	}

	pending := f.create(t)
	if _, err := f.store.Consume(ctx, pending.ID, pending.Tool, pending.ParamsHash); !errors.Is(err, approval.ErrNotGranted) {
		t.Errorf("Consume of a pending request: err = %v, want approval.ErrNotGranted", err)
	}
	denied := f.create(t)
	_ = f.store.Deny(ctx, denied.ID, "bob", "")
	if _, err := f.store.Consume(ctx, denied.ID, denied.Tool, denied.ParamsHash); !errors.Is(err, approval.ErrNotGranted) {
		t.Errorf("Consume of a denied request: err = %v, want approval.ErrNotGranted", err)
	}
	expiring := f.create(t)
	f.grant(t, expiring, time.Minute)
	f.clock.Add(time.Minute)
	if _, err := f.store.Consume(ctx, expiring.ID, expiring.Tool, expiring.ParamsHash); !errors.Is(err, approval.ErrExpired) {
		t.Errorf("Consume of an expired grant: err = %v, want approval.ErrExpired", err)
	}
	if got, _ := f.store.Get(ctx, expiring.ID); got.Status != approval.StatusExpired {
		t.Errorf("expired grant reads as %s", got.Status)
	}
}

// TestGiveBack: the grants a call consumed and never sent are granted again, once, and the same call
// consumes them again with the very tokens; a request that is not consumed is not changed.
func TestGiveBack(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	r := f.create(t)
	tok, _ := f.grant(t, r, 10*time.Minute)
	if err := f.store.GiveBack(ctx, r.ID); !errors.Is(err, approval.ErrNotPending) {
		t.Errorf("GiveBack of a granted request: %v, want ErrNotPending", err)
	}
	if _, err := f.store.Consume(ctx, r.ID, r.Tool, r.ParamsHash); err != nil {
		t.Fatal(err)
	}
	if err := f.store.GiveBack(ctx, r.ID); err != nil {
		t.Fatalf("GiveBack: %v", err)
	}
	if err := f.store.GiveBack(ctx, r.ID); !errors.Is(err, approval.ErrNotPending) {
		t.Errorf("second GiveBack: %v, want ErrNotPending", err)
	}
	// Read through another Store on the same file, as the next MCP server process would.
	other := openTestStore(t, f.path, f.clock)
	got, err := other.Get(ctx, r.ID)
	if err != nil || got.Status != approval.StatusGranted || !got.ConsumedAt.IsZero() {
		t.Fatalf("after GiveBack: %+v, %v", got, err)
	}
	tokens, err := other.Consume(ctx, r.ID, r.Tool, r.ParamsHash)
	if err != nil || len(tokens) != 1 || tokens[0] != tok {
		t.Fatalf("Consume after GiveBack = %d tokens, %v; want the granted token", len(tokens), err)
	}
	pending := f.create(t)
	if err := f.store.GiveBack(ctx, pending.ID); !errors.Is(err, approval.ErrNotPending) {
		t.Errorf("GiveBack of a pending request: %v", err)
	}
	if got, _ := f.store.Get(ctx, pending.ID); got.Status != approval.StatusPending {
		t.Errorf("a pending request given back reads as %s", got.Status)
	}
	if err := f.store.GiveBack(ctx, "req-nothinghere"); err == nil {
		t.Error("GiveBack of an unknown request succeeded")
	}
}

// consumerStores are n Stores for n racing consumers: the fixture's own, shared, or each its own Store
// on the same database file.
func (f *storeFixture) consumerStores(t *testing.T, n int, shared bool) []*Store {
	t.Helper()
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = f.store
		if !shared {
			stores[i] = openTestStore(t, f.path, f.clock)
		}
	}
	return stores
}

// TestConsumeConcurrent races 64 consumers for one grant, each with its own Store (own connection pool, as
// separate MCP server processes would have) and then all through one shared Store: exactly one wins.
func TestConsumeConcurrent(t *testing.T) {
	const consumers = 64
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			f := newStoreFixture(t)
			r := f.create(t)
			tok, _ := f.grant(t, r, 0)
			stores := f.consumerStores(t, consumers, shared)
			start := make(chan struct{})
			var wg sync.WaitGroup
			type result struct {
				tokens []string
				err    error
			}
			results := make(chan result, consumers)
			for _, s := range stores {
				wg.Go(func() {
					<-start
					got, err := s.Consume(context.Background(), r.ID, r.Tool, r.ParamsHash)
					results <- result{got, err}
				})
			}
			close(start)
			wg.Wait()
			close(results)
			wins, consumed := 0, 0
			for res := range results {
				switch {
				case res.err == nil:
					wins++
					if len(res.tokens) != 1 || res.tokens[0] != tok {
						t.Errorf("winner got other tokens")
					}
				case errors.Is(res.err, approval.ErrConsumed):
					consumed++
				default:
					t.Errorf("unexpected error: %v", res.err)
				}
			}
			if wins != 1 || consumed != consumers-1 {
				t.Errorf("%d successes and %d approval.ErrConsumed, want 1 and %d", wins, consumed, consumers-1)
			}
		})
	}
}

func TestRequestPrintsNoToken(t *testing.T) {
	f := newStoreFixture(t)
	r := f.create(t)
	tok, _ := f.grant(t, r, 0)
	got, err := f.store.Get(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	sig := tok[strings.LastIndexByte(tok, '.')+1:]
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(format, got)
		if strings.Contains(out, sig) || strings.Contains(out, tok[:20]) {
			t.Errorf("%s prints the token: %s", format, out)
		}
		if !strings.Contains(out, r.ID) {
			t.Errorf("%s does not identify the request: %s", format, out)
		}
	}
	list, _ := f.store.List(context.Background(), approval.ListFilter{})
	if out := fmt.Sprintf("%+v", list); strings.Contains(out, sig) {
		t.Errorf("list prints the token: %s", out)
	}
}

func TestParseStatus(t *testing.T) {
	for _, s := range []string{"pending", "granted", "denied", "consumed", "expired"} {
		if got, err := approval.ParseStatus(s); err != nil || string(got) != s {
			t.Errorf("approval.ParseStatus(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := approval.ParseStatus("approved"); err == nil {
		t.Error("approval.ParseStatus accepted an unknown status")
	}
}

// BenchmarkConsume measures grant consumption on a real database file: the requests are created and granted
// up front, then consumed one after another. The target is at least 2,000 consumes/s.
func BenchmarkConsume(b *testing.B) {
	f := newStoreFixture(b)
	ctx := context.Background()
	reqs := make([]*approval.Request, b.N)
	for i := range reqs {
		reqs[i] = f.create(b)
		f.grant(b, reqs[i], 0)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := f.store.Consume(ctx, reqs[i].ID, reqs[i].Tool, reqs[i].ParamsHash); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "consumes/s")
}

func TestRecordPlan(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	id := strings.Repeat("ab", 32)
	if _, err := f.store.GetPlan(ctx, id); !errors.Is(err, approval.ErrNotFound) {
		t.Fatalf("unknown plan: %v", err)
	}
	p := approval.Plan{ID: id, Workspace: "k8s-demo", Description: "plan abababababab: 1 to add", Signals: []approval.Signal{{Name: "forces-replacement", Match: "x"}}}
	if err := f.store.RecordPlan(ctx, p); err != nil {
		t.Fatal(err)
	}
	got, err := f.store.GetPlan(ctx, id)
	if err != nil || got.Description != p.Description || len(got.Signals) != 1 || got.Workspace != "k8s-demo" {
		t.Fatalf("%+v %v", got, err)
	}
	// The description survives the store being closed and opened again, as the MCP server restarting.
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got, err := again.GetPlan(ctx, id); err != nil || got.Description != p.Description {
		t.Fatalf("after reopening: %+v %v", got, err)
	}
}

// TestOpenWithoutCreate: the read-only commands' open creates neither the file nor its folder, says
// ErrNoDatabase, and opens an existing database as usual.
func TestOpenWithoutCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "approvals.db")
	if _, err := Open(path, WithoutCreate()); !errors.Is(err, approval.ErrNoDatabase) || !strings.Contains(err.Error(), path) {
		t.Fatalf("open a missing database: %v, want approval.ErrNoDatabase naming %s", err, path)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the folder was created: %v", err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.CreateRequest(context.Background(), approval.Request{Tool: "terraform_apply", Params: map[string]any{"workspace": "w"}, Namespace: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path, WithoutCreate())
	if err != nil {
		t.Fatalf("open an existing database: %v", err)
	}
	defer s.Close()
	if _, err := s.Get(context.Background(), r.ID); err != nil {
		t.Errorf("get %s: %v", r.ID, err)
	}
}

// grantAs signs a token for r as key, for ttl, and stores it, returning the token and Grant's error.
func (f *storeFixture) grantAs(t testing.TB, key *approval.PrivateKey, r *approval.Request, ttl time.Duration) (string, error) {
	t.Helper()
	tok, c := f.signAs(t, key, r, ttl)
	return tok, f.store.Grant(context.Background(), r.ID, tok, &c)
}

// signAs signs a token for r as key, valid for ttl from the fixture's clock, and returns it with its claims.
func (f *storeFixture) signAs(t testing.TB, key *approval.PrivateKey, r *approval.Request, ttl time.Duration) (string, approval.Claims) {
	t.Helper()
	c, err := approval.NewClaims(r, key.KeyID(), testAudience, f.clock.Now(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	return mustSign(t, key, c), c
}

func (f *storeFixture) createNeeding(t testing.TB, n int) *approval.Request {
	t.Helper()
	req := testRequest()
	req.ApprovalsRequired = n
	r, err := f.store.CreateRequest(context.Background(), req)
	if err != nil {
		t.Fatalf("CreateRequest: %v", err)
	}
	return r
}

func (f *storeFixture) get(t testing.TB, id string) *approval.Request {
	t.Helper()
	r, err := f.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTwoPersonGrant: a request that needs two approvers stays pending, "1 of 2 approvals", after the first;
// the same approver again is refused and counts once; the second approver grants it, and Consume returns
// both tokens, which the webhook's verifier accepts together.
func TestTwoPersonGrant(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	bob, carol := mustKey(t, "bob"), mustKey(t, "carol")
	r := f.createNeeding(t, 2)
	if r.ApprovalsRequired != 2 || r.Progress() != "0 of 2 approvals" {
		t.Fatalf("new request: %d required, %q", r.ApprovalsRequired, r.Progress())
	}
	aliceTok, err := f.grantAs(t, f.key, r, 10*time.Minute)
	if err != nil {
		t.Fatalf("alice: %v", err)
	}
	got := f.get(t, r.ID)
	if got.Status != approval.StatusPending || got.Progress() != "1 of 2 approvals" || fmt.Sprint(got.Approvers()) != "[alice]" ||
		!got.HasApprover("alice") || got.HasApprover("bob") || got.TokenID != "" || !got.TokenExpiry.IsZero() || got.Approver != "" {
		t.Fatalf("after alice: %+v (%s)", *got, got.Progress())
	}
	if g := got.Grants[0]; g.TokenID == "" || !g.TokenExpiry.Equal(f.clock.Now().Add(10*time.Minute)) || !g.DecidedAt.Equal(f.clock.Now()) {
		t.Errorf("alice's grant: %+v", g)
	}
	if !strings.Contains(got.String(), "1 of 2 approvals") {
		t.Errorf("String() = %s", got)
	}
	if _, err := f.store.FindGranted(ctx, r.Tool, r.ParamsHash); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("FindGranted with 1 of 2: %v, want approval.ErrNotFound", err)
	}
	if p, err := f.store.FindPending(ctx, r.Tool, r.ParamsHash); err != nil || p.ID != r.ID || p.Approvals() != 1 {
		t.Errorf("FindPending with 1 of 2: %v, %v", p, err)
	}
	if _, err := f.store.Consume(ctx, r.ID, r.Tool, r.ParamsHash); !errors.Is(err, approval.ErrNotGranted) {
		t.Errorf("Consume with 1 of 2: %v, want approval.ErrNotGranted", err)
	}
	f.clock.Add(time.Minute)
	if _, err := f.grantAs(t, f.key, r, 10*time.Minute); !errors.Is(err, approval.ErrAlreadyApproved) || errors.Is(err, approval.ErrNotPending) {
		t.Fatalf("alice again: %v, want approval.ErrAlreadyApproved", err)
	}
	if got := f.get(t, r.ID); got.Approvals() != 1 || got.Status != approval.StatusPending {
		t.Fatalf("alice twice counts %d (%s)", got.Approvals(), got.Status)
	}
	bobTok, err := f.grantAs(t, bob, r, 10*time.Minute)
	if err != nil {
		t.Fatalf("bob: %v", err)
	}
	got = f.get(t, r.ID)
	if got.Status != approval.StatusGranted || got.Progress() != "2 of 2 approvals" || fmt.Sprint(got.Approvers()) != "[alice bob]" || got.Approver != "bob" ||
		!got.DecidedAt.Equal(f.clock.Now()) || got.TokenID != got.Grants[0].TokenID {
		t.Fatalf("after bob: %+v", *got)
	}
	// The grant expires with its first token, alice's.
	if !got.TokenExpiry.Equal(got.Grants[0].TokenExpiry) || !got.TokenExpiry.Before(got.Grants[1].TokenExpiry) {
		t.Errorf("token expiry %v, grants %+v", got.TokenExpiry, got.Grants)
	}
	if _, err := f.grantAs(t, carol, r, 10*time.Minute); !errors.Is(err, approval.ErrNotPending) {
		t.Errorf("carol after the set is complete: %v, want approval.ErrNotPending", err)
	}
	tokens, err := f.store.Consume(ctx, r.ID, r.Tool, r.ParamsHash)
	if err != nil || fmt.Sprint(tokens) != fmt.Sprint([]string{aliceTok, bobTok}) {
		t.Fatalf("Consume = %d tokens, %v; want alice's and bob's", len(tokens), err)
	}
	if _, err := f.store.Consume(ctx, r.ID, r.Tool, r.ParamsHash); !errors.Is(err, approval.ErrConsumed) {
		t.Errorf("second Consume: %v, want approval.ErrConsumed", err)
	}
	set := f.key.KeySet()
	if err := set.Merge(bob.KeySet()); err != nil {
		t.Fatal(err)
	}
	v := approval.NewVerifier(set, testAudience, f.clock.Now)
	want := approval.Expectation{Tool: r.Tool, ParamsHash: r.ParamsHash, Namespace: r.Namespace, PlanDigest: r.PlanDigest}
	a, err := v.ConsumeAll(ctx, tokens, want, newMemLedger())
	if err != nil || a.Required != 2 || fmt.Sprint(a.Approvers) != "[alice bob]" {
		t.Fatalf("the webhook's verifier on the consumed tokens: %+v, %v", a, err)
	}
	if _, err := v.ConsumeAll(ctx, tokens[:1], want, newMemLedger()); !errors.Is(err, approval.ErrNotEnoughApprovals) {
		t.Errorf("alice's token alone: %v, want approval.ErrNotEnoughApprovals", err)
	}
	if got := f.get(t, r.ID); got.Status != approval.StatusConsumed || len(got.Grants) != 2 {
		t.Errorf("consumed request: %+v", *got)
	}
}

// TestGrantExpiryWithSeveralApprovers: a granted request expires when its earliest token does; a pending
// request's approval whose token expired stops counting, and its approver may approve again.
func TestGrantExpiryWithSeveralApprovers(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	bob := mustKey(t, "bob")

	early := f.createNeeding(t, 2)
	if _, err := f.grantAs(t, f.key, early, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(time.Minute)
	if _, err := f.grantAs(t, bob, early, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, early.ID); got.Status != approval.StatusGranted {
		t.Fatalf("after both: %s", got.Status)
	}
	f.clock.Add(4 * time.Minute) // alice's token expires now; bob's has 26 minutes left
	if got := f.get(t, early.ID); got.Status != approval.StatusExpired || got.Approvals() != 2 {
		t.Errorf("past the first token's expiry: %s, %d grants", got.Status, got.Approvals())
	}
	if _, err := f.store.Consume(ctx, early.ID, early.Tool, early.ParamsHash); !errors.Is(err, approval.ErrExpired) {
		t.Errorf("Consume past the first token's expiry: %v, want approval.ErrExpired", err)
	}

	lapsed := f.createNeeding(t, 2)
	if _, err := f.grantAs(t, f.key, lapsed, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(6 * time.Minute)
	if got := f.get(t, lapsed.ID); got.Status != approval.StatusPending || got.Progress() != "0 of 2 approvals" {
		t.Errorf("after alice's token expired: %s, %s", got.Status, got.Progress())
	}
	if _, err := f.grantAs(t, bob, lapsed, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, lapsed.ID); got.Status != approval.StatusPending || fmt.Sprint(got.Approvers()) != "[bob]" {
		t.Fatalf("bob after alice's lapsed: %s, %v", got.Status, got.Approvers())
	}
	f.clock.Add(time.Second)
	if _, err := f.grantAs(t, f.key, lapsed, 10*time.Minute); err != nil {
		t.Fatalf("alice approving again after her approval lapsed: %v", err)
	}
	if got := f.get(t, lapsed.ID); got.Status != approval.StatusGranted || fmt.Sprint(got.Approvers()) != "[bob alice]" {
		t.Fatalf("after alice again: %s, %v", got.Status, got.Approvers())
	}
	if tokens, err := f.store.Consume(ctx, lapsed.ID, lapsed.Tool, lapsed.ParamsHash); err != nil || len(tokens) != 2 {
		t.Fatalf("Consume: %d tokens, %v", len(tokens), err)
	}
}

// TestRaiseApprovalsRequired: the number of approvers is 1 by default, set at creation, raised by
// RaiseApprovalsRequired or by a token that asks for more, and never lowered.
func TestRaiseApprovalsRequired(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	if r := f.create(t); r.ApprovalsRequired != 1 || r.Progress() != "0 of 1 approval" {
		t.Errorf("default: %d, %q", r.ApprovalsRequired, r.Progress())
	}
	for _, n := range []int{-1, approval.MaxApprovers + 1} {
		req := testRequest()
		req.ApprovalsRequired = n
		if _, err := f.store.CreateRequest(ctx, req); err == nil {
			t.Errorf("CreateRequest accepted %d approvals required", n)
		}
	}
	r := f.createNeeding(t, 2)
	tests := []struct {
		n, want int
		err     error
	}{
		{3, 3, nil},
		{1, 3, nil}, // never lowers
		{3, 3, nil},
		{0, 3, errors.New("out of range")},
		{approval.MaxApprovers + 1, 3, errors.New("out of range")},
	}
	for _, tt := range tests {
		err := f.store.RaiseApprovalsRequired(ctx, r.ID, tt.n)
		if (err != nil) != (tt.err != nil) {
			t.Errorf("raise to %d: %v", tt.n, err)
		}
		if got := f.get(t, r.ID).ApprovalsRequired; got != tt.want {
			t.Errorf("after raise to %d: %d required, want %d", tt.n, got, tt.want)
		}
	}
	if err := f.store.RaiseApprovalsRequired(ctx, "req-nothinghere", 2); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("raise unknown: %v, want approval.ErrNotFound", err)
	}

	// A token that asks for more raises the request.
	more := f.createNeeding(t, 2)
	c, err := approval.NewClaims(more, f.key.KeyID(), testAudience, f.clock.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	c.ApprovalsRequired = 3
	if err := f.store.Grant(ctx, more.ID, mustSign(t, f.key, c), &c); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, more.ID); got.ApprovalsRequired != 3 || got.Progress() != "1 of 3 approvals" {
		t.Errorf("after a token asking for 3: %s", got.Progress())
	}

	// A granted request cannot be raised (it would be granted with fewer approvers than it needs).
	one := f.create(t)
	f.grant(t, one, 0)
	if err := f.store.RaiseApprovalsRequired(ctx, one.ID, 2); !errors.Is(err, approval.ErrNotPending) {
		t.Errorf("raise a granted request: %v, want approval.ErrNotPending", err)
	}
	if err := f.store.RaiseApprovalsRequired(ctx, one.ID, 1); err != nil {
		t.Errorf("raise a granted request to what it has: %v", err)
	}
}

// TestGrantConcurrent races approvers through separate stores (separate processes): of eight grants by the
// same approver exactly one counts and the rest are ErrAlreadyApproved; of three approvers for a request that
// needs two, exactly two succeed and the third finds it no longer pending.
func TestGrantConcurrent(t *testing.T) {
	f := newStoreFixture(t)
	keys := []*approval.PrivateKey{f.key, mustKey(t, "bob"), mustKey(t, "carol")}
	race := func(r *approval.Request, signers []*approval.PrivateKey) []error {
		t.Helper()
		type signed struct {
			tok string
			c   approval.Claims
		}
		in := make([]signed, len(signers))
		for i, k := range signers {
			in[i].tok, in[i].c = f.signAs(t, k, r, 0)
		}
		errs := make([]error, len(in))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range in {
			s := openTestStore(t, f.path, f.clock)
			wg.Go(func() {
				<-start
				errs[i] = s.Grant(context.Background(), r.ID, in[i].tok, &in[i].c)
			})
		}
		close(start)
		wg.Wait()
		return errs
	}
	count := func(errs []error, target error) int {
		n := 0
		for _, err := range errs {
			if (target == nil && err == nil) || (target != nil && errors.Is(err, target)) {
				n++
			}
		}
		return n
	}

	r := f.createNeeding(t, 3)
	errs := race(r, []*approval.PrivateKey{keys[0], keys[0], keys[0], keys[0], keys[0], keys[0], keys[0], keys[0]})
	if count(errs, nil) != 1 || count(errs, approval.ErrAlreadyApproved) != 7 {
		t.Errorf("one approver eight times: %v", errs)
	}
	if got := f.get(t, r.ID); got.Approvals() != 1 || got.Status != approval.StatusPending {
		t.Errorf("one approver eight times counts %d (%s)", got.Approvals(), got.Status)
	}

	r = f.createNeeding(t, 2)
	errs = race(r, keys)
	if count(errs, nil) != 2 || count(errs, approval.ErrNotPending) != 1 {
		t.Errorf("three approvers for two: %v", errs)
	}
	if got := f.get(t, r.ID); got.Approvals() != 2 || got.Status != approval.StatusGranted {
		t.Errorf("three approvers for two: %d grants (%s)", got.Approvals(), got.Status)
	}
}

// TestConsumeConcurrentSeveralApprovers races 64 consumers, each with its own Store and then through one
// shared Store, for a request granted by three approvers: exactly one gets the tokens, all three.
func TestConsumeConcurrentSeveralApprovers(t *testing.T) {
	const consumers = 64
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			f := newStoreFixture(t)
			r := f.createNeeding(t, 3)
			var want []string
			for _, k := range []*approval.PrivateKey{f.key, mustKey(t, "bob"), mustKey(t, "carol")} {
				tok, err := f.grantAs(t, k, r, 0)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, tok)
			}
			stores := f.consumerStores(t, consumers, shared)
			start := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			wins, consumed := 0, 0
			for _, s := range stores {
				wg.Go(func() {
					<-start
					tokens, err := s.Consume(context.Background(), r.ID, r.Tool, r.ParamsHash)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins++
						if fmt.Sprint(tokens) != fmt.Sprint(want) {
							t.Errorf("the winner got %d tokens, not the three granted", len(tokens))
						}
					case errors.Is(err, approval.ErrConsumed):
						consumed++
					default:
						t.Errorf("unexpected error: %v", err)
					}
				})
			}
			close(start)
			wg.Wait()
			if wins != 1 || consumed != consumers-1 {
				t.Errorf("%d successes and %d approval.ErrConsumed, want 1 and %d", wins, consumed, consumers-1)
			}
		})
	}
}

// TestMigrateGrantsOutOfRequests: a database of schema version 2, with a granted and a consumed request, is
// migrated: their tokens become grants, they need one approver, and the granted one is consumed as before.
func TestMigrateGrantsOutOfRequests(t *testing.T) {
	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "approvals.db")
	s, err := Open(path, WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db := s.db
	// Back to version 2: drop what 0003 made and recreate the tables of 0001.
	for _, q := range []string{
		`DROP TABLE grants`, `DROP TABLE requests`, `DELETE FROM schema_migrations WHERE version = 3`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	v1, err := migrations.ReadFile("migrations/0001_requests.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, string(v1)); err != nil {
		t.Fatal(err)
	}
	key := mustKey(t, "alice")
	req := testRequest()
	req.ID = "req-0123456789ab"
	req.ParamsHash, _ = approval.ParamsHash(req.Tool, req.Params)
	c, err := approval.NewClaims(&req, key.KeyID(), testAudience, clock.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	tok := mustSign(t, key, c)
	canon, _ := approval.CanonicalParams(req.Params)
	n := clock.Now().UnixNano()
	for _, row := range []struct{ id, status, token, tokenID string }{
		{"req-0123456789ab", "granted", tok, c.ID},
		{"req-0123456789ac", "consumed", "x.y.z", "ffff"},
		{"req-0123456789ad", "pending", "", ""},
	} {
		expiry := int64(0)
		if row.token != "" {
			expiry = c.Expiry.UnixNano()
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO requests (id, tool, params, params_hash, namespace, plan_digest,
			created_at, expires_at, status, approver, decided_at, token, token_id, token_expiry)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, row.id, req.Tool, string(canon), req.ParamsHash, req.Namespace,
			req.PlanDigest, n, n+int64(time.Hour), row.status, map[bool]string{true: "alice"}[row.token != ""], n, row.token, row.tokenID, expiry); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	s = openTestStore(t, path, clock)
	granted, err := s.Get(ctx, "req-0123456789ab")
	if err != nil {
		t.Fatal(err)
	}
	if granted.Status != approval.StatusGranted || granted.ApprovalsRequired != 1 || fmt.Sprint(granted.Approvers()) != "[alice]" ||
		granted.TokenID != c.ID || !granted.TokenExpiry.Equal(time.Unix(0, c.Expiry.UnixNano())) || granted.Approver != "alice" {
		t.Fatalf("migrated granted request: %+v", *granted)
	}
	if consumed, _ := s.Get(ctx, "req-0123456789ac"); consumed.Status != approval.StatusConsumed || consumed.Approvals() != 1 {
		t.Errorf("migrated consumed request: %+v", *consumed)
	}
	if pending, _ := s.Get(ctx, "req-0123456789ad"); pending.Status != approval.StatusPending || pending.Approvals() != 0 || pending.ApprovalsRequired != 1 {
		t.Errorf("migrated pending request: %+v", *pending)
	}
	if tokens, err := s.Consume(ctx, granted.ID, granted.Tool, granted.ParamsHash); err != nil || len(tokens) != 1 || tokens[0] != tok {
		t.Fatalf("Consume after migration: %d tokens, %v", len(tokens), err)
	}
	// grants.request_id still references requests after the rename.
	if _, err := s.db.ExecContext(ctx, `INSERT INTO grants VALUES ('req-nothinghere', 'bob', 't', 'abcd', 1, 1)`); err == nil {
		t.Error("a grant of no request was stored")
	}
	var version int
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&version); err != nil || version != 3 {
		t.Errorf("schema version %d, %v", version, err)
	}
}

const testAudience = "cluster-a"

func TestDefaultDBPath(t *testing.T) {
	t.Setenv(EnvDB, "/d/approvals.db")
	if p, _ := DefaultDBPath(); p != "/d/approvals.db" {
		t.Errorf("DefaultDBPath = %q", p)
	}
	t.Setenv(EnvDB, "")
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_STATE_HOME", "/state")
	if p, _ := DefaultDBPath(); p != "/state/agent-sandbox/approvals.db" {
		t.Errorf("DefaultDBPath = %q", p)
	}
	t.Setenv("XDG_STATE_HOME", "")
	if p, _ := DefaultDBPath(); p != "/home/u/.local/state/agent-sandbox/approvals.db" {
		t.Errorf("DefaultDBPath = %q", p)
	}
}

func mustKey(t testing.TB, id string) *approval.PrivateKey {
	t.Helper()
	k, err := approval.GenerateKey(id)
	if err != nil {
		t.Fatalf("GenerateKey: %v", err)
	}
	return k
}

func mustSign(t testing.TB, k *approval.PrivateKey, c approval.Claims) string {
	t.Helper()
	tok, err := approval.Sign(k, c)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return tok
}

// memLedger is an in-memory approval.Ledger for tests.
type memLedger struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func newMemLedger() *memLedger { return &memLedger{seen: map[string]time.Time{}} }

func (l *memLedger) Record(_ context.Context, id string, expires time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[id]; ok {
		return fmt.Errorf("token %s: %w", id, approval.ErrReplayed)
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
