package approval

import (
	"context"
	"errors"
	"fmt"
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
	s, err := OpenStore(path, WithStoreClock(clock.Now))
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// storeFixture is a store on a real SQLite file, an approver key, and a settable clock.
type storeFixture struct {
	path  string
	clock *testClock
	store *Store
	key   *PrivateKey
}

func newStoreFixture(t testing.TB) *storeFixture {
	t.Helper()
	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "state", "approvals.db")
	return &storeFixture{path: path, clock: clock, store: openTestStore(t, path, clock), key: mustKey(t, "alice")}
}

func testRequest() Request {
	return Request{
		Tool:        "terraform_apply",
		Params:      map[string]any{"dir": "infra", "replicas": 2, "force": true},
		Namespace:   "demo",
		PlanDigest:  "sha256:abc",
		PlanSummary: "1 to destroy",
		Signals:     []Signal{{Name: "resource_delete", Match: "aws_db_instance.main will be destroyed"}},
	}
}

func (f *storeFixture) create(t testing.TB) *Request {
	t.Helper()
	r, err := f.store.CreateRequest(context.Background(), testRequest())
	if err != nil {
		t.Fatalf("CreateRequest: %v", err)
	}
	return r
}

// grant signs a token for r and stores it, returning the token and its claims.
func (f *storeFixture) grant(t testing.TB, r *Request, ttl time.Duration) (string, *Claims) {
	t.Helper()
	c, err := NewClaims(r, f.key.KeyID(), testAudience, f.clock.Now(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Sign(f.key, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.Grant(context.Background(), r.ID, tok, &c); err != nil {
		t.Fatalf("Grant: %v", err)
	}
	return tok, &c
}

func TestOpenStore(t *testing.T) {
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
	if err := f.store.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&versions); err != nil || versions != 2 {
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
	if _, err := OpenStore(f.path); err == nil {
		t.Error("OpenStore accepted a database from a newer schema")
	}
}

func TestCreateRequest(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	r := f.create(t)
	if !ValidRequestID(r.ID) {
		t.Errorf("ID %q is not req- and 12 base32 characters", r.ID)
	}
	wantHash, _ := ParamsHash("terraform_apply", testRequest().Params)
	if r.ParamsHash != wantHash {
		t.Errorf("ParamsHash = %s, want %s", r.ParamsHash, wantHash)
	}
	if r.Status != StatusPending || !r.CreatedAt.Equal(f.clock.Now()) || !r.ExpiresAt.Equal(f.clock.Now().Add(DefaultRequestTTL)) {
		t.Errorf("request = %+v", *r)
	}
	if r.Params["replicas"] != int64(2) || r.Params["dir"] != "infra" || r.Params["force"] != true {
		t.Errorf("params read back as %#v", r.Params)
	}
	if len(r.Signals) != 1 || r.Signals[0].Name != "resource_delete" || r.PlanSummary != "1 to destroy" || r.PlanDigest != "sha256:abc" {
		t.Errorf("request = %+v", *r)
	}
	if h, _ := ParamsHash(r.Tool, r.Params); h != r.ParamsHash {
		t.Errorf("params read back hash to %s, stored %s", h, r.ParamsHash)
	}

	bad := []struct {
		name   string
		mutate func(*Request)
		err    error
	}{
		{"no tool", func(r *Request) { r.Tool = "" }, ErrInvalidParams},
		{"nested params", func(r *Request) { r.Params = map[string]any{"a": map[string]any{}} }, ErrInvalidParams},
		{"wrong given hash", func(r *Request) { r.ParamsHash = strings.Repeat("0", 64) }, ErrParamsMismatch},
		{"not pending", func(r *Request) { r.Status = StatusGranted }, nil},
		{"bad ID", func(r *Request) { r.ID = "req-X" }, nil},
		{"expiry before creation", func(r *Request) { r.ExpiresAt = f.clock.Now().Add(-time.Hour) }, nil},
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
	if _, err := f.store.Get(ctx, "req-nothinghere"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(unknown) error = %v, want ErrNotFound", err)
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

	statuses := func() map[string]Status {
		all, err := f.store.List(ctx, ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]Status{}
		for _, r := range all {
			m[r.ID] = r.Status
		}
		return m
	}
	want := map[string]Status{pending.ID: StatusPending, granted.ID: StatusGranted, denied.ID: StatusDenied, consumed.ID: StatusConsumed}
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
	want[granted.ID] = StatusExpired
	if got := statuses(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after 11m: statuses = %v, want %v", got, want)
	}
	f.clock.Add(DefaultRequestTTL)
	want[pending.ID] = StatusExpired
	if got := statuses(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after a day: statuses = %v, want %v", got, want)
	}
	for st, n := range map[Status]int{StatusExpired: 2, StatusDenied: 1, StatusConsumed: 1, StatusPending: 0, StatusGranted: 0} {
		got, err := f.store.List(ctx, ListFilter{Status: st})
		if err != nil || len(got) != n {
			t.Errorf("List(%s) = %d requests, %v; want %d", st, len(got), err, n)
		}
	}
	if got, _ := f.store.List(ctx, ListFilter{Limit: 3}); len(got) != 3 {
		t.Errorf("List(limit 3) = %d requests", len(got))
	}
	if _, err := f.store.List(ctx, ListFilter{Status: "bogus"}); err == nil {
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
	if _, err := f.store.FindGranted(ctx, first.Tool, first.ParamsHash); !errors.Is(err, ErrNotFound) {
		t.Errorf("FindGranted before a grant: err = %v, want ErrNotFound", err)
	}
	f.grant(t, first, 5*time.Minute)
	if got, err := f.store.FindGranted(ctx, first.Tool, first.ParamsHash); err != nil || got.ID != first.ID {
		t.Errorf("FindGranted = %v, %v; want %s", got, err, first.ID)
	}
	if _, err := f.store.FindPending(ctx, "other_tool", first.ParamsHash); !errors.Is(err, ErrNotFound) {
		t.Errorf("FindPending(other tool): err = %v, want ErrNotFound", err)
	}
	f.clock.Add(5 * time.Minute)
	if _, err := f.store.FindGranted(ctx, first.Tool, first.ParamsHash); !errors.Is(err, ErrNotFound) {
		t.Errorf("FindGranted after token expiry: err = %v, want ErrNotFound", err)
	}
	f.clock.Add(DefaultRequestTTL)
	if _, err := f.store.FindPending(ctx, first.Tool, first.ParamsHash); !errors.Is(err, ErrNotFound) {
		t.Errorf("FindPending after request expiry: err = %v, want ErrNotFound", err)
	}
}

func TestGrantChecks(t *testing.T) {
	f := newStoreFixture(t)
	ctx := context.Background()
	sign := func(r *Request, mutate func(*Claims)) (string, *Claims) {
		c, err := NewClaims(r, "alice", testAudience, f.clock.Now(), 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		mutate(&c)
		tok, err := Sign(f.key, c)
		if err != nil {
			t.Fatal(err)
		}
		return tok, &c
	}
	r := f.create(t)
	tests := []struct {
		name   string
		mutate func(*Claims)
		err    error
	}{
		{"wrong tool", func(c *Claims) { c.Tool = "kubectl_delete" }, ErrWrongTool},
		{"wrong params", func(c *Claims) { c.ParamsHash = strings.Repeat("0", 64) }, ErrParamsMismatch},
		{"wrong namespace", func(c *Claims) { c.Namespace = "kube-system" }, ErrWrongNamespace},
		{"wrong plan", func(c *Claims) { c.PlanDigest = "sha256:other" }, ErrPlanMismatch},
		{"other request", func(c *Claims) { c.Subject = "req-aaaaaaaaaaaa" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, c := sign(r, tt.mutate)
			err := f.store.Grant(ctx, r.ID, tok, c)
			if err == nil || (tt.err != nil && !errors.Is(err, tt.err)) {
				t.Fatalf("Grant error = %v, want %v", err, tt.err)
			}
		})
	}
	// A token that does not carry the claims it comes with.
	tokA, _ := sign(r, func(*Claims) {})
	_, cB := sign(r, func(*Claims) {})
	if err := f.store.Grant(ctx, r.ID, tokA, cB); err == nil {
		t.Error("Grant accepted a token with other claims")
	}
	if err := f.store.Grant(ctx, r.ID, "garbage", cB); !errors.Is(err, ErrMalformed) {
		t.Errorf("Grant(garbage token) error = %v, want ErrMalformed", err)
	}
	if err := f.store.Grant(ctx, r.ID, tokA, nil); err == nil {
		t.Error("Grant accepted nil claims")
	}
	if got, _ := f.store.Get(ctx, r.ID); got.Status != StatusPending {
		t.Fatalf("failed grants changed the status to %s", got.Status)
	}

	f.grant(t, r, 0)
	tok2, c2 := sign(r, func(*Claims) {})
	if err := f.store.Grant(ctx, r.ID, tok2, c2); !errors.Is(err, ErrNotPending) {
		t.Errorf("second Grant error = %v, want ErrNotPending", err)
	}
	if err := f.store.Deny(ctx, r.ID, "bob", ""); !errors.Is(err, ErrNotPending) {
		t.Errorf("Deny of a granted request: err = %v, want ErrNotPending", err)
	}

	denied := f.create(t)
	if err := f.store.Deny(ctx, denied.ID, "bob", "no"); err != nil {
		t.Fatal(err)
	}
	tok3, c3 := sign(denied, func(*Claims) {})
	if err := f.store.Grant(ctx, denied.ID, tok3, c3); !errors.Is(err, ErrNotPending) {
		t.Errorf("Grant of a denied request: err = %v, want ErrNotPending", err)
	}
	if err := f.store.Deny(ctx, "req-nothinghere", "bob", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Deny(unknown) error = %v, want ErrNotFound", err)
	}

	old := f.create(t)
	f.clock.Add(DefaultRequestTTL + time.Minute)
	tok4, c4 := sign(old, func(*Claims) {})
	if err := f.store.Grant(ctx, old.ID, tok4, c4); !errors.Is(err, ErrNotPending) || !errors.Is(err, ErrExpired) {
		t.Errorf("Grant of an expired request: err = %v, want ErrNotPending and ErrExpired", err)
	}
	if err := f.store.Deny(ctx, old.ID, "bob", ""); !errors.Is(err, ErrExpired) {
		t.Errorf("Deny of an expired request: err = %v, want ErrExpired", err)
	}

	fresh := f.create(t)
	expiredTok, expiredClaims := sign(fresh, func(*Claims) {})
	f.clock.Add(11 * time.Minute)
	if err := f.store.Grant(ctx, fresh.ID, expiredTok, expiredClaims); !errors.Is(err, ErrExpired) {
		t.Errorf("Grant with an expired token: err = %v, want ErrExpired", err)
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
		{"unknown request", "req-nothinghere", r.Tool, r.ParamsHash, ErrNotFound},
		{"wrong tool", r.ID, "kubectl_delete", r.ParamsHash, ErrWrongTool},
		{"wrong params", r.ID, r.Tool, strings.Repeat("0", 64), ErrParamsMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := f.store.Consume(ctx, tt.id, tt.tool, tt.paramsHash); !errors.Is(err, tt.err) || got != "" {
				t.Fatalf("Consume = %q, %v; want %v", got, err, tt.err)
			}
		})
	}
	got, err := f.store.Consume(ctx, r.ID, r.Tool, r.ParamsHash)
	if err != nil || got != tok {
		t.Fatalf("Consume = %v; want the granted token", err)
	}
	if _, err := f.store.Consume(ctx, r.ID, r.Tool, r.ParamsHash); !errors.Is(err, ErrConsumed) {
		t.Errorf("second Consume error = %v, want ErrConsumed", err)
	}
	after, _ := f.store.Get(ctx, r.ID)
	if after.Status != StatusConsumed || after.ConsumedAt.IsZero() {
		t.Errorf("after Consume: %+v", *after)
	}

	// The consumed token is what the webhook accepts, once.
	v := NewVerifier(f.key.KeySet(), testAudience, f.clock.Now)
	want := Expectation{Tool: r.Tool, ParamsHash: r.ParamsHash, Namespace: r.Namespace, PlanDigest: r.PlanDigest}
	if claims, err := v.Consume(ctx, got, want, newMemLedger()); err != nil || claims.ID != c.ID || claims.Subject != r.ID {
		t.Errorf("Verifier.Consume(stored token) = %+v, %v", claims, err)
	}

	pending := f.create(t)
	if _, err := f.store.Consume(ctx, pending.ID, pending.Tool, pending.ParamsHash); !errors.Is(err, ErrNotGranted) {
		t.Errorf("Consume of a pending request: err = %v, want ErrNotGranted", err)
	}
	denied := f.create(t)
	_ = f.store.Deny(ctx, denied.ID, "bob", "")
	if _, err := f.store.Consume(ctx, denied.ID, denied.Tool, denied.ParamsHash); !errors.Is(err, ErrNotGranted) {
		t.Errorf("Consume of a denied request: err = %v, want ErrNotGranted", err)
	}
	expiring := f.create(t)
	f.grant(t, expiring, time.Minute)
	f.clock.Add(time.Minute)
	if _, err := f.store.Consume(ctx, expiring.ID, expiring.Tool, expiring.ParamsHash); !errors.Is(err, ErrExpired) {
		t.Errorf("Consume of an expired grant: err = %v, want ErrExpired", err)
	}
	if got, _ := f.store.Get(ctx, expiring.ID); got.Status != StatusExpired {
		t.Errorf("expired grant reads as %s", got.Status)
	}
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
			stores := make([]*Store, consumers)
			for i := range stores {
				stores[i] = f.store
				if !shared {
					stores[i] = openTestStore(t, f.path, f.clock)
				}
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			type result struct {
				token string
				err   error
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
					if res.token != tok {
						t.Errorf("winner got a different token")
					}
				case errors.Is(res.err, ErrConsumed):
					consumed++
				default:
					t.Errorf("unexpected error: %v", res.err)
				}
			}
			if wins != 1 || consumed != consumers-1 {
				t.Errorf("%d successes and %d ErrConsumed, want 1 and %d", wins, consumed, consumers-1)
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
	list, _ := f.store.List(context.Background(), ListFilter{})
	if out := fmt.Sprintf("%+v", list); strings.Contains(out, sig) {
		t.Errorf("list prints the token: %s", out)
	}
}

func TestParseStatus(t *testing.T) {
	for _, s := range []string{"pending", "granted", "denied", "consumed", "expired"} {
		if got, err := ParseStatus(s); err != nil || string(got) != s {
			t.Errorf("ParseStatus(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseStatus("approved"); err == nil {
		t.Error("ParseStatus accepted an unknown status")
	}
}

// BenchmarkConsume measures grant consumption on a real database file: the requests are created and granted
// up front, then consumed one after another. The target is at least 2,000 consumes/s.
func BenchmarkConsume(b *testing.B) {
	f := newStoreFixture(b)
	ctx := context.Background()
	reqs := make([]*Request, b.N)
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
	if _, err := f.store.GetPlan(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown plan: %v", err)
	}
	p := Plan{ID: id, Workspace: "k8s-demo", Description: "plan abababababab: 1 to add", Signals: []Signal{{Name: "forces-replacement", Match: "x"}}}
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
	again, err := OpenStore(f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got, err := again.GetPlan(ctx, id); err != nil || got.Description != p.Description {
		t.Fatalf("after reopening: %+v %v", got, err)
	}
}

// TestOpenStoreWithoutCreate: the read-only commands' open creates neither the file nor its folder, says
// ErrNoDatabase, and opens an existing database as usual.
func TestOpenStoreWithoutCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "approvals.db")
	if _, err := OpenStore(path, WithoutCreate()); !errors.Is(err, ErrNoDatabase) || !strings.Contains(err.Error(), path) {
		t.Fatalf("open a missing database: %v, want ErrNoDatabase naming %s", err, path)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the folder was created: %v", err)
	}
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.CreateRequest(context.Background(), Request{Tool: "terraform_apply", Params: map[string]any{"workspace": "w"}, Namespace: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = OpenStore(path, WithoutCreate())
	if err != nil {
		t.Fatalf("open an existing database: %v", err)
	}
	defer s.Close()
	if _, err := s.Get(context.Background(), r.ID); err != nil {
		t.Errorf("get %s: %v", r.ID, err)
	}
}
