package scripts

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// noApproversMessage is what deploy says, exactly, when a non-local cluster is given no approver keys.
const noApproversMessage = "error: APPROVERS_JWKS is not set. On a cluster other than the local one, deploy makes no approver key " +
	"and trusts only the public keys you give it, so that nothing but a person can approve. Each approver makes a key on " +
	"their own machine with `agent-sandbox keygen` (it asks for a passphrase and writes ~/.config/agent-sandbox/approver.key, " +
	"which never leaves that machine, and its public half ~/.config/agent-sandbox/approver.key.jwks.json) and sends you the " +
	".jwks.json file; put all of them in one JWK set with `jq -s '{keys: map(.keys[])}' alice.jwks.json bob.jwks.json > " +
	"approvers.jwks.json` and run again with APPROVERS_JWKS=approvers.jwks.json.\n"

// Two approvers' public keys, as `agent-sandbox keygen` writes them.
const approversJWKS = `{"keys":[
 {"kty":"OKP","crv":"Ed25519","kid":"alice","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","alg":"EdDSA","use":"sig"},
 {"kty":"OKP","crv":"Ed25519","kid":"bob","x":"3p7bfXt9wbTTW2HC7OQ1Nz-DQ8hbeGdNrfx-FG-IK08","alg":"EdDSA","use":"sig"}]}`

// deployEnv is a sandbox for one run of deploy.sh: its state, cache and home folders are empty temporary
// folders, and every program that could build, make a key or reach a network or cluster (go, openssl,
// curl, helm, kubectl, vault) is replaced by a stub that records the call and fails.
type deployEnv struct {
	dir, state, cache, home, calls string
	env                            []string
}

