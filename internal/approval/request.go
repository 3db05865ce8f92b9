package approval

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"slices"
	"strings"
	"time"
)

const (
	// DefaultRequestTTL is how long a request waits for a decision before it expires.
	DefaultRequestTTL = 24 * time.Hour
	// requestIDPrefix starts every request ID.
	requestIDPrefix = "req-"
	// requestIDRandomLength is the number of random base32 characters after the prefix (60 bits).
	requestIDRandomLength = 12
)

// requestIDEncoding spells request IDs: lower-case base32 (extended hex alphabet, 0-9a-v), easy to type.
var requestIDEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// Status is the state of an approval request.
type Status string

// The states of a request. Pending requests become granted (once ApprovalsRequired distinct approvers have
// approved) or denied; granted ones become consumed. A pending request may already hold some grants: it reads
// as, say, "1 of 2 approvals" (Request.Progress). Expired is never stored: it is what a pending request reads
// as past its ExpiresAt, and a granted one past its TokenExpiry.
const (
	StatusPending  Status = "pending"
	StatusGranted  Status = "granted"
	StatusDenied   Status = "denied"
	StatusConsumed Status = "consumed"
	StatusExpired  Status = "expired"
)

// ParseStatus checks a status name given by a user.
func ParseStatus(s string) (Status, error) {
	switch st := Status(s); st {
	case StatusPending, StatusGranted, StatusDenied, StatusConsumed, StatusExpired:
		return st, nil
	}
	return "", fmt.Errorf("unknown status %q (want pending, granted, denied, consumed or expired)", s)
}

// Signal is one reason a request is destructive, found by the MCP server in its parameters or plan: Name says
// what kind (say "resource_delete") and Match what matched (say "aws_db_instance.main will be destroyed").
type Signal struct {
	Name  string `json:"name"`
	Match string `json:"match"`
}

// Request is a tool call waiting for, or carrying, people's decisions.
//
// The signed tokens of its grants are deliberately not fields: the only way to read them is Store.Consume,
// which also uses them up, so a Request can be printed, logged or returned anywhere.
type Request struct {
	ID          string         // "req-" and 12 lower-case base32 characters
	Tool        string         // tool name
	Params      map[string]any // tool parameters (strings, booleans, int64 once read back)
	ParamsHash  string         // ParamsHash(Tool, Params)
	Namespace   string         // target namespace
	PlanDigest  string         // digest of the saved plan (terraform_apply), or empty
	PlanSummary string         // human-readable summary of what the call will do
	Signals     []Signal       // why the call is destructive
	CreatedAt   time.Time
	ExpiresAt   time.Time // the request expires unless decided before this
	Status      Status    // as of the store's clock when read
	// ApprovalsRequired is how many distinct approvers must approve before the request is granted: 1 unless
	// CreateRequest was given more, RaiseApprovalsRequired raised it, or an approver's token asked for more.
	ApprovalsRequired int
	// Grants are the approvals given so far, in the order given. Those of a pending request whose tokens
	// have expired no longer count and are left out.
	Grants      []Grant
	Approver    string // who denied; for a granted request the key ID of the approver who completed the set
	DecidedAt   time.Time
	Reason      string    // why it was denied
	TokenID     string    // jti of the first grant's token, once granted (Grants has every grant's)
	TokenExpiry time.Time // once granted: when the earliest of its grants' tokens expires, and with it the grant
	ConsumedAt  time.Time
}

// Grant is one approver's approval of a request, as stored. Its signed token is not a field (see Request).
type Grant struct {
	Approver    string    // the approver's key ID
	TokenID     string    // jti of the approver's token
	TokenExpiry time.Time // when the approver's token expires
	DecidedAt   time.Time // when the approver approved
}

// Approvals is the number of distinct approvers whose grants count.
func (r *Request) Approvals() int { return len(r.Grants) }

// Approvers are the key IDs of the approvers whose grants count, in the order they approved.
func (r *Request) Approvers() []string {
	out := make([]string, 0, len(r.Grants))
	for _, g := range r.Grants {
		out = append(out, g.Approver)
	}
	return out
}

// HasApprover reports whether the approver with key ID keyID has approved r (and that approval counts).
func (r *Request) HasApprover(keyID string) bool { return slices.Contains(r.Approvers(), keyID) }

// Progress says how far r is, as "1 of 2 approvals".
func (r *Request) Progress() string { return Progress(r.Approvals(), r.Required()) }

// Required is ApprovalsRequired, at least 1.
func (r *Request) Required() int { return max(r.ApprovalsRequired, 1) }

// String summarises the request for logs and messages.
func (r *Request) String() string {
	return fmt.Sprintf("%s (tool %s, namespace %s, status %s, %s)", r.ID, r.Tool, r.Namespace, r.Status, r.Progress())
}

// GoString prints the identifying fields only, also under %#v.
func (r *Request) GoString() string {
	return fmt.Sprintf("approval.Request{ID: %q, Tool: %q, Namespace: %q, ParamsHash: %q, Status: %q, TokenID: %q}",
		r.ID, r.Tool, r.Namespace, r.ParamsHash, r.Status, r.TokenID)
}

// ListFilter selects requests for List. Zero values select everything.
type ListFilter struct {
	Status Status // only requests with this (effective) status
	Limit  int    // at most this many, newest first; 0 means no limit
}

// NewRequestID returns a fresh request ID: "req-" and 12 random lower-case base32 characters.
func NewRequestID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("request ID: %w", err)
	}
	return requestIDPrefix + requestIDEncoding.EncodeToString(b[:])[:requestIDRandomLength], nil
}

// ValidRequestID reports whether id has the form NewRequestID produces.
func ValidRequestID(id string) bool {
	rest, ok := strings.CutPrefix(id, requestIDPrefix)
	if !ok || len(rest) != requestIDRandomLength {
		return false
	}
	for _, c := range []byte(rest) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'v') {
			return false
		}
	}
	return true
}

// Plan is a saved plan's description, as the MCP server recorded it when the plan ran.
type Plan struct {
	ID          string
	Workspace   string
	Description string
	Signals     []Signal
	CreatedAt   time.Time
}
