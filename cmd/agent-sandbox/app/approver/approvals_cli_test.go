package approver

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	approvalstore "github.com/agent-sandbox/agent-sandbox/internal/approval/store"
)

// TestApprovalsJSON: approvals list and show -o json print the requests for scripts: an array (empty
// included), the same fields for show, control characters escaped, and never the token.
func TestApprovalsJSON(t *testing.T) {
	e := newApprovalEnv(t)
	none := bytes.NewReader(nil)
	if code, out, stderr := runApprovalCLI(t, none, "approvals", "list", "--db", e.db, "-o", "json"); code != 0 || out != "[]\n" {
		t.Fatalf("list -o json of an empty database: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	pending := e.createRequest(t, func(r *approval.Request) { r.PlanSummary = "one\n\x1b]0;evil\x07two" })
	granted := e.createRequest(t, func(r *approval.Request) { r.Tool = "kubectl_delete"; r.Namespace = "apps" })
	token := e.grant(t, granted)

	code, out, stderr := runApprovalCLI(t, none, "approvals", "list", "--db", e.db, "-o", "json")
	var list []requestJSON
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("list -o json: exit %d, %v, stderr %q\n%s", code, err, stderr, out)
	}
	if len(list) != 2 || list[0].ID != granted.ID || list[1].ID != pending.ID {
		t.Fatalf("list -o json: want %s then %s, got %+v", granted.ID, pending.ID, list)
	}
	if g := list[0]; g.Status != approval.StatusGranted || g.Tool != "kubectl_delete" || g.Namespace != "apps" ||
		g.TokenID == "" || g.TokenExpiry == "" || g.CreatedAt == "" || g.ParamsHash != granted.ParamsHash {
		t.Errorf("granted request: %+v", g)
	}
	if p := list[1]; p.Status != approval.StatusPending || p.PlanSummary != "one\n\x1b]0;evil\x07two" || len(p.Signals) != 1 ||
		p.Params["dir"] != "infra/prod" || p.Params["auto_approve"] != true || p.DecidedAt != "" {
		t.Errorf("pending request: %+v", p)
	}
	if strings.ContainsAny(out, "\x1b\x07") || strings.Contains(out, token[strings.LastIndexByte(token, '.')+1:]) {
		t.Errorf("list -o json printed a control character or the token:\n%s", out)
	}

	code, out, _ = runApprovalCLI(t, none, "approvals", "show", granted.ID, "--db", e.db, "-o", "json")
	var one requestJSON
	if err := json.Unmarshal([]byte(out), &one); code != 0 || err != nil || one.ID != granted.ID || one.TokenID != list[0].TokenID {
		t.Errorf("show -o json: exit %d, %v\n%s", code, err, out)
	}
	for _, args := range [][]string{{"approvals", "list", "-o", "yaml"}, {"approvals", "show", granted.ID, "-o", "wide"}} {
		if code, _, stderr := runApprovalCLI(t, none, append(args, "--db", e.db)...); code != cli.ExitUsage || !strings.Contains(stderr, "want text or json") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}

// TestCommandsDoNotCreateTheDatabase: the commands that read or decide on existing requests, and request-ID
// completion, never create the approvals database or its folder; a missing one is "not found" (exit 3)
// with a message that says what to check.
func TestCommandsDoNotCreateTheDatabase(t *testing.T) {
	e := newApprovalEnv(t) // only for the isolated $HOME
	dir := filepath.Join(e.dir, "state")
	db := filepath.Join(dir, "approvals.db")
	none := bytes.NewReader(nil)
	for _, args := range [][]string{
		{"approvals", "list", "--db", db},
		{"approvals", "list", "-o", "json", "--db", db},
		{"approvals", "show", "req-aaaaaaaaaaaa", "--db", db},
		{"deny", "req-aaaaaaaaaaaa", "--db", db},
	} {
		code, out, stderr := runApprovalCLI(t, none, args...)
		if code != cli.ExitNotFound || out != "" || stderr != "error: approvals database does not exist: "+db+
			" (the MCP server creates it with the first request; check --db or $"+approvalstore.EnvDB+")\n" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
	// The default path, under the test's $HOME, is not created either.
	if code, _, _ := runApprovalCLI(t, none, "approvals", "list"); code != cli.ExitNotFound {
		t.Errorf("approvals list with the default database: exit %d", code)
	}
	for _, args := range [][]string{{"__complete", "approve", ""}, {"__complete", "approvals", "show", "--db", db, ""}} {
		if code, out, _ := runApprovalCLI(t, none, args...); code != 0 || strings.Contains(out, "req-") {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
	for _, p := range []string{dir, filepath.Join(e.dir, ".local", "state", "agent-sandbox")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s was created (%v)", p, err)
		}
	}
}

// TestCompletion: cobra's completion scripts exist, and request IDs complete from the database: approve
// and deny offer pending requests only, approvals show all of them, each with its tool and namespace.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if code, out, stderr := testMain.Capture("completion", shell); code != 0 || !strings.Contains(out, "agent-sandbox") {
			t.Errorf("completion %s: exit %d, stderr %q", shell, code, stderr)
		}
	}
	e := newApprovalEnv(t)
	pending := e.createRequest(t, func(r *approval.Request) { r.Namespace = "demo\x1b[2J" })
	granted := e.createRequest(t, nil)
	e.grant(t, granted)
	none := bytes.NewReader(nil)

	for _, tc := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"approve", "--db", e.db, ""}, []string{pending.ID + "\tpending terraform_apply in demo\\u001b[2J"}, []string{granted.ID}},
		{[]string{"deny", "--db", e.db, "req-"}, []string{pending.ID}, []string{granted.ID}},
		{[]string{"approvals", "show", "--db", e.db, ""}, []string{pending.ID, granted.ID + "\tgranted terraform_apply in demo"}, nil},
		{[]string{"approvals", "show", "--db", e.db, granted.ID[:6] + "zzz"}, nil, []string{pending.ID, granted.ID}},
		{[]string{"approvals", "show", "--db", e.db, pending.ID, ""}, nil, []string{"req-"}},
		{[]string{"approvals", "list", "--status", ""}, []string{"pending", "expired"}, nil},
	} {
		code, out, stderr := runApprovalCLI(t, none, append([]string{"__complete"}, tc.args...)...)
		if code != 0 {
			t.Errorf("%v: exit %d, stderr %q", tc.args, code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains("\n"+out, "\n"+w) {
				t.Errorf("%v: lacks %q:\n%s", tc.args, w, out)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("%v: offers %q:\n%s", tc.args, n, out)
			}
		}
		if strings.Contains(out, "\x1b") {
			t.Errorf("%v: a control character reached the shell:\n%q", tc.args, out)
		}
	}
}