func newDeployEnv(t *testing.T) *deployEnv {
	t.Helper()
	for _, tool := range []string{"bash", "awk", "getent"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	bin := agentSandboxBin(t)
	dir := t.TempDir()
	e := &deployEnv{dir: dir, state: filepath.Join(dir, "state"), cache: filepath.Join(dir, "cache"), home: filepath.Join(dir, "home"),
		calls: filepath.Join(dir, "calls")}
	stubs := filepath.Join(dir, "stubs")
	for _, d := range []string{e.state, e.cache, e.home, stubs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"go", "openssl", "curl", "wget", "helm", "kubectl", "vault", "ssh-keygen"} {
		stub := "#!/bin/sh\necho \"" + tool + " $*\" >> " + e.calls + "\nexit 1\n"
		if err := os.WriteFile(filepath.Join(stubs, tool), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.env = []string{
		"PATH=" + stubs + ":" + os.Getenv("PATH"),
		"HOME=" + e.home,
		"AGENT_SANDBOX_STATE=" + e.state,
		"AGENT_SANDBOX_CACHE=" + e.cache,
		"DEPLOY_DRY_RUN=1",
		// The agent-sandbox command deploy reads the policy and the key sets with, built once by the test:
		// deploy itself must build nothing here (go is a failing stub).
		"AGENT_SANDBOX_BIN=" + bin,
		// Anything that still tried the network would fail at once.
		"http_proxy=http://127.0.0.1:1", "https_proxy=http://127.0.0.1:1", "HTTP_PROXY=http://127.0.0.1:1", "HTTPS_PROXY=http://127.0.0.1:1",
		"GOPROXY=off",
	}
	return e
}

// nonLocal is the environment the install guide names for a cluster other than the local one.
func (e *deployEnv) nonLocal(t *testing.T) []string {
	t.Helper()
	kc := e.file(t, "gke.kubeconfig", "apiVersion: v1\nkind: Config\n", 0o600)
	return append(e.env,
		"KUBECONFIG="+kc,
		"API_SERVER_URL=https://203.0.113.10:443", "API_CIDR=203.0.113.10/32",
		"VAULT_ADDR=https://vault.example.com:8200", "VAULT_POD_ADDR=https://10.10.0.5:8200", "VAULT_CIDR=10.10.0.5/32",
		"IMAGE=registry.example.com/agent-sandbox:v1.2.3",
	)
}

// run runs scripts/deploy.sh from dir with env and returns its exit code and output.
func (e *deployEnv) run(t *testing.T, dir string, env []string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runScript(t, "deploy.sh", dir, env, &stdout, &stderr)
	t.Logf("deploy.sh: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	return code, stdout.String(), stderr.String()
}

// plan runs deploy.sh from the sandbox's folder with env, as run does, and returns all it printed; a run
// that fails stops the test.
func (e *deployEnv) plan(t *testing.T, env []string) string {
	t.Helper()
	code, stdout, stderr := e.run(t, e.dir, env)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	return stdout + stderr
}

// file writes content with perm to rel in the sandbox's folder, making the folders on the way, and returns
// its path.
func (e *deployEnv) file(t *testing.T, rel, content string, perm os.FileMode) string {
	t.Helper()
	path := filepath.Join(e.dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// planHas checks that the output of deploy holds each of wants.
func planHas(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("the plan lacks %q", want)
		}
	}
}

// nothingDone checks that the runs so far (what names them) created no file in the sandbox's state, cache
// and home folders and ran none of the stubbed programs.
func (e *deployEnv) nothingDone(t *testing.T, what string) {
	t.Helper()
	if files := e.created(t); len(files) != 0 {
		t.Errorf("%s created %v", what, files)
	}
	e.noCalls(t)
}

// created lists every file under the sandbox's state, cache and home folders (the stub log aside).
func (e *deployEnv) created(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, root := range []string{e.state, e.cache, e.home} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

func (e *deployEnv) noCalls(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(e.calls); err == nil {
		t.Errorf("the dry run ran programs that build, make keys or reach a cluster:\n%s", b)
	}
}

// TestDeployNonLocalTrustsOnlyTheGivenKeys: on a cluster other than the local one (the variables of
// docs/install.md), the plan creates no approver key and no passphrase, trusts exactly the JWK set given
// in APPROVERS_JWKS (given relative to where deploy was started), and nothing is built, written or asked
// of a cluster, Vault or the network before the dry run stops.
func TestDeployNonLocalTrustsOnlyTheGivenKeys(t *testing.T) {
	e := newDeployEnv(t)
	jwks := e.file(t, "approvers.jwks.json", approversJWKS, 0o644)
	out := e.plan(t, append(e.nonLocal(t), "APPROVERS_JWKS=approvers.jwks.json", "VAULT_NAMESPACE=admin/team-a"))
	planHas(t, out,
		"  cluster:            "+filepath.Join(e.dir, "gke.kubeconfig")+" (not the local cluster)\n",
		"  approver key:       none created\n",
		"  trusted approvers:  "+jwks+" (keys: alice, bob); nothing else can approve\n",
		"  vault:              configure https://vault.example.com:8200 (namespace admin/team-a) from policy/policy.yaml\n",
		"  MCP kubeconfig:     "+filepath.Join(e.home, ".config", "agent-sandbox", "mcp.kubeconfig")+"\n",
		" --set-file approvers.jwks="+jwks+" ",
		" --set vault.namespace=admin/team-a",
		" --set image.repository=registry.example.com/agent-sandbox --set image.tag=v1.2.3 ",
	)
	// The only JWK set named anywhere is the given one; no key or passphrase of the local cluster appears.
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "jwks") && strings.Count(line, ".jwks.json") != strings.Count(line, jwks) {
			t.Errorf("a JWK set other than APPROVERS_JWKS is named: %s", line)
		}
	}
	for _, never := range []string{"create ", ".key", "passphrase", "trusted.jwks.json", "verify", e.state} {
		if strings.Contains(out, never) {
			t.Errorf("the plan mentions %q", never)
		}
	}
	e.nothingDone(t, "the dry run")
}

// TestDeployNonLocalWithoutApprovers: without APPROVERS_JWKS deploy stops with one paragraph that says
// how approvers make their keys and how to combine them; a file holding a private key is refused too.
func TestDeployNonLocalWithoutApprovers(t *testing.T) {
	e := newDeployEnv(t)
	code, stdout, stderr := e.run(t, e.dir, e.nonLocal(t))
	if code == 0 || stdout != "" || stderr != noApproversMessage {
		t.Errorf("exit %d, stdout %q\nstderr %q\nwant   %q", code, stdout, stderr, noApproversMessage)
	}

	private := e.file(t, "private.jwks.json", `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"}]}`, 0o600)
	code, _, stderr = e.run(t, e.dir, append(e.nonLocal(t), "APPROVERS_JWKS="+private))
	if code == 0 || !strings.Contains(stderr, `holds a PRIVATE key (JWK set key 0: JWK "k1" carries private key material ("d")`) {
		t.Errorf("a private key: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = e.run(t, e.dir, append(e.nonLocal(t), "APPROVERS_JWKS="+filepath.Join(e.dir, "missing.json")))
	if code == 0 || !strings.Contains(stderr, "missing.json: no such file. On a cluster other than the local one") {
		t.Errorf("a missing file: exit %d, stderr %q", code, stderr)
	}
	e.nothingDone(t, "a refused run")
}

// TestDeployLocalPlan: on the local cluster (no KUBECONFIG) the plan makes the demo approver and the
// verify key in the state folder and trusts both, and, run through sudo, writes a second MCP kubeconfig
// for the sudo user; the dry run itself still creates nothing.
func TestDeployLocalPlan(t *testing.T) {
	e := newDeployEnv(t)
	env := e.env
	if os.Geteuid() == 0 {
		env = append(env, "SUDO_USER=nobody")
	}
	out := e.plan(t, env)
	keys := filepath.Join(e.state, "approver")
	planHas(t, out,
		"  cluster:            the local cluster ("+filepath.Join(e.state, "admin.kubeconfig")+")\n",
		"  approver key:       create "+filepath.Join(keys, "approver.key")+" (local cluster only)\n",
		"  approver key:       create "+filepath.Join(keys, "verify.key")+" (local cluster only)\n",
		"  approver key:       create "+filepath.Join(keys, "verify2.key")+" (local cluster only)\n",
		" --set-file approvers.jwks="+filepath.Join(keys, "trusted.jwks.json")+" ",
		"  MCP kubeconfig:     "+filepath.Join(e.state, "mcp.kubeconfig")+" (owner root)\n",
		" --set sandbox.createNamespace=false",
	)
	if os.Geteuid() == 0 && !strings.Contains(out, "/.config/agent-sandbox/mcp.kubeconfig (owner nobody)\n") {
		t.Error("run through sudo, the plan writes no MCP kubeconfig for the sudo user")
	}
	e.nothingDone(t, "the dry run")
}

// TestDeployEKSShapedPlan: an API server URL without a port (EKS) means 443, several comma-separated
// endpoint CIDRs become several NetworkPolicy endpoints, and VAULT_CIDR=none leaves the egress to Vault to
// the values files of HELM_VALUES (an in-cluster Vault), which are passed to helm; without one it is refused.
func TestDeployEKSShapedPlan(t *testing.T) {
	e := newDeployEnv(t)
	jwks := e.file(t, "approvers.jwks.json", approversJWKS, 0o644)
	values := e.file(t, "eks-values.yaml", "networkPolicy:\n  extraEgress: []\n", 0o644)
	env := []string{"APPROVERS_JWKS=" + jwks, "VAULT_CIDR=none"}
	for _, v := range e.nonLocal(t) {
		if !strings.HasPrefix(v, "API_SERVER_URL=") && !strings.HasPrefix(v, "API_CIDR=") && !strings.HasPrefix(v, "VAULT_CIDR=") {
			env = append(env, v)
		}
	}
	env = append(env, "API_SERVER_URL=https://0123ABCD.gr7.eu-west-1.eks.amazonaws.com", "API_CIDR=10.0.1.0/24,10.0.2.0/24",
		"VAULT_CONFIGURE_FLAGS=--oidc-discovery-url https://oidc.eks.eu-west-1.amazonaws.com/id/0123ABCD")
	code, _, stderr := e.run(t, e.dir, env)
	if code == 0 || !strings.Contains(stderr, "VAULT_CIDR=none leaves the egress to Vault to a values file, but HELM_VALUES names none") {
		t.Errorf("VAULT_CIDR=none without HELM_VALUES: exit %d, %q", code, stderr)
	}
	code, _, stderr = e.run(t, e.dir, append(env, "HELM_VALUES=eks-values.yaml"))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	planHas(t, stderr,
		" -f "+values+" ",
		" --set apiServer.url=https://0123ABCD.gr7.eu-west-1.eks.amazonaws.com ",
		` --set apiServer.endpoints\[0\].cidr=10.0.1.0/24 --set apiServer.endpoints\[0\].port=443 `,
		` --set apiServer.endpoints\[1\].cidr=10.0.2.0/24 --set apiServer.endpoints\[1\].port=443 `,
		` --set-json vault.egress=\[\] `,
		"from policy/policy.yaml --oidc-discovery-url https://oidc.eks.eu-west-1.amazonaws.com/id/0123ABCD\n",
	)
	e.nothingDone(t, "the dry run")
}

// TestDeployPackagedChart: CHART= a packaged release (given relative to where deploy was started) is what
// helm installs, with the images its values name: no image.repository or image.tag from IMAGE.
func TestDeployPackagedChart(t *testing.T) {
	e := newDeployEnv(t)
	jwks := e.file(t, "approvers.jwks.json", approversJWKS, 0o644)
	pkg := e.file(t, filepath.Join("dist", "charts", "agent-sandbox-0.2.0.tgz"), "a chart", 0o644)
	out := e.plan(t, append(e.nonLocal(t), "APPROVERS_JWKS="+jwks, "CHART=dist/charts/agent-sandbox-0.2.0.tgz"))
	if !strings.Contains(out, "  helm:               upgrade --install agent-sandbox "+pkg+" -n agent-sandbox-system ") {
		t.Errorf("the plan does not install %s", pkg)
	}
	if strings.Contains(out, "image.repository") || strings.Contains(out, "image.tag") {
		t.Error("the plan overrides the packaged chart's images with IMAGE")
	}
	e.noCalls(t)

	code, _, stderr := e.run(t, e.dir, append(e.nonLocal(t), "APPROVERS_JWKS="+jwks, "CHART=dist/charts/no-such.tgz"))
	if code == 0 || !strings.Contains(stderr, "CHART="+filepath.Join(e.dir, "dist/charts/no-such.tgz")+" does not exist") {
		t.Errorf("a missing CHART: exit %d, %q", code, stderr)
	}
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// agentSandboxBin builds cmd/agent-sandbox once for all the tests (with the real go, before any stub is on
// PATH) and returns its path.
func agentSandboxBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deploy-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "agent-sandbox")
		cmd := exec.Command("go", "build", "-o", builtBin, "../../cmd/agent-sandbox")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{err: err, out: out}
		}
	})
	if buildErr != nil {
		t.Fatalf("build agent-sandbox: %v", buildErr)
	}
	return builtBin
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + string(e.out) }

// TestMain removes the binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// TestDeployRefusesWhatTheWebhookWouldRefuse: APPROVERS_JWKS is checked as the webhook loads it, so a set
// the old Python check let through (one key ID twice, a key of another type, a key ID the token format
// cannot carry) stops deploy before anything happens, with the reason and the how-to paragraph.
func TestDeployRefusesWhatTheWebhookWouldRefuse(t *testing.T) {
	e := newDeployEnv(t)
	const x = `"x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"`
	for name, c := range map[string]struct{ jwks, want string }{
		"dupkid":  {`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a",` + x + `},{"kty":"OKP","crv":"Ed25519","kid":"a",` + x + `}]}`, `duplicate kid "a"`},
		"rsa":     {`{"keys":[{"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"}]}`, `kty "RSA"`},
		"badkid":  {`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a b",` + x + `}]}`, "JWK kid"},
		"notjson": {`keys: [alice]`, "parse JWK set"},
	} {
		path := e.file(t, name+".jwks.json", c.jwks, 0o644)
		code, stdout, stderr := e.run(t, e.dir, append(e.nonLocal(t), "APPROVERS_JWKS="+path))
		if code == 0 || stdout != "" || !strings.Contains(stderr, c.want) ||
			!strings.Contains(stderr, "error: APPROVERS_JWKS="+path+" is not a JWK set of approver public keys. On a cluster other than the local one") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", name, code, stdout, stderr)
		}
	}
	e.nothingDone(t, "a refused run")
}

