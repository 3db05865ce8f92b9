package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// exampleServer is one MCP server entry of a client configuration: Claude Desktop and Cursor list them
// under "mcpServers", VS Code under "servers".
type exampleServer struct {
	Type    string   `json:"type"`
	Command string   `json:"command"`
	Args    []string `json:"args"`
}

// TestExamplesRunAsWritten: every client configuration in examples/ (and the Claude Code script) starts
// `agent-sandbox mcp` with flags that the mcp command has: an unknown flag, a stray argument or a path
// that nothing installs fails here instead of in a user's MCP client.
func TestExamplesRunAsWritten(t *testing.T) {
	files, err := filepath.Glob("../../../../examples/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples/*.json: %v", err)
	}
	_, helpOut, _ := testMain.Capture("mcp", "--help")
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]map[string]exampleServer
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		servers := doc["mcpServers"]
		if servers == nil {
			servers = doc["servers"]
		}
		if len(servers) == 0 {
			t.Errorf("%s: no mcpServers or servers entry", f)
		}
		for name, s := range servers {
			if s.Type != "" && s.Type != "stdio" {
				t.Errorf("%s: %s: type %q, want stdio", f, name, s.Type)
			}
			checkExampleCommand(t, filepath.Base(f)+" "+name, helpOut, append([]string{s.Command}, s.Args...))
			seen++
		}
	}

	script, err := os.ReadFile("../../../../examples/claude_code.sh")
	if err != nil {
		t.Fatal(err)
	}
	add := regexp.MustCompile(`(?m)^claude mcp add \S+ -- (.+)$`).FindAllStringSubmatch(string(script), -1)
	if len(add) != 1 {
		t.Fatalf("examples/claude_code.sh: want one `claude mcp add NAME -- COMMAND` line, found %d", len(add))
	}
	checkExampleCommand(t, "claude_code.sh", helpOut, strings.Fields(add[0][1]))
	t.Logf("checked %d client configurations and the Claude Code script", seen)
}

// checkExampleCommand checks one command line: the agent-sandbox binary (on PATH, or ~/.local/bin where
// make install-client puts it), the mcp subcommand, and flags that `agent-sandbox mcp` knows and --help
// documents, with no positional argument.
func checkExampleCommand(t *testing.T, where, helpOut string, argv []string) {
	t.Helper()
	if len(argv) < 2 {
		t.Errorf("%s: command line %q is too short", where, argv)
		return
	}
	if argv[0] != "agent-sandbox" && !strings.HasSuffix(argv[0], "/.local/bin/agent-sandbox") {
		t.Errorf("%s: command %q: want agent-sandbox (on PATH) or ~/.local/bin/agent-sandbox, where make install-client puts it", where, argv[0])
	}
	if argv[1] != "mcp" {
		t.Errorf("%s: subcommand %q, want mcp", where, argv[1])
		return
	}
	for _, a := range argv {
		if strings.Contains(a, "/opt/") || strings.Contains(a, "/var/lib/agent-sandbox-local") {
			t.Errorf("%s: %q is a path no install step writes for a user", where, a)
		}
	}
	mcpCmd := NewMCPCommand(cli.IO{}, "test")
	if err := mcpCmd.ParseFlags(argv[2:]); err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if rest := mcpCmd.Flags().Args(); len(rest) != 0 {
		t.Errorf("%s: mcp takes no arguments, the example gives %q", where, rest)
	}
	for _, a := range argv[2:] {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if !strings.Contains(helpOut, "--"+name+" ") {
				t.Errorf("%s: --%s is not documented by agent-sandbox mcp --help", where, name)
			}
		}
	}
}
