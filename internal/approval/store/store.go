// Package store keeps approval requests, their grants and saved-plan descriptions in a SQLite file, on the
// MCP server's side and the approver's: the admission webhook never imports it (a test over `go list -deps`
// keeps SQLite out of the webhook).
package store

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
)

const (
	// EnvDB names the environment variable that overrides DefaultDBPath.
	EnvDB = "AGENT_SANDBOX_DB"
	// busyTimeout is how long a statement waits for another connection's write lock before failing.
	busyTimeout = 5 * time.Second
)

// migrations holds the numbered schema migrations, applied in order by Open.
//
//go:embed migrations/*.sql
var migrations embed.FS

// Store keeps approval requests in a SQLite database file. It is safe for concurrent use, also by several
// processes sharing one file: every state change is a single conditional UPDATE, or one transaction that
// takes the database's write lock when it begins (BEGIN IMMEDIATE).
type Store struct {
	db       *sql.DB
	now      func() time.Time
	noCreate bool
}

// Option configures Open.
type Option func(*Store)

// WithClock sets the clock used for creation times and expiry (time.Now by default).
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// WithoutCreate makes Open fail with ErrNoDatabase instead of creating a missing database (or its
// folder). The commands that only read or decide on existing requests use it, so that a mistyped --db or
// an unset $AGENT_SANDBOX_DB is reported instead of answered with an empty database left behind.
func WithoutCreate() Option {
	return func(s *Store) { s.noCreate = true }
}

// DefaultDBPath returns the default approvals database: $AGENT_SANDBOX_DB, else
// $XDG_STATE_HOME/agent-sandbox/approvals.db, else ~/.local/state/agent-sandbox/approvals.db.
func DefaultDBPath() (string, error) {
	if p := os.Getenv(EnvDB); p != "" {
		return p, nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "agent-sandbox", "approvals.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("default database path: %w", err)
	}
	return filepath.Join(home, ".local", "state", "agent-sandbox", "approvals.db"), nil
}