// TestDeployReadsThePolicyWithTheCommand: the sandbox namespace in the plan is the policy's, read by
// agent-sandbox policy get (no awk over YAML); without AGENT_SANDBOX_BIN deploy builds the command from this
// checkout (here the go stub, which fails) and stops with a clear error.
func TestDeployReadsThePolicyWithTheCommand(t *testing.T) {
	e := newDeployEnv(t)
	code, _, stderr := e.run(t, e.dir, e.env)
	if code != 0 || !strings.Contains(stderr, "  sandbox namespace:  agent-sandbox (spec.sandbox.namespace of policy/policy.yaml)\n") {
		t.Errorf("exit %d, the plan does not name the policy's sandbox namespace", code)
	}
	var env []string
	for _, v := range e.env {
		if !strings.HasPrefix(v, "AGENT_SANDBOX_BIN=") {
			env = append(env, v)
		}
	}
	code, _, stderr = e.run(t, e.dir, env)
	calls, _ := os.ReadFile(e.calls)
	if code == 0 || !strings.Contains(stderr, "error: cannot build the agent-sandbox command") ||
		!strings.Contains(string(calls), "go build -trimpath -o "+filepath.Join(e.cache, "agent-sandbox-bin")+" ./cmd/agent-sandbox") {
		t.Errorf("without AGENT_SANDBOX_BIN: exit %d, stderr %q, calls %q", code, stderr, calls)
	}
}