// TestApproveIgnoresAPolicyInTheWorkingFolder: an approver runs `approve` wherever the terminal is, often the
// project the agent works on. A policy the agent planted there (policy/policy.yaml) must not choose the
// cluster the approval is signed for: with no --policy, --audience or environment, approve reads only the
// user's own copy (~/.config/agent-sandbox/policy.yaml) and otherwise asks for the cluster.
func TestApproveIgnoresAPolicyInTheWorkingFolder(t *testing.T) {
	shipped, err := os.ReadFile("../../../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	withCluster := func(id string) []byte {
		return []byte(strings.Replace(string(shipped), "clusterID: agent-sandbox-local", "clusterID: "+id, 1))
	}
	e := newApprovalEnv(t)
	r := e.createRequest(t, nil)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("AGENT_SANDBOX_POLICY", "")
	t.Setenv("AGENT_SANDBOX_CLUSTER_ID", "")
	work := t.TempDir()
	if err := os.MkdirAll(filepath.Join(work, "policy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "policy", "policy.yaml"), withCluster("prod-other-cluster"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	// The flags as the command binds them, with this environment; then Complete and Validate.
	audience := func() (string, error) {
		o := &approveOptions{storeFlags: storeFlags{DBPath: e.db}, KeyPath: e.keyPath, TTL: approval.DefaultTokenTTL}
		o.plan.bind(&cobra.Command{})
		if err := o.Complete([]string{r.ID}); err != nil {
			return "", err
		}
		return o.Audience, o.Validate()
	}
	if got, err := audience(); got != "" || err == nil || !strings.Contains(err.Error(), "the cluster to approve for is unknown") {
		t.Fatalf("approve with a planted policy in the working folder: audience %q, %v; want the cluster asked for", got, err)
	}

	// The user's own copy is the default.
	own := filepath.Join(e.dir, ".config", "agent-sandbox")
	if err := os.MkdirAll(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(own, "policy.yaml"), withCluster("my-cluster"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := audience(); got != "my-cluster" || err != nil {
		t.Fatalf("approve with the user's own policy: audience %q, %v; want my-cluster", got, err)
	}
}