// Open opens (creating if needed, with mode 0600 in a 0700 directory) the SQLite database at path and
// brings its schema up to date. Connections use WAL journaling, a 5 s busy timeout, foreign keys, and BEGIN
// IMMEDIATE for transactions.
//
// synchronous=NORMAL is deliberate: in WAL mode it keeps every commit through a crash or kill of the process
// and only risks the last commits on power loss or an OS crash, for some 30 times the throughput of FULL. A
// consumption lost that way cannot be replayed against the cluster: the admission webhook's ledger, not this
// file, is the authority on whether a token was used.
func Open(path string, opts ...Option) (*Store, error) {
	s := &Store{now: time.Now}
	for _, o := range opts {
		o(s)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open approvals database: %w", err)
	}
	flags := os.O_RDWR
	if !s.noCreate {
		if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
			return nil, fmt.Errorf("open approvals database: %w", err)
		}
		flags |= os.O_CREATE
	}
	// Create the file ourselves so that it is 0600 from the start; SQLite gives its -wal and -shm files the
	// same mode.
	f, err := os.OpenFile(abs, flags, 0o600)
	if s.noCreate && errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", approval.ErrNoDatabase, path)
	}
	if err != nil {
		return nil, fmt.Errorf("open approvals database: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("open approvals database: %w", err)
	}
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(busyTimeout.Milliseconds(), 10))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	dsn := (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: q.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open approvals database %s: %w", path, err)
	}
	s.db = db
	if err := s.migrate(context.Background()); err != nil {
		db.Close()
		return nil, fmt.Errorf("open approvals database %s: %w", path, err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// migrate applies the embedded migrations newer than the recorded schema version, in one transaction, so that
// concurrent openers of a new file serialise on the write lock and apply each migration once.
func (s *Store) migrate(ctx context.Context) error {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("read migrations: %w", err)
	}
	type migration struct {
		version int
		name    string
	}
	var all []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return fmt.Errorf("migration %s: name must start with a positive number and '_'", e.Name())
		}
		all = append(all, migration{version: v, name: e.Name()})
	}
	slices.SortFunc(all, func(a, b migration) int { return a.version - b.version })

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if len(all) > 0 && current > all[len(all)-1].version {
		return fmt.Errorf("schema version %d is newer than this program knows (%d)", current, all[len(all)-1].version)
	}
	for _, m := range all {
		if m.version <= current {
			continue
		}
		body, err := migrations.ReadFile("migrations/" + m.name)
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.version, m.name, s.now().UnixNano()); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// CreateRequest stores a new pending request. Tool and Params are required and are validated by computing
// ParamsHash (a ParamsHash already set must match it, else ErrParamsMismatch). An empty ID, CreatedAt or
// ExpiresAt is filled in (ExpiresAt = CreatedAt + DefaultRequestTTL), and a zero ApprovalsRequired is 1;
// decision fields and Grants are ignored. It returns the request as stored.
func (s *Store) CreateRequest(ctx context.Context, r approval.Request) (*approval.Request, error) {
	canon, err := approval.CanonicalParams(r.Params)
	if err != nil {
		return nil, fmt.Errorf("create request: %w", err)
	}
	hash, err := approval.ParamsHash(r.Tool, r.Params)
	if err != nil {
		return nil, fmt.Errorf("create request: %w", err)
	}
	if r.ParamsHash != "" && r.ParamsHash != hash {
		return nil, fmt.Errorf("create request: given params hash: %w", approval.ErrParamsMismatch)
	}
	if r.Status != "" && r.Status != approval.StatusPending {
		return nil, fmt.Errorf("create request: a new request is pending, not %s", r.Status)
	}
	if r.ID == "" {
		if r.ID, err = approval.NewRequestID(); err != nil {
			return nil, fmt.Errorf("create request: %w", err)
		}
	} else if !approval.ValidRequestID(r.ID) {
		return nil, fmt.Errorf("create request: invalid ID %q", r.ID)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.now()
	}
	if r.ExpiresAt.IsZero() {
		r.ExpiresAt = r.CreatedAt.Add(approval.DefaultRequestTTL)
	}
	if !r.ExpiresAt.After(r.CreatedAt) {
		return nil, fmt.Errorf("create request: expiry %s is not after creation %s", r.ExpiresAt, r.CreatedAt)
	}
	if r.ApprovalsRequired < 0 || r.ApprovalsRequired > approval.MaxApprovers {
		return nil, fmt.Errorf("create request: %d approvals required is outside [1, %d]", r.ApprovalsRequired, approval.MaxApprovers)
	}
	signals := r.Signals
	if signals == nil {
		signals = []approval.Signal{}
	}
	sig, err := json.Marshal(signals)
	if err != nil {
		return nil, fmt.Errorf("create request: signals: %w", err)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO requests
		(id, tool, params, params_hash, namespace, plan_digest, plan_summary, signals, created_at, expires_at, status,
		 approvals_required)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)`,
		r.ID, r.Tool, string(canon), hash, r.Namespace, r.PlanDigest, r.PlanSummary, string(sig),
		r.CreatedAt.UnixNano(), r.ExpiresAt.UnixNano(), r.Required())
	if err != nil {
		return nil, fmt.Errorf("create request %s: %w", r.ID, err)
	}
	return s.Get(ctx, r.ID)
}

// requestColumns are the columns scanRequest reads, in order. The tokens are in grants, and not among them.
const requestColumns = `id, tool, params, params_hash, namespace, plan_digest, plan_summary, signals,
	created_at, expires_at, status, approvals_required, approver, decided_at, reason, token_expiry, consumed_at`

// effectiveStatus is the SQL form of Request.Status: the stored status, or expired. ?1 is the current time.
const effectiveStatus = `CASE
	WHEN status = 'pending' AND expires_at <= ?1 THEN 'expired'
	WHEN status = 'granted' AND token_expiry <= ?1 THEN 'expired'
	ELSE status END`

type rowScanner interface{ Scan(dest ...any) error }

func (s *Store) scanRequest(row rowScanner, now time.Time) (*approval.Request, error) {
	var (
		r                                                     approval.Request
		params, signals, status                               string
		created, expires, decided, tokenExpiry, consumedAtInt int64
	)
	if err := row.Scan(&r.ID, &r.Tool, &params, &r.ParamsHash, &r.Namespace, &r.PlanDigest, &r.PlanSummary,
		&signals, &created, &expires, &status, &r.ApprovalsRequired, &r.Approver, &decided, &r.Reason, &tokenExpiry,
		&consumedAtInt); err != nil {
		return nil, err
	}
	var err error
	if r.Params, err = approval.DecodeCanonicalParams([]byte(params)); err != nil {
		return nil, fmt.Errorf("request %s: %w", r.ID, err)
	}
	// The database is the MCP server's file. What a request shows (its parameters) and what an approval of
	// it signs (its params hash) must be one thing: the hash is recomputed from the parameters, and the
	// parameters must be stored exactly as CreateRequest stores them.
	if err := checkStoredParams(&r, params); err != nil {
		return nil, fmt.Errorf("request %s: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(signals), &r.Signals); err != nil {
		return nil, fmt.Errorf("request %s: signals: %w", r.ID, err)
	}
	r.CreatedAt, r.ExpiresAt = fromNanos(created), fromNanos(expires)
	r.DecidedAt, r.TokenExpiry, r.ConsumedAt = fromNanos(decided), fromNanos(tokenExpiry), fromNanos(consumedAtInt)
	r.Status = effective(approval.Status(status), expires, tokenExpiry, now)
	// The schema's constraints bind only those who keep them, and the file is the MCP server's.
	if !approval.ValidRequestID(r.ID) {
		return nil, fmt.Errorf("%w: a request ID %q is not of the form req-…", approval.ErrTampered, r.ID)
	}
	if _, err := approval.ParseStatus(string(r.Status)); err != nil {
		return nil, fmt.Errorf("request %s: %w: %w", r.ID, approval.ErrTampered, err)
	}
	return &r, nil
}

// checkStoredParams checks that the stored params column is the canonical encoding of the parameters read
// from it, and the stored params_hash the hash of the stored tool and those parameters.
func checkStoredParams(r *approval.Request, stored string) error {
	canon, err := approval.CanonicalParams(r.Params)
	if err != nil {
		return fmt.Errorf("%w: %w", approval.ErrTampered, err)
	}
	if string(canon) != stored {
		return fmt.Errorf("%w: the stored parameters are not in canonical form", approval.ErrTampered)
	}
	hash, err := approval.ParamsHash(r.Tool, r.Params)
	if err != nil {
		return fmt.Errorf("%w: %w", approval.ErrTampered, err)
	}
	if hash != r.ParamsHash {
		return fmt.Errorf("%w: the stored params hash is not the hash of the stored tool and parameters: %w", approval.ErrTampered, approval.ErrParamsMismatch)
	}
	return nil
}

// effective computes the status a request has at now (see effectiveStatus).
func effective(stored approval.Status, expires, tokenExpiry int64, now time.Time) approval.Status {
	n := now.UnixNano()
	switch {
	case stored == approval.StatusPending && expires <= n:
		return approval.StatusExpired
	case stored == approval.StatusGranted && tokenExpiry <= n:
		return approval.StatusExpired
	}
	return stored
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// grantsBatch bounds the request IDs of one query of withGrants, well below SQLite's limit on parameters.
const grantsBatch = 500

// withGrants reads the grants of reqs (scanned at now) into them: all of them, except that a pending
// request's grants whose tokens have expired are left out, because they no longer count. TokenID is the
// first grant's once the request was granted.
func (s *Store) withGrants(ctx context.Context, now time.Time, reqs ...*approval.Request) error {
	byID := make(map[string]*approval.Request, len(reqs))
	for _, r := range reqs {
		byID[r.ID] = r
	}
	for start := 0; start < len(reqs); start += grantsBatch {
		batch := reqs[start:min(start+grantsBatch, len(reqs))]
		ids := make([]any, len(batch))
		for i, r := range batch {
			ids[i] = r.ID
		}
		rows, err := s.db.QueryContext(ctx, `SELECT request_id, approver, token_id, token_expiry, decided_at FROM grants
			WHERE request_id IN (?`+strings.Repeat(", ?", len(ids)-1)+`) ORDER BY decided_at, approver`, ids...)
		if err != nil {
			return fmt.Errorf("read grants: %w", err)
		}
		for rows.Next() {
			var (
				id               string
				g                approval.Grant
				expiry, decision int64
			)
			if err := rows.Scan(&id, &g.Approver, &g.TokenID, &expiry, &decision); err != nil {
				rows.Close()
				return fmt.Errorf("read grants: %w", err)
			}
			g.TokenExpiry, g.DecidedAt = fromNanos(expiry), fromNanos(decision)
			r := byID[id]
			if r.Status == approval.StatusPending && expiry <= now.UnixNano() {
				continue
			}
			r.Grants = append(r.Grants, g)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("read grants: %w", err)
		}
	}
	for _, r := range reqs {
		if !r.TokenExpiry.IsZero() && len(r.Grants) > 0 {
			r.TokenID = r.Grants[0].TokenID
		}
	}
	return nil
}

// Get returns the request with the given ID, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (*approval.Request, error) {
	now := s.now()
	r, err := s.scanRequest(s.db.QueryRowContext(ctx, `SELECT `+requestColumns+` FROM requests WHERE id = ?`, id), now)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("request %q: %w", id, approval.ErrNotFound)
	}
	if err == nil {
		err = s.withGrants(ctx, now, r)
	}
	if err != nil {
		return nil, fmt.Errorf("get request %s: %w", id, err)
	}
	return r, nil
}

// List returns requests, newest first, selected by f.
func (s *Store) List(ctx context.Context, f approval.ListFilter) ([]*approval.Request, error) {
	if f.Status != "" {
		if _, err := approval.ParseStatus(string(f.Status)); err != nil {
			return nil, fmt.Errorf("list requests: %w", err)
		}
	}
	limit := -1
	if f.Limit > 0 {
		limit = f.Limit
	}
	now := s.now()
	rows, err := s.db.QueryContext(ctx, `SELECT `+requestColumns+` FROM requests
		WHERE ?2 = '' OR (`+effectiveStatus+`) = ?2
		ORDER BY created_at DESC, id DESC LIMIT ?3`, now.UnixNano(), string(f.Status), limit)
	if err != nil {
		return nil, fmt.Errorf("list requests: %w", err)
	}
	defer rows.Close()
	var out []*approval.Request
	for rows.Next() {
		r, err := s.scanRequest(rows, now)
		if err != nil {
			return nil, fmt.Errorf("list requests: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list requests: %w", err)
	}
	rows.Close()
	if err := s.withGrants(ctx, now, out...); err != nil {
		return nil, fmt.Errorf("list requests: %w", err)
	}
	return out, nil
}

// FindPending returns the newest unexpired pending request for this exact call, or an error wrapping
// ErrNotFound. The MCP server uses it to avoid queueing the same call twice.
func (s *Store) FindPending(ctx context.Context, tool, paramsHash string) (*approval.Request, error) {
	return s.find(ctx, `status = 'pending' AND expires_at > ?1`, tool, paramsHash)
}

// FindGranted returns the newest granted request for this exact call whose token has not expired, or an error
// wrapping ErrNotFound. The MCP server then calls Consume with its ID.
func (s *Store) FindGranted(ctx context.Context, tool, paramsHash string) (*approval.Request, error) {
	return s.find(ctx, `status = 'granted' AND token_expiry > ?1`, tool, paramsHash)
}

func (s *Store) find(ctx context.Context, cond, tool, paramsHash string) (*approval.Request, error) {
	now := s.now()
	r, err := s.scanRequest(s.db.QueryRowContext(ctx, `SELECT `+requestColumns+` FROM requests
		WHERE tool = ?2 AND params_hash = ?3 AND `+cond+`
		ORDER BY created_at DESC, id DESC LIMIT 1`, now.UnixNano(), tool, paramsHash), now)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("request for %s %s: %w", tool, paramsHash, approval.ErrNotFound)
	}
	if err == nil {
		err = s.withGrants(ctx, now, r)
	}
	if err != nil {
		return nil, fmt.Errorf("find request for %s: %w", tool, err)
	}
	return r, nil
}

// Grant records one person's approval of the pending request id: token is the signed approval and claims what
// it says (as passed to Sign). The claims must name this request (Subject), match its tool, params hash,
// namespace and plan digest, and not be expired; the token must carry exactly these claims. Only an
// unexpired pending request can be granted; otherwise the error wraps ErrNotFound, ErrNotPending (with
// ErrExpired or ErrConsumed when those apply), ErrWrongTool, ErrParamsMismatch, ErrWrongNamespace or
// ErrPlanMismatch.
//
// A request needs ApprovalsRequired distinct approvers, each with one grant: it stays pending (read as, say,
// "1 of 2 approvals") until the last of them approves, and is granted then. An approver who already approved
// the request is refused with ErrAlreadyApproved and counted once; one whose earlier approval of a pending
// request has expired may approve again, because the expired grant no longer counts. A token that asks for
// more approvals (Claims.ApprovalsRequired) than the request needs raises what it needs. All of it is one
// transaction, so concurrent approvers are counted exactly.
//
// Grant does not verify the signature: the store holds no keys. The admission webhook does.
func (s *Store) Grant(ctx context.Context, id, token string, claims *approval.Claims) error {
	if claims == nil {
		return fmt.Errorf("grant %s: no claims", id)
	}
	if claims.Subject != id {
		return fmt.Errorf("grant %s: the token is for request %q", id, claims.Subject)
	}
	inToken, err := approval.UnverifiedClaims(token)
	if err != nil {
		return fmt.Errorf("grant %s: %w", id, err)
	}
	if !inToken.EqualWire(claims) {
		return fmt.Errorf("grant %s: the token does not carry the given claims", id)
	}
	now := s.now()
	if !now.Before(claims.Expiry) {
		return fmt.Errorf("grant %s: token %w", id, approval.ErrExpired)
	}
	if err := s.grant(ctx, id, token, claims, now); err != nil {
		return fmt.Errorf("grant %s: %w", id, err)
	}
	return nil
}

func (s *Store) grant(ctx context.Context, id, token string, claims *approval.Claims, now time.Time) error {
	n := now.UnixNano()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var (
		r                    approval.Request
		status               string
		expires, tokenExpiry int64
	)
	err = tx.QueryRowContext(ctx, `SELECT tool, params_hash, namespace, plan_digest, status, expires_at, token_expiry,
		approvals_required FROM requests WHERE id = ?`, id).
		Scan(&r.Tool, &r.ParamsHash, &r.Namespace, &r.PlanDigest, &status, &expires, &tokenExpiry, &r.ApprovalsRequired)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("request %q: %w", id, approval.ErrNotFound)
	case err != nil:
		return err
	case r.Tool != claims.Tool:
		return fmt.Errorf("request is for %q: %w", r.Tool, approval.ErrWrongTool)
	case r.ParamsHash != claims.ParamsHash:
		return approval.ErrParamsMismatch
	case r.Namespace != claims.Namespace:
		return fmt.Errorf("request is for %q: %w", r.Namespace, approval.ErrWrongNamespace)
	case r.PlanDigest != claims.PlanDigest:
		return approval.ErrPlanMismatch
	}
	if r.Status = effective(approval.Status(status), expires, tokenExpiry, now); r.Status != approval.StatusPending {
		return notPending(&r)
	}
	// Approvals whose tokens have expired no longer count: their approvers may approve afresh.
	if _, err := tx.ExecContext(ctx, `DELETE FROM grants WHERE request_id = ? AND token_expiry <= ?`, id, n); err != nil {
		return err
	}
	var one int
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM grants WHERE request_id = ? AND approver = ?`, id, claims.Issuer).Scan(&one)
	switch {
	case err == nil:
		return fmt.Errorf("key %s: %w", claims.Issuer, approval.ErrAlreadyApproved)
	case !errors.Is(err, sql.ErrNoRows):
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO grants (request_id, approver, token, token_id, token_expiry, decided_at)
		VALUES (?, ?, ?, ?, ?, ?)`, id, claims.Issuer, token, claims.ID, claims.Expiry.UnixNano(), n); err != nil {
		return err
	}
	if need := claims.RequiredApprovals(); need > r.ApprovalsRequired {
		if _, err := tx.ExecContext(ctx, `UPDATE requests SET approvals_required = ? WHERE id = ?`, need, id); err != nil {
			return err
		}
		r.ApprovalsRequired = need
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM grants WHERE request_id = ?`, id).Scan(&have); err != nil {
		return err
	}
	if have >= r.ApprovalsRequired {
		// The set is complete: granted, until the first of its tokens expires.
		if _, err := tx.ExecContext(ctx, `UPDATE requests SET status = 'granted', approver = ?1, decided_at = ?2,
			token_expiry = (SELECT MIN(token_expiry) FROM grants WHERE request_id = ?3)
			WHERE id = ?3 AND status = 'pending'`, claims.Issuer, n, id); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// RaiseApprovalsRequired makes the pending request id need at least n distinct approvers. It only ever
// raises: an n at or below what the request needs changes nothing (and is not an error, whatever the
// request's state). Raising a request that is no longer pending fails with ErrNotPending; an unknown one
// with ErrNotFound.
func (s *Store) RaiseApprovalsRequired(ctx context.Context, id string, n int) error {
	if n < 1 || n > approval.MaxApprovers {
		return fmt.Errorf("raise approvals of %s: %d is outside [1, %d]", id, n, approval.MaxApprovers)
	}
	now := s.now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("raise approvals of %s: %w", id, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var (
		status               string
		expires, tokenExpiry int64
		need                 int
	)
	err = tx.QueryRowContext(ctx, `SELECT status, expires_at, token_expiry, approvals_required FROM requests WHERE id = ?`, id).
		Scan(&status, &expires, &tokenExpiry, &need)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("raise approvals: request %q: %w", id, approval.ErrNotFound)
	case err != nil:
		return fmt.Errorf("raise approvals of %s: %w", id, err)
	case n <= need:
		return nil
	}
	if st := effective(approval.Status(status), expires, tokenExpiry, now); st != approval.StatusPending {
		return fmt.Errorf("raise approvals of %s: %w", id, notPending(&approval.Request{Status: st}))
	}
	// A pending request has fewer grants than it needs, and needing more keeps it so: the status stays.
	if _, err := tx.ExecContext(ctx, `UPDATE requests SET approvals_required = ? WHERE id = ?`, n, id); err != nil {
		return fmt.Errorf("raise approvals of %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("raise approvals of %s: %w", id, err)
	}
	return nil
}

// Deny records a person's refusal of the pending request id, by approver (a key ID or a user name), with an
// optional reason. Only an unexpired pending request can be denied; otherwise the error wraps ErrNotFound or
// ErrNotPending (with ErrExpired or ErrConsumed when those apply).
func (s *Store) Deny(ctx context.Context, id, approver, reason string) error {
	now := s.now()
	res, err := s.db.ExecContext(ctx, `UPDATE requests
		SET status = 'denied', approver = ?, decided_at = ?, reason = ?
		WHERE id = ? AND status = 'pending' AND expires_at > ?`,
		approver, now.UnixNano(), reason, id, now.UnixNano())
	if err != nil {
		return fmt.Errorf("deny %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("deny %s: %w", id, err)
	} else if n == 1 {
		return nil
	}
	r, err := s.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("deny: %w", err)
	}
	return fmt.Errorf("deny %s: %w", id, notPending(r))
}

// notPending explains why r could not be decided.
func notPending(r *approval.Request) error {
	switch r.Status {
	case approval.StatusExpired:
		return fmt.Errorf("%w (%w)", approval.ErrNotPending, approval.ErrExpired)
	case approval.StatusConsumed:
		return fmt.Errorf("%w (%w)", approval.ErrNotPending, approval.ErrConsumed)
	case approval.StatusPending:
		// Lost a race with a change that has since been undone; there is none today, but say so honestly.
		return fmt.Errorf("%w: concurrent update", approval.ErrNotPending)
	}
	return fmt.Errorf("%w: it is %s", approval.ErrNotPending, r.Status)
}

// Consume uses up the grants of request id for the call (tool, paramsHash) and returns their tokens, one per
// approver, in the order they approved. It is one transaction that marks the request consumed with a
// conditional UPDATE and reads every grant's token, so of any number of concurrent consumers, in any number of
// processes, exactly one gets the tokens, all of them. The others, and any later call, get an error wrapping
// ErrConsumed; other failures wrap ErrNotFound, ErrWrongTool, ErrParamsMismatch, ErrNotGranted (pending,
// which includes a request with some but not all of its approvals, or denied) or ErrExpired (the first of its
// tokens has expired).
func (s *Store) Consume(ctx context.Context, id, tool, paramsHash string) ([]string, error) {
	tokens, err := s.consume(ctx, id, tool, paramsHash, s.now().UnixNano())
	if err != nil {
		return nil, fmt.Errorf("consume approval %s: %w", id, err)
	}
	return tokens, nil
}

func (s *Store) consume(ctx context.Context, id, tool, paramsHash string, now int64) ([]string, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var need int
	err = tx.QueryRowContext(ctx, `UPDATE requests SET status = 'consumed', consumed_at = ?1
		WHERE id = ?2 AND status = 'granted' AND token_expiry > ?1 AND tool = ?3 AND params_hash = ?4
		RETURNING approvals_required`, now, id, tool, paramsHash).Scan(&need)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, whyNotConsumed(ctx, tx, id, tool, paramsHash, now)
	}
	if err != nil {
		return nil, err
	}
	tokens, err := GrantTokens(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	if len(tokens) < need {
		// Grant only grants a complete set; a request that claims otherwise is refused, not half used.
		return nil, fmt.Errorf("%s: %w", approval.Progress(len(tokens), need), approval.ErrNotGranted)
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return tokens, nil
}

// GiveBack returns the grants of request id that Consume took to a call whose Job was never sent to the
// cluster (sandbox.ErrNotSent): no webhook saw their tokens, so none was used, and the request is granted
// again — for the same exact call, until its tokens expire — instead of asking its approvers again. Only a
// consumed request changes: anything else is an error wrapping ErrNotPending.
func (s *Store) GiveBack(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE requests SET status = 'granted', consumed_at = 0 WHERE id = ? AND status = 'consumed'`, id)
	if err != nil {
		return fmt.Errorf("give back approval %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("give back approval %s: %w: it was not consumed", id, approval.ErrNotPending)
	}
	return nil
}

// Querier is what GrantTokens reads through: a *sql.Tx or a *sql.DB.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// GrantTokens reads the token of every grant of request id, in the order Consume returns them: the order
// the approvers approved in. Consume reads them through its transaction; a reader of the database file
// that holds no Store (the demo, which plays an attacker who stole a used token from it) passes its own
// handle and gets the very list Consume handed on.
func GrantTokens(ctx context.Context, q Querier, id string) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT token FROM grants WHERE request_id = ? ORDER BY decided_at, approver`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var tokens []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		tokens = append(tokens, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return tokens, nil
}

// whyNotConsumed explains, inside the failed consumer's transaction, why request id had no grant to consume.
func whyNotConsumed(ctx context.Context, tx *sql.Tx, id, tool, paramsHash string, now int64) error {
	var (
		gotTool, gotHash, status string
		tokenExpiry              int64
	)
	err := tx.QueryRowContext(ctx, `SELECT tool, params_hash, status, token_expiry FROM requests WHERE id = ?`, id).
		Scan(&gotTool, &gotHash, &status, &tokenExpiry)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("request %q: %w", id, approval.ErrNotFound)
	case err != nil:
		return err
	case gotTool != tool:
		return fmt.Errorf("approved for %q: %w", gotTool, approval.ErrWrongTool)
	case gotHash != paramsHash:
		return approval.ErrParamsMismatch
	}
	switch approval.Status(status) {
	case approval.StatusConsumed:
		return approval.ErrConsumed
	case approval.StatusGranted:
		if tokenExpiry <= now {
			return approval.ErrExpired
		}
		// The grant was there a moment ago and is now neither consumed nor expired: impossible with the
		// current state machine, so refuse rather than retry.
		return fmt.Errorf("concurrent update: %w", approval.ErrNotGranted)
	default:
		return fmt.Errorf("request is %s: %w", status, approval.ErrNotGranted)
	}
}

// maxPlanDescription bounds a stored plan description.
const maxPlanDescription = 64 << 10

// RecordPlan stores (or replaces) a saved plan's description.
func (s *Store) RecordPlan(ctx context.Context, p approval.Plan) error {
	if len(p.Description) > maxPlanDescription {
		p.Description = p.Description[:maxPlanDescription] + "\n  ... (cut)"
	}
	sig, err := json.Marshal(nonNilSignals(p.Signals))
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO plans (plan_id, workspace, description, signals, created_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (plan_id) DO UPDATE SET workspace = excluded.workspace, description = excluded.description, signals = excluded.signals`,
		p.ID, p.Workspace, p.Description, string(sig), s.now().UnixNano())
	if err != nil {
		return fmt.Errorf("record plan %s: %w", p.ID, err)
	}
	return nil
}

// GetPlan returns a saved plan's description, or an error wrapping ErrNotFound.
func (s *Store) GetPlan(ctx context.Context, id string) (*approval.Plan, error) {
	var p approval.Plan
	var sig string
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT plan_id, workspace, description, signals, created_at FROM plans WHERE plan_id = ?`, id).
		Scan(&p.ID, &p.Workspace, &p.Description, &sig, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("plan %q: %w", id, approval.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get plan %s: %w", id, err)
	}
	if err := json.Unmarshal([]byte(sig), &p.Signals); err != nil {
		return nil, fmt.Errorf("plan %s signals: %w", id, err)
	}
	p.CreatedAt = time.Unix(0, created)
	return &p, nil
}

func nonNilSignals(s []approval.Signal) []approval.Signal {
	if s == nil {
		return []approval.Signal{}
	}
	return s
}