// TestDeployHelmChoice: HELM picks the helm deploy installs with and the plan names it: the pinned Helm 3 by
// default, the pinned Helm 4 with HELM=4, or a binary by path (relative to where deploy was started) that
// reports Helm 3 or 4. Anything else stops deploy before it does anything, saying what HELM takes.
func TestDeployHelmChoice(t *testing.T) {
	e := newDeployEnv(t)
	jwks := e.file(t, "approvers.jwks.json", approversJWKS, 0o644)
	fakes := filepath.Join(e.dir, "fakes")
	for name, version := range map[string]string{"helm4": "v4.9.0", "helm2": "v2.17.0"} {
		e.file(t, filepath.Join("fakes", name), "#!/bin/sh\necho "+version+"\n", 0o755)
	}
	env := append(e.nonLocal(t), "APPROVERS_JWKS="+jwks)
	for _, tc := range []struct {
		helm, want string
		ok         bool
	}{
		{"", "  helm:               the pinned Helm 3 (v3.", true},
		{"3", "  helm:               the pinned Helm 3 (v3.", true},
		{"4", "  helm:               the pinned Helm 4 (v4.", true},
		{"fakes/helm4", "  helm:               " + filepath.Join(fakes, "helm4") + " (v4.9.0)\n", true},
		{"fakes/helm2", "error: HELM=" + filepath.Join(fakes, "helm2") + ": " + filepath.Join(fakes, "helm2") + " is Helm 2; agent-sandbox supports Helm 3 and Helm 4\n", false},
		{"fakes/none", "is not an executable file (HELM takes 3, 4, or the path of a helm binary)\n", false},
		{"no-such-helm", "error: HELM=no-such-helm: no such command on PATH", false},
		{"5", "error: HELM=5: the pinned helms are 3 (v3.", false},
	} {
		t.Run("HELM="+tc.helm, func(t *testing.T) {
			code, stdout, stderr := e.run(t, e.dir, append(env, "HELM="+tc.helm))
			if (code == 0) != tc.ok || !strings.Contains(stdout+stderr, tc.want) {
				t.Errorf("HELM=%q: exit %d, want success %v and output with %q", tc.helm, code, tc.ok, tc.want)
			}
			if !tc.ok && strings.Contains(stdout+stderr, "deploy plan") {
				t.Errorf("HELM=%q: the plan was printed before the refusal", tc.helm)
			}
		})
	}
	e.nothingDone(t, "the dry run")
}

