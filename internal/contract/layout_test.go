package contract_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The layout by trust role (docs/architecture.md), checked over `go list`: what the admission webhook
// trusts cannot pull in what runs beside the agent, and each outside dependency has one importer.

const module = "github.com/agent-sandbox/agent-sandbox/"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command("go", "list", "-deps=false", "-json", module+"...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	all := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		all[strings.TrimPrefix(p.ImportPath, module)] = p
	}
	return all
}

// TestTrustedCodeStaysTrusted: the webhook and what it decides with (the rendering, the CEL rules, tokens)
// never depend on the MCP server's side — its SQLite approvals store, the MCP SDK, the server package.
func TestTrustedCodeStaysTrusted(t *testing.T) {
	all := listPackages(t)
	forbidden := []string{"modernc.org/sqlite", "github.com/modelcontextprotocol/go-sdk", module + "mcp", module + "internal/service", module + "internal/approval/store"}
	for _, trusted := range []string{"webhook", "internal/warmpool", "internal/ledger", "internal/servingcert", "internal/contentgc", "cel", "internal/policy", "internal/sandbox", "internal/approval", "internal/contract", "broker"} {
		p, ok := all[trusted]
		if !ok {
			t.Fatalf("package %s is gone: update the layout test", trusted)
		}
		for _, d := range p.Deps {
			for _, f := range forbidden {
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("trusted package %s depends on %s (the MCP server's side)", trusted, d)
				}
			}
		}
	}
}

// TestUntrustedCodeDoesNotDecide: the MCP server and its runner never import the webhook's decision
// package or the Vault configuration: what admission decides, the server cannot call around.
func TestUntrustedCodeDoesNotDecide(t *testing.T) {
	all := listPackages(t)
	for _, untrusted := range []string{"mcp", "internal/service", "internal/toolrun"} {
		for _, d := range all[untrusted].Deps {
			if d == module+"webhook" || d == module+"broker" {
				t.Errorf("untrusted package %s depends on %s", untrusted, d)
			}
		}
	}
}

// TestStorageDoesNotDecide: the webhook's storage and upkeep — its ledgers and the audit anchors, its
// serving certificate, the pruning of expired content — never import the decision package, so the
// decisions declare what they consume, and `agent-sandbox audit verify` reads the anchors
// (ledger.ListAnchors) without linking in what admits.
func TestStorageDoesNotDecide(t *testing.T) {
	all := listPackages(t)
	for _, storage := range []string{"internal/ledger", "internal/servingcert", "internal/contentgc"} {
		p, ok := all[storage]
		if !ok {
			t.Fatalf("package %s is gone: update the layout test", storage)
		}
		for _, d := range p.Deps {
			if d == module+"webhook" || strings.HasPrefix(d, module+"webhook/") {
				t.Errorf("%s depends on %s, the decision package", storage, d)
			}
		}
	}
}

// TestPrunerNeedsOnlyTheNames: the pruning of expired content needs the names of what it prunes, which
// this package declares, not the code that renders and runs sandboxes: of this module it links nothing else.
func TestPrunerNeedsOnlyTheNames(t *testing.T) {
	p, ok := listPackages(t)["internal/contentgc"]
	if !ok {
		t.Fatal("package internal/contentgc is gone: update the layout test")
	}
	for _, d := range p.Deps {
		if strings.HasPrefix(d, module) && d != module+"internal/contract" {
			t.Errorf("internal/contentgc depends on %s", d)
		}
	}
}

// TestOneImporterEach: cel-go only in cel/, the MCP SDK only in mcp/, Vault's API only in broker/, SQLite
// only in the approvals store (and the demo that reads it).
func TestOneImporterEach(t *testing.T) {
	all := listPackages(t)
	owners := map[string][]string{
		"github.com/google/cel-go/":               {"cel"},
		"github.com/modelcontextprotocol/go-sdk/": {"mcp"},
		"github.com/hashicorp/vault/api":          {"broker"},
		"modernc.org/sqlite":                      {"internal/approval/store", "test/demo"},
	}
	for name, p := range all {
		for _, imp := range p.Imports {
			for prefix, allowed := range owners {
				if strings.HasPrefix(imp, prefix) && !slices.Contains(allowed, name) {
					t.Errorf("%s imports %s; only %v may", name, imp, allowed)
				}
			}
		}
	}
}

// The command packages by trust role (cmd/agent-sandbox/app's package comment, docs/architecture.md).
const commands = "cmd/agent-sandbox/app/"

// TestCommandsByTrustRole: each role's commands link only what the role needs. The approver's, the
// sandbox's and the audit commands never link the webhook's decision package, the MCP server or its SDK;
// the sandbox's and the cluster's never link the approvals store or SQLite (which only the MCP host and the
// approver keep); only the commands that configure Vault or log in to it link Vault's API. The commands
// beside the agent (agent), which are not trusted, never link the decision package, Vault's API or the
// broker. No role links another (so no trusted role links the untrusted agent's commands, nor they a
// trusted role's), nor the root that wires them, and the plumbing they share (cli) links nothing of this
// module.
func TestCommandsByTrustRole(t *testing.T) {
	all := listPackages(t)
	decision := []string{module + "webhook", module + "internal/warmpool", module + "internal/servingcert", module + "internal/contentgc"}
	mcpSide := []string{"github.com/modelcontextprotocol/go-sdk", module + "mcp", module + "internal/service"}
	storage := []string{"modernc.org/sqlite", module + "internal/approval/store"}
	vault := []string{"github.com/hashicorp/vault/api", module + "broker"}
	roles := map[string][][]string{
		"approver":  {decision, mcpSide, vault},
		"sandboxed": {decision, mcpSide, storage},
		"auditor":   {decision, mcpSide, storage, vault},
		"cluster":   {mcpSide, storage},
		"agent":     {decision, vault},
	}
	for role, groups := range roles {
		p, ok := all[commands+role]
		if !ok {
			t.Fatalf("package %s%s is gone: update the layout test", commands, role)
		}
		var forbidden []string
		for other := range roles {
			if other != role {
				forbidden = append(forbidden, module+commands+other)
			}
		}
		for _, g := range groups {
			forbidden = append(forbidden, g...)
		}
		for _, d := range p.Deps {
			if d == module+"cmd/agent-sandbox/app" {
				t.Errorf("the %s commands depend on the root command package, which wires them", role)
			}
			for _, f := range forbidden {
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("the %s commands (%s%s) depend on %s", role, commands, role, d)
				}
			}
		}
	}
	cli, ok := all[commands+"cli"]
	if !ok {
		t.Fatalf("package %scli is gone: update the layout test", commands)
	}
	for _, d := range cli.Deps {
		if strings.HasPrefix(d, module) {
			t.Errorf("%scli, the plumbing every role shares, depends on %s", commands, d)
		}
	}
}
