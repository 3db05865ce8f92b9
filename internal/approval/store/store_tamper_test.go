package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
)

// TestReadRefusesAParamsHashThatIsNotTheParameters: the database is the MCP server's file. A row whose
// params_hash is not the hash of its tool and params, or whose params are not stored canonically, is refused
// on every read (ErrTampered), so that nothing shows one set of parameters and signs another.
func TestReadRefusesAParamsHashThatIsNotTheParameters(t *testing.T) {
	ctx := context.Background()
	other, err := approval.ParamsHash("terraform_apply", map[string]any{"dir": "infra/prod"})
	if err != nil {
		t.Fatal(err)
	}
	otherTool, err := approval.ParamsHash("other_tool", map[string]any{"dir": "infra/staging"})
	if err != nil {
		t.Fatal(err)
	}
	for name, stmt := range map[string]string{
		"hash of other parameters": `UPDATE requests SET params_hash = '` + other + `'`,
		"hash of another tool":     `UPDATE requests SET params_hash = '` + otherTool + `'`,
		"tool changed":             `UPDATE requests SET tool = 'other_tool'`,
		"params changed":           `UPDATE requests SET params = '{"dir":"infra/prod"}'`,
		"duplicate key":            `UPDATE requests SET params = '{"dir":"infra/prod","dir":"infra/staging"}'`,
		"not canonical":            `UPDATE requests SET params = '{ "dir": "infra/staging" }'`,
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "a.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r, err := s.CreateRequest(ctx, approval.Request{Tool: "terraform_apply", Params: map[string]any{"dir": "infra/staging"}, Namespace: "demo"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.db.ExecContext(ctx, stmt); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Get(ctx, r.ID); !errors.Is(err, approval.ErrTampered) {
				t.Errorf("Get = %#v, %v; want ErrTampered", got, err)
			}
			if _, err := s.List(ctx, approval.ListFilter{}); !errors.Is(err, approval.ErrTampered) {
				t.Errorf("List: %v; want ErrTampered", err)
			}
		})
	}
}

// TestReadRefusesWhatNoStoreWrites: a status outside the four the store writes, or a request ID not of
// the form it writes, is refused on read (ErrTampered): the file's owner is bound by none of the schema's
// CHECK constraints.
func TestReadRefusesWhatNoStoreWrites(t *testing.T) {
	ctx := context.Background()
	for name, stmt := range map[string]string{
		"status":     `UPDATE requests SET status = 'granted' || char(27) || '[2J'`,
		"request ID": `UPDATE requests SET id = id || char(27)`,
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "a.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.CreateRequest(ctx, approval.Request{Tool: "terraform_apply", Params: map[string]any{"dir": "infra/staging"}, Namespace: "demo"}); err != nil {
				t.Fatal(err)
			}
			conn, err := s.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{`PRAGMA ignore_check_constraints = ON`, `PRAGMA foreign_keys = OFF`, stmt} {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					t.Fatal(q, err)
				}
			}
			conn.Close()
			if _, err := s.List(ctx, approval.ListFilter{}); !errors.Is(err, approval.ErrTampered) {
				t.Errorf("List: %v; want ErrTampered", err)
			}
		})
	}
}