// TestDeployGKEProfile: on a local cluster brought up with PROFILE=gke (make up records it), deploy derives the
// policy placed on the GKE-shaped node from policy/policy.yaml, names it in the plan, hands its node selector
// and toleration to the chart (the webhook's policy) and the toleration to the webhook Pods; the default
// profile passes neither; a PROFILE that is not the running cluster's is refused before anything is done.
func TestDeployGKEProfile(t *testing.T) {
	e := newDeployEnv(t)
	code, _, stderr := e.run(t, e.dir, e.env)
	if code != 0 || strings.Contains(stderr, "sandbox.nodeSelector") || strings.Contains(stderr, "webhook.tolerations") {
		t.Fatalf("default profile: exit %d, or a placement was passed to the chart", code)
	}
	if err := os.WriteFile(filepath.Join(e.state, "profile"), []byte("gke\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = e.run(t, e.dir, e.env)
	placed := filepath.Join(e.state, "policy-gke.yaml")
	if code != 0 || !strings.Contains(stderr, "  policy:             "+placed+" (profile gke)\n") {
		t.Fatalf("gke profile: exit %d, the plan does not name the placed policy", code)
	}
	// The helm arguments.
	planHas(t, stderr, "sandbox.nodeSelector=", "sandbox.tolerations=", "webhook.tolerations=", `"sandbox.gke.io/runtime": "gvisor"`, `"effect": "NoSchedule"`)
	data, err := os.ReadFile(placed)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "nodeSelector: {sandbox.gke.io/runtime: gvisor}") ||
		!strings.Contains(string(data), "{effect: NoSchedule, key: sandbox.gke.io/runtime, operator: Equal, value: gvisor}") {
		t.Errorf("the placed policy lacks GKE's placement:\n%s", data)
	}
	code, _, stderr = e.run(t, e.dir, append(e.env, "AGENT_SANDBOX_PROFILE=default"))
	if code == 0 || !strings.Contains(stderr, "PROFILE=default, but the local cluster was brought up with PROFILE=gke") {
		t.Errorf("a profile other than the cluster's: exit %d", code)
	}
	code, _, stderr = e.run(t, e.dir, append(e.env, "AGENT_SANDBOX_PROFILE=eks"))
	if code == 0 || !strings.Contains(stderr, "PROFILE=eks is not a profile of the local cluster; profiles: default gke") {
		t.Errorf("an unknown profile: exit %d", code)
	}
	e.noCalls(t)
}
