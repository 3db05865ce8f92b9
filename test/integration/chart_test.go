//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/installcheck"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/servingcert"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// The chart tests render charts/agent-sandbox with the pinned helm (scripts/lib.sh bin_helm) and hold the
// result against the code it must agree with: the webhook registrations of webhook.Configurations, the
// policy loader, the webhook's flags. Every rendered object of a built-in kind is decoded strictly into its
// Go type, so a misspelt or misplaced field fails here rather than at install time.

const (
	// chartHelmEnv names the helm binary under test (Helm 3 or 4); scripts/test-integration.sh exports it.
	chartHelmEnv = "AGENT_SANDBOX_HELM_BIN"
	// chartHelm4Env names a Helm 4 binary beside a Helm 3 one in chartHelmEnv, for the hand-over between them.
	chartHelm4Env = "AGENT_SANDBOX_HELM4_BIN"
	// chartGoldenEnv=1 rewrites the golden render instead of comparing with it.
	chartGoldenEnv = "UPDATE_GOLDEN"

	chartRelease   = "agent-sandbox"
	chartNamespace = "agent-sandbox-system"
	chartSandboxNS = "agent-sandbox"
	chartService   = "agent-sandbox-webhook"
	chartConfig    = "agent-sandbox"
	// chartGuard is the admission policy (and binding) that keeps the webhook's ServiceAccount to caBundle.
	chartGuard = chartService + "." + chartNamespace + ".webhook-configurations"
)

// chartPaths are the repository root, the chart and the shipped policy.
func chartPaths(t *testing.T) (root, chart, policyFile string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found from the test's folder: %v", err)
	}
	return root, filepath.Join(root, "charts", "agent-sandbox"), filepath.Join(root, "policy", "policy.yaml")
}

// chartHelm runs helm with its config, cache and data folders in a temporary folder, so the tests neither
// read nor change the user's helm setup. It returns stdout; stderr is part of the error.
func chartHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv(chartHelmEnv)
	if bin == "" {
		t.Fatalf("$%s is not set: it must name the helm binary (scripts/test-integration.sh sets it; by hand: "+
			"%s=$(bash -c '. scripts/lib.sh; bin_helm'), after scripts/build-tools.sh helm; bin_helm4 for Helm 4)", chartHelmEnv, chartHelmEnv)
	}
	return chartHelmWith(t, chartHelmEnv, bin, args...)
}

// chartHelmWith runs the helm binary bin, named by the environment variable env, as chartHelm does.
func chartHelmWith(t *testing.T, env, bin string, args ...string) (string, error) {
	t.Helper()
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("$%s=%s is not an executable helm binary (build it with scripts/build-tools.sh helm or helm4): %v", env, bin, err)
	}
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// chartHelmMajor is the major version of the helm under test (3 or 4): Helm 4 applies server-side on a new
// install, and the tests check what that changes.
func chartHelmMajor(t *testing.T) int {
	t.Helper()
	return chartHelmMajorOf(t, chartHelmEnv, os.Getenv(chartHelmEnv))
}

func chartHelmMajorOf(t *testing.T, env, bin string) int {
	t.Helper()
	out, err := chartHelmWith(t, env, bin, "version", "--template", "{{.Version}}")
	if err != nil {
		t.Fatal(err)
	}
	var major int
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "v%d.", &major); err != nil || (major != 3 && major != 4) {
		t.Fatalf("$%s reports version %q; the chart is tested with Helm 3 and Helm 4", env, out)
	}
	return major
}

// chartTemplate renders the chart (or a packaged chart) as release agent-sandbox in agent-sandbox-system.
func chartTemplate(t *testing.T, chart string, args ...string) (string, error) {
	t.Helper()
	return chartHelm(t, append([]string{"template", chartRelease, chart, "--namespace", chartNamespace}, args...)...)
}

// chartObject is one document of a render.
type chartObject struct {
	gvk       schema.GroupVersionKind
	name      string
	namespace string
	json      []byte
}

// chartRender is a decoded render.
type chartRender struct {
	objects []chartObject
}

// chartRenderArgs renders the chart with args and decodes every document. Objects of kinds the client-go
// scheme knows are decoded strictly (unknown or duplicate fields fail the test).
func chartRenderArgs(t *testing.T, args ...string) *chartRender {
	t.Helper()
	_, chart, _ := chartPaths(t)
	out, err := chartTemplate(t, chart, args...)
	if err != nil {
		t.Fatal(err)
	}
	return chartDecode(t, out)
}

func chartDecode(t *testing.T, out string) *chartRender {
	t.Helper()
	r := &chartRender{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("split the render: %v", err)
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			t.Fatalf("rendered document is not valid YAML: %v\n%s", err, doc)
		}
		if string(bytes.TrimSpace(js)) == "null" {
			continue // a document of comments only
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(js, &meta); err != nil {
			t.Fatalf("rendered document: %v\n%s", err, doc)
		}
		gv, err := schema.ParseGroupVersion(meta.APIVersion)
		if err != nil || meta.Kind == "" || meta.Metadata.Name == "" {
			t.Fatalf("rendered document without apiVersion, kind or name:\n%s", doc)
		}
		o := chartObject{gvk: gv.WithKind(meta.Kind), name: meta.Metadata.Name, namespace: meta.Metadata.Namespace, json: js}
		if clientgoscheme.Scheme.Recognizes(o.gvk) {
			obj, err := clientgoscheme.Scheme.New(o.gvk)
			if err != nil {
				t.Fatal(err)
			}
			if err := chartStrictUnmarshal(js, obj); err != nil {
				t.Errorf("%s %s: %v", meta.Kind, meta.Metadata.Name, err)
			}
		}
		for _, prev := range r.objects {
			if prev.gvk == o.gvk && prev.name == o.name && prev.namespace == o.namespace {
				t.Errorf("%s %s/%s is rendered twice", o.gvk.Kind, o.namespace, o.name)
			}
		}
		r.objects = append(r.objects, o)
	}
	if len(r.objects) == 0 {
		t.Fatal("the render is empty")
	}
	return r
}

func chartStrictUnmarshal(js []byte, into any) error {
	strict, err := sigsjson.UnmarshalStrict(js, into, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// find returns the objects of a kind, optionally only in one namespace ("" for any).
func (r *chartRender) find(kind, namespace string) []chartObject {
	var out []chartObject
	for _, o := range r.objects {
		if o.gvk.Kind == kind && (namespace == "" || o.namespace == namespace) {
			out = append(out, o)
		}
	}
	return out
}

func (r *chartRender) lookup(kind, namespace, name string) (chartObject, bool) {
	for _, o := range r.objects {
		if o.gvk.Kind == kind && o.namespace == namespace && o.name == name {
			return o, true
		}
	}
	return chartObject{}, false
}

// get decodes the named object into into, or fails the test if it is not rendered.
func (r *chartRender) get(t *testing.T, kind, namespace, name string, into any) {
	t.Helper()
	o, ok := r.lookup(kind, namespace, name)
	if !ok {
		t.Fatalf("%s %s/%s is not rendered; rendered: %s", kind, namespace, name, r.summary())
	}
	if err := chartStrictUnmarshal(o.json, into); err != nil {
		t.Fatalf("%s %s/%s: %v", kind, namespace, name, err)
	}
}

// install creates with c the rendered objects of the kinds named name in namespace, as helm installs them.
func (r *chartRender) install(t *testing.T, ctx context.Context, c client.Client, namespace, name string, kinds ...string) {
	t.Helper()
	for _, kind := range kinds {
		o, ok := r.lookup(kind, namespace, name)
		if !ok {
			t.Fatalf("%s %s/%s is not rendered; rendered: %s", kind, namespace, name, r.summary())
		}
		o.create(t, ctx, c)
	}
}

// create creates the rendered object with c, as helm installs it.
func (o chartObject) create(t *testing.T, ctx context.Context, c client.Client) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(o.json); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, u); err != nil {
		t.Fatalf("create the chart's %s %s/%s: %v", o.gvk.Kind, o.namespace, o.name, err)
	}
}

func (r *chartRender) has(kind, namespace, name string) bool {
	_, ok := r.lookup(kind, namespace, name)
	return ok
}

func (r *chartRender) summary() string {
	var s []string
	for _, o := range r.objects {
		s = append(s, o.gvk.Kind+" "+o.namespace+"/"+o.name)
	}
	return strings.Join(s, ", ")
}

func (r *chartRender) webhookConfigurations(t *testing.T, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	t.Helper()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	r.get(t, "MutatingWebhookConfiguration", "", name, &m)
	r.get(t, "ValidatingWebhookConfiguration", "", name, &v)
	return &m, &v
}

func (r *chartRender) policyDocument(t *testing.T) []byte {
	t.Helper()
	var cm corev1.ConfigMap
	r.get(t, "ConfigMap", chartNamespace, "agent-sandbox-policy", &cm)
	doc, ok := cm.Data["policy.yaml"]
	if !ok {
		t.Fatalf("the policy ConfigMap has no key policy.yaml (the webhook's --policy file): %v", cm.Data)
	}
	return []byte(doc)
}

func (r *chartRender) deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	r.get(t, "Deployment", chartNamespace, chartService, &d)
	return &d
}

// chartCommandAccepts checks that the args the chart gives a container (what names it) run the subcommand sub
// and that the real agent-sandbox command accepts every flag among them: --help stops it before it runs.
func chartCommandAccepts(t *testing.T, what string, args []string, sub string) {
	t.Helper()
	if len(args) == 0 || args[0] != sub {
		t.Fatalf("%s's args %q must start with the %s subcommand", what, args, sub)
	}
	var stdout, stderr bytes.Buffer
	if code := app.Main(context.Background(), append(slices.Clone(args), "--help"), strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Errorf("agent-sandbox %s refuses the chart's flags: %s", strings.Join(args, " "), stderr.String())
	}
}

func chartYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestChartWebhookConfigurations: the chart registers exactly the webhooks of webhook.Configurations, in
// every TLS mode and with a non-default timeout; only caBundle (injected at runtime) is left out.
func TestChartWebhookConfigurations(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		config  string
		timeout int32
		certMgr bool
	}{
		{name: "defaults", config: chartConfig},
		{name: "cert-manager", args: []string{"--set", "tls.mode=certManager"}, config: chartConfig, certMgr: true},
		{name: "timeout and name", args: []string{"--set", "webhook.timeoutSeconds=25", "--set", "webhook.configurationName=guard"}, config: "guard", timeout: 25},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := chartRenderArgs(t, tc.args...)
			gotM, gotV := r.webhookConfigurations(t, tc.config)
			wantM, wantV := webhook.Configurations(webhook.ConfigurationsFor{
				Name: tc.config, ServiceNamespace: chartNamespace, ServiceName: chartService, Port: 443, TimeoutSeconds: tc.timeout,
				SandboxNamespace: "agent-sandbox"})
			for i := range gotM.Webhooks {
				if len(gotM.Webhooks[i].ClientConfig.CABundle) != 0 {
					t.Errorf("mutating webhook %s: the chart sets caBundle; it must be injected at runtime", gotM.Webhooks[i].Name)
				}
				gotM.Webhooks[i].ClientConfig.CABundle = nil
			}
			for i := range gotV.Webhooks {
				if len(gotV.Webhooks[i].ClientConfig.CABundle) != 0 {
					t.Errorf("validating webhook %s: the chart sets caBundle; it must be injected at runtime", gotV.Webhooks[i].Name)
				}
				gotV.Webhooks[i].ClientConfig.CABundle = nil
			}
			if gotM.Name != wantM.Name || !apiequality.Semantic.DeepEqual(gotM.Webhooks, wantM.Webhooks) {
				t.Errorf("the chart's MutatingWebhookConfiguration differs from webhook.Configurations\nchart:\n%s\ncode:\n%s",
					chartYAML(t, gotM.Webhooks), chartYAML(t, wantM.Webhooks))
			}
			if gotV.Name != wantV.Name || !apiequality.Semantic.DeepEqual(gotV.Webhooks, wantV.Webhooks) {
				t.Errorf("the chart's ValidatingWebhookConfiguration differs from webhook.Configurations\nchart:\n%s\ncode:\n%s",
					chartYAML(t, gotV.Webhooks), chartYAML(t, wantV.Webhooks))
			}
			want := ""
			if tc.certMgr {
				want = chartNamespace + "/" + chartService
			}
			for kind, ann := range map[string]map[string]string{"mutating": gotM.Annotations, "validating": gotV.Annotations} {
				if got := ann["cert-manager.io/inject-ca-from"]; got != want {
					t.Errorf("%s configuration: cert-manager.io/inject-ca-from = %q, want %q", kind, got, want)
				}
			}
			// The webhook injects its CA into the configurations named by --webhook-config, and serves the
			// Service named by --service-name: both must name what the chart rendered.
			args := r.deployment(t).Spec.Template.Spec.Containers[0].Args
			for _, want := range []string{"--webhook-config=" + tc.config, "--service-name=" + chartService} {
				if !slices.Contains(args, want) {
					t.Errorf("webhook args %q lack %s", args, want)
				}
			}
		})
	}
}

// TestChartPolicy: the rendered policy loads with the webhook's own loader; with default values it is the
// shipped policy unchanged, and each override lands where the webhook reads it.
func TestChartPolicy(t *testing.T) {
	_, _, policyFile := chartPaths(t)
	shipped, err := os.ReadFile(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	want, err := policy.Decode(shipped)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("defaults are the shipped policy", func(t *testing.T) {
		doc := chartRenderArgs(t).policyDocument(t)
		if _, err := policy.Load(doc); err != nil {
			t.Fatalf("the rendered policy does not load: %v\n%s", err, doc)
		}
		got, err := policy.Decode(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(got, want) {
			t.Errorf("with default values the rendered policy differs from policy/policy.yaml\nrendered:\n%s\nshipped:\n%s", chartYAML(t, got), chartYAML(t, want))
		}
	})

	t.Run("overrides", func(t *testing.T) {
		const image = "registry.example/agent-sandbox:v1.2.3@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		r := chartRenderArgs(t,
			"--set", "image.repository=registry.example/agent-sandbox",
			"--set", "image.tag=v1.2.3",
			"--set", "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			"--set", "vault.address=https://vault.example:8200",
			"--set", "vault.namespace=admin/team-a",
			"--set", "apiServer.url=https://203.0.113.10:443",
			"--set", "clusterID=gke-prod-1",
			"--set-json", `sandbox.nodeSelector={"sandbox.gke.io/runtime":"gvisor"}`,
			"--set-json", `sandbox.tolerations=[{"key":"sandbox.gke.io/runtime","operator":"Equal","value":"gvisor","effect":"NoSchedule"}]`,
		)
		doc := r.policyDocument(t)
		c, err := policy.Load(doc)
		if err != nil {
			t.Fatalf("the rendered policy does not load: %v\n%s", err, doc)
		}
		sb := c.Spec.Sandbox
		ca := sb.CredentialAgent
		checks := []struct{ what, got, want string }{
			{"spec.clusterID", c.Spec.ClusterID, "gke-prod-1"},
			{"credentialAgent.image", ca.Image, image},
			{"credentialAgent.vaultAddress", ca.VaultAddress, "https://vault.example:8200"},
			{"credentialAgent.vaultNamespace", ca.VaultNamespace, "admin/team-a"},
			{"credentialAgent.apiServer", ca.APIServer, "https://203.0.113.10:443"},
			{"sandbox.nodeSelector", fmt.Sprint(sb.NodeSelector), "map[sandbox.gke.io/runtime:gvisor]"},
		}
		for _, tool := range c.Spec.Tools {
			checks = append(checks, struct{ what, got, want string }{"tool " + tool.Name + " image", tool.Image, image})
		}
		for _, ck := range checks {
			if ck.got != ck.want {
				t.Errorf("%s = %q, want %q", ck.what, ck.got, ck.want)
			}
		}
		wantTol := []corev1.Toleration{{Key: "sandbox.gke.io/runtime", Operator: corev1.TolerationOpEqual, Value: "gvisor", Effect: corev1.TaintEffectNoSchedule}}
		if !apiequality.Semantic.DeepEqual(sb.Tolerations, wantTol) {
			t.Errorf("sandbox.tolerations = %+v, want %+v", sb.Tolerations, wantTol)
		}
		// Everything else is the shipped policy's.
		if !apiequality.Semantic.DeepEqual(c.Spec.AdmissionRules, want.Spec.AdmissionRules) || !apiequality.Semantic.DeepEqual(c.Spec.Scopes, want.Spec.Scopes) {
			t.Error("overriding values changed the policy's admission rules or scopes")
		}
		if got := r.deployment(t).Spec.Template.Spec.Containers[0].Image; got != image {
			t.Errorf("webhook image = %q, want %q", got, image)
		}
	})

	t.Run("a release's three images", func(t *testing.T) {
		// What make release writes into the packaged chart: one image per role, pinned by digest.
		ref := func(name, hex string) string {
			return "ghcr.io/acme/agent-sandbox-" + name + ":v0.2.0@sha256:" + strings.Repeat(hex, 64)
		}
		args := []string{"--set", "image.tag=v0.2.0", "--set", "credentialAgent.image.tag=v0.2.0", "--set", "runner.image.tag=v0.2.0"}
		for value, name := range map[string]string{"image": "webhook", "credentialAgent.image": "credential-agent", "runner.image": "runner"} {
			hex := map[string]string{"webhook": "a", "credential-agent": "b", "runner": "c"}[name]
			args = append(args, "--set", value+".repository=ghcr.io/acme/agent-sandbox-"+name, "--set", value+".digest=sha256:"+strings.Repeat(hex, 64))
		}
		r := chartRenderArgs(t, args...)
		c, err := policy.Load(r.policyDocument(t))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := c.Spec.Sandbox.CredentialAgent.Image, ref("credential-agent", "b"); got != want {
			t.Errorf("credentialAgent.image = %q, want %q", got, want)
		}
		// Terraform tools (a workspace, a saved plan or a check) in the runner; the rest, warm tools among
		// them, in the credential agent's image, as the policy requires of warm tools.
		runners := 0
		for _, tool := range c.Spec.Tools {
			want := ref("credential-agent", "b")
			if tool.Workspace != nil || tool.Plan != nil || len(tool.Check) > 0 {
				want = ref("runner", "c")
				runners++
			}
			if tool.Image != want {
				t.Errorf("tool %s image = %q, want %q", tool.Name, tool.Image, want)
			}
		}
		if runners == 0 || runners == len(c.Spec.Tools) {
			t.Errorf("%d of %d tools run in the runner image; the shipped policy has Terraform tools and others", runners, len(c.Spec.Tools))
		}
		if got, want := r.deployment(t).Spec.Template.Spec.Containers[0].Image, ref("webhook", "a"); got != want {
			t.Errorf("webhook image = %q, want %q", got, want)
		}
	})

	t.Run("values.policy replaces the file", func(t *testing.T) {
		custom, err := policy.Decode(shipped)
		if err != nil {
			t.Fatal(err)
		}
		custom.Spec.Sandbox.Namespace = "other-sandbox"
		custom.Spec.ClusterID = "custom"
		values, err := yaml.Marshal(map[string]any{"policy": custom})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(file, values, 0o600); err != nil {
			t.Fatal(err)
		}
		// image.tag is set too, to show that values.policy is used as given, without overrides.
		r := chartRenderArgs(t, "-f", file, "--set", "image.tag=ignored-by-policy")
		c, err := policy.Load(r.policyDocument(t))
		if err != nil {
			t.Fatalf("the rendered policy does not load: %v", err)
		}
		if c.Spec.ClusterID != "custom" || c.Spec.Sandbox.Namespace != "other-sandbox" {
			t.Errorf("values.policy was not used: clusterID %q, namespace %q", c.Spec.ClusterID, c.Spec.Sandbox.Namespace)
		}
		if got := c.Spec.Tools[0].Image; got != want.Spec.Tools[0].Image {
			t.Errorf("values.policy was overridden: tool image %q, want %q", got, want.Spec.Tools[0].Image)
		}
		if !r.has("NetworkPolicy", "other-sandbox", "agent-sandbox-default-deny") || !r.has("Role", "other-sandbox", "agent-sandbox-webhook") {
			t.Errorf("the sandbox namespace's objects do not follow the policy's namespace: %s", r.summary())
		}
	})
}

// TestChartWebhookDeployment: the webhook runs hardened, highly available, and with flags that the
// webhook command accepts and that point at what the chart mounts.
func TestChartWebhookDeployment(t *testing.T) {
	r := chartRenderArgs(t)
	d := r.deployment(t)
	ps := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	if len(ps.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(ps.Containers))
	}
	c := ps.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("the webhook container has no securityContext")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("runAsNonRoot is not true")
	case sc.RunAsUser == nil || *sc.RunAsUser != 65532:
		t.Errorf("runAsUser = %v, want 65532", sc.RunAsUser)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem is not true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0:
		t.Errorf("capabilities = %+v, want drop [ALL]", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccompProfile = %+v, want RuntimeDefault", sc.SeccompProfile)
	}
	if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot {
		t.Error("the pod's runAsNonRoot is not true")
	}
	if ps.AutomountServiceAccountToken == nil || !*ps.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken must be true: the webhook calls the API server")
	}
	if ps.ServiceAccountName != chartService {
		t.Errorf("serviceAccountName = %q", ps.ServiceAccountName)
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if c.Resources.Requests.Name(res, "").IsZero() || c.Resources.Limits.Name(res, "").IsZero() {
			t.Errorf("resources: %s needs both a request and a limit: %+v", res, c.Resources)
		}
	}
	if c.Image != "localhost/agent-sandbox:dev" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %q pull %q, want localhost/agent-sandbox:dev IfNotPresent", c.Image, c.ImagePullPolicy)
	}
	if a := ps.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 ||
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != corev1.LabelHostname {
		t.Errorf("want a preferred pod anti-affinity by hostname, got %+v", ps.Affinity)
	}
	var env *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "POD_NAMESPACE" {
			env = &c.Env[i]
		}
	}
	if env == nil || env.ValueFrom == nil || env.ValueFrom.FieldRef == nil || env.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("POD_NAMESPACE must come from the fieldRef metadata.namespace: %+v", c.Env)
	}

	// The flags: the real webhook command must accept every one of them.
	chartCommandAccepts(t, "the webhook container", c.Args, "webhook")
	flags := map[string]string{}
	for _, a := range c.Args[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(k, "--") {
			t.Errorf("arg %q is not --flag=value", a)
			continue
		}
		if k != "--job-controller-user" {
			flags[k] = v
		}
	}
	for _, f := range []string{"--policy", "--approver-keys", "--port", "--cert-dir", "--tls-mode", "--tls-secret", "--service-name",
		"--webhook-config", "--namespace", "--metrics-bind-address", "--health-probe-bind-address", "--audit-anchor-retention"} {
		if _, ok := flags[f]; !ok {
			t.Errorf("the webhook has no %s flag; args: %q", f, c.Args)
		}
	}
	if flags["--audit-anchor-retention"] != "720h" {
		t.Errorf("--audit-anchor-retention=%s, want the default 720h", flags["--audit-anchor-retention"])
	}
	if flags["--metrics-secure"] != "true" {
		t.Errorf("--metrics-secure=%q, want true: metrics are served through controller-runtime's secure serving by default", flags["--metrics-secure"])
	}
	if flags["--tls-mode"] != "self" || flags["--namespace"] != "$(POD_NAMESPACE)" {
		t.Errorf("--tls-mode=%s --namespace=%s, want self and $(POD_NAMESPACE)", flags["--tls-mode"], flags["--namespace"])
	}
	for _, u := range webhook.DefaultJobControllerUsers {
		if !slices.Contains(c.Args, "--job-controller-user="+u) {
			t.Errorf("args lack --job-controller-user=%s", u)
		}
	}

	// The files the flags name are where the chart mounts them.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		volumes[v.Name] = v
	}
	checkFile := func(flag, volume, configMap, key string) {
		t.Helper()
		m, ok := mounts[volume]
		if !ok || filepath.Join(m.MountPath, key) != flags[flag] || !m.ReadOnly || m.SubPath != "" {
			t.Errorf("%s=%s: volume %s must be mounted read-only (no subPath, for reloads) at its folder: %+v", flag, flags[flag], volume, m)
		}
		if v := volumes[volume]; v.ConfigMap == nil || v.ConfigMap.Name != configMap {
			t.Errorf("volume %s must be ConfigMap %s: %+v", volume, configMap, v.VolumeSource)
		}
	}
	checkFile("--policy", "policy", "agent-sandbox-policy", "policy.yaml")
	checkFile("--approver-keys", "approvers", "agent-sandbox-approvers", "approvers.jwks.json")
	if m, ok := mounts["tmp"]; !ok || !strings.HasPrefix(flags["--cert-dir"], m.MountPath+"/") || volumes["tmp"].EmptyDir == nil {
		t.Errorf("--cert-dir=%s must be on the writable emptyDir: %+v", flags["--cert-dir"], m)
	}
	var approvers corev1.ConfigMap
	r.get(t, "ConfigMap", chartNamespace, "agent-sandbox-approvers", &approvers)
	if _, ok := approvers.Data["approvers.jwks.json"]; ok {
		t.Error("with no approver keys the ConfigMap must not hold approvers.jwks.json: the webhook refuses to start on an empty JWK set, and treats a missing file as no approvers")
	}

	// Probes and ports agree with the flags and the Service.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if fmt.Sprint(ports["https"]) != flags["--port"] || ":"+fmt.Sprint(ports["healthz"]) != flags["--health-probe-bind-address"] ||
		":"+fmt.Sprint(ports["metrics"]) != flags["--metrics-bind-address"] {
		t.Errorf("container ports %v disagree with the flags %v", ports, flags)
	}
	for probe, want := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.String() != "healthz" {
			t.Errorf("want an HTTP probe of %s on port healthz, got %+v", want, probe)
		}
	}
	var svc corev1.Service
	r.get(t, "Service", chartNamespace, chartService, &svc)
	svcPorts := map[string]corev1.ServicePort{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = p
	}
	if p := svcPorts["https"]; p.Port != 443 || p.TargetPort.String() != "https" {
		t.Errorf("Service port https = %+v, want 443 -> https", p)
	}
	if p := svcPorts["metrics"]; p.Port != 8080 || p.TargetPort.String() != "metrics" {
		t.Errorf("Service port metrics = %+v, want 8080 -> metrics", p)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the Service's selector %s=%s does not select the webhook Pods", k, v)
		}
	}

	var pdb policyv1.PodDisruptionBudget
	r.get(t, "PodDisruptionBudget", chartNamespace, chartService, &pdb)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget minAvailable = %v, want 1", pdb.Spec.MinAvailable)
	}
	if got := chartRenderArgs(t, "--set", "webhook.replicaCount=1"); got.has("PodDisruptionBudget", chartNamespace, chartService) {
		t.Error("with one replica a minAvailable 1 budget would block every drain; it must not be rendered")
	}
}

// TestChartRBAC: least privilege for the webhook, and an MCP identity that cannot read Secrets or exec.
func TestChartRBAC(t *testing.T) {
	type rule struct {
		groups, resources, verbs, names string
	}
	rulesOf := func(rs []rbacv1.PolicyRule) []rule {
		var out []rule
		for _, r := range rs {
			out = append(out, rule{strings.Join(r.APIGroups, ","), strings.Join(r.Resources, ","), strings.Join(r.Verbs, ","), strings.Join(r.ResourceNames, ",")})
		}
		return out
	}
	// roleGrants checks that the Role namespace/name grants exactly the rules want, in order, and returns it.
	roleGrants := func(t *testing.T, r *chartRender, namespace, name string, want ...rule) rbacv1.Role {
		t.Helper()
		var role rbacv1.Role
		r.get(t, "Role", namespace, name, &role)
		if got := rulesOf(role.Rules); !slices.Equal(got, want) {
			t.Errorf("Role %s/%s rules = %+v, want %+v", namespace, name, got, want)
		}
		return role
	}
	bound := func(t *testing.T, r *chartRender, kind, namespace, name, saNamespace, sa string) {
		t.Helper()
		var b rbacv1.RoleBinding
		r.get(t, kind+"Binding", namespace, name, &b)
		if b.RoleRef.Kind != kind || b.RoleRef.Name != name || len(b.Subjects) != 1 ||
			b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != sa || b.Subjects[0].Namespace != saNamespace {
			t.Errorf("%sBinding %s/%s must bind %s %s to ServiceAccount %s/%s only: %+v", kind, namespace, name, kind, name, saNamespace, sa, b)
		}
	}

	t.Run("self-managed TLS", func(t *testing.T) {
		r := chartRenderArgs(t)
		roleGrants(t, r, chartNamespace, chartService,
			rule{"", "configmaps", "create,list,delete", ""},
			rule{"", "secrets", "get,update", "agent-sandbox-webhook-tls"},
			rule{"", "secrets", "get", "agent-sandbox-webhook-claim-signing"},
			rule{"", "secrets", "create", ""},
			rule{"coordination.k8s.io", "leases", "create", ""},
			rule{"coordination.k8s.io", "leases", "get,update", "agent-sandbox-warm-pool"},
		)
		bound(t, r, "Role", chartNamespace, chartService, chartNamespace, chartService)

		roleGrants(t, r, chartSandboxNS, chartService,
			rule{"batch", "jobs", "get", ""}, rule{"batch", "jobs", "create,list,watch,delete", ""}, rule{"", "pods", "list,watch", ""},
			rule{"", "pods/eviction", "create", ""}, rule{"", "pods", "get", ""}, rule{"", "configmaps", "list,delete", ""})
		bound(t, r, "Role", chartSandboxNS, chartService, chartNamespace, chartService)

		crName := chartNamespace + ":" + chartService
		var cr rbacv1.ClusterRole
		r.get(t, "ClusterRole", "", crName, &cr)
		if got, want := rulesOf(cr.Rules), []rule{{"admissionregistration.k8s.io", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "get,update", chartConfig}}; !slices.Equal(got, want) {
			t.Errorf("webhook ClusterRole = %+v, want %+v", got, want)
		}
		var crb rbacv1.ClusterRoleBinding
		r.get(t, "ClusterRoleBinding", "", crName, &crb)
		if crb.RoleRef.Name != crName || len(crb.Subjects) != 1 || crb.Subjects[0].Name != chartService || crb.Subjects[0].Namespace != chartNamespace {
			t.Errorf("ClusterRoleBinding %s: %+v", crName, crb)
		}
		// Besides the CA injection, only the secure metrics' two ClusterRoles (TestChartMetrics) and helm
		// test's read of the two configurations.
		var names []string
		for _, o := range r.find("ClusterRole", "") {
			names = append(names, o.name)
		}
		slices.Sort(names)
		if want := []string{crName, crName + "-metrics-auth", crName + "-metrics-reader", crName + "-test"}; !slices.Equal(names, want) {
			t.Errorf("ClusterRoles = %v, want %v", names, want)
		}
		var test rbacv1.ClusterRole
		r.get(t, "ClusterRole", "", crName+"-test", &test)
		if got, want := rulesOf(test.Rules), []rule{{"admissionregistration.k8s.io", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "get", chartConfig},
			{"admissionregistration.k8s.io", "validatingadmissionpolicies,validatingadmissionpolicybindings", "get", chartGuard}}; !slices.Equal(got, want) {
			t.Errorf("helm test's ClusterRole = %+v, want %+v", got, want)
		}
	})

	t.Run("cert-manager TLS needs no TLS Secret or configuration access", func(t *testing.T) {
		r := chartRenderArgs(t, "--set", "tls.mode=certManager")
		// Only the claim signing key's Secret, in either mode.
		roleGrants(t, r, chartNamespace, chartService, rule{"", "configmaps", "create,list,delete", ""},
			rule{"", "secrets", "get", "agent-sandbox-webhook-claim-signing"}, rule{"", "secrets", "create", ""},
			rule{"coordination.k8s.io", "leases", "create", ""}, rule{"coordination.k8s.io", "leases", "get,update", "agent-sandbox-warm-pool"})
		// helm test's read of the two configurations is the other two.
		if n := len(r.find("ClusterRole", "")) + len(r.find("ClusterRoleBinding", "")); n != 5 {
			t.Errorf("cert-manager mode needs no cluster-wide permission but the secure metrics' reviews and helm test's read, got %d cluster roles and bindings", n)
		}
		r = chartRenderArgs(t, "--set", "tls.mode=certManager", "--set", "webhook.metrics.secure=false", "--set", "tests.enabled=false")
		if n := len(r.find("ClusterRole", "")) + len(r.find("ClusterRoleBinding", "")); n != 0 {
			t.Errorf("cert-manager mode with plain metrics and no helm test needs no cluster-wide permission, got %d cluster roles and bindings", n)
		}
	})

	t.Run("MCP server", func(t *testing.T) {
		r := chartRenderArgs(t)
		var sa corev1.ServiceAccount
		r.get(t, "ServiceAccount", chartSandboxNS, "agent-sandbox-mcp", &sa)
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Error("the MCP ServiceAccount must not automount a token")
		}
		role := roleGrants(t, r, chartSandboxNS, "agent-sandbox-mcp",
			rule{"batch", "jobs", "create,get,list,watch,delete", ""},
			rule{"", "configmaps", "create,get,delete", ""},
			rule{"", "pods", "get,list,watch", ""},
			rule{"", "pods", "patch", ""},
			rule{"", "pods/log", "get", ""},
			rule{"", "events", "get,list,watch", ""},
		)
		// Spelled out again as the properties that matter, so that a future edit of the list above cannot
		// quietly grant them.
		for _, pr := range role.Rules {
			for _, res := range pr.Resources {
				if res == "secrets" || res == "pods/exec" || res == "pods/attach" || res == "pods/portforward" || res == "pods/ephemeralcontainers" || res == "*" {
					t.Errorf("the MCP server may %v %s", pr.Verbs, res)
				}
				if res == "pods" && slices.ContainsFunc(pr.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" && v != "patch" }) {
					t.Errorf("the MCP server may %v pods; only the Job controller creates them, and the MCP server may only claim (patch) warm ones", pr.Verbs)
				}
				if res == "configmaps" && slices.ContainsFunc(pr.Verbs, func(v string) bool { return v != "create" && v != "get" && v != "delete" }) {
					t.Errorf("the MCP server may %v ConfigMaps; it may only create (content-addressed), read and delete them (the webhook admits its deletes of workspaces only)", pr.Verbs)
				}
			}
			if slices.Contains(pr.Verbs, "*") || slices.Contains(pr.APIGroups, "*") {
				t.Errorf("wildcard in MCP rule %+v", pr)
			}
		}
		bound(t, r, "Role", chartSandboxNS, "agent-sandbox-mcp", chartSandboxNS, "agent-sandbox-mcp")
	})

	t.Run("without warm pools nobody may patch Pods, create Jobs as the webhook or hold its Lease", func(t *testing.T) {
		r := chartRenderArgs(t, "--set", "webhook.warmPool.enabled=false")
		for _, ref := range [][2]string{{chartSandboxNS, "agent-sandbox-mcp"}, {chartSandboxNS, chartService}, {chartNamespace, chartService}} {
			var role rbacv1.Role
			r.get(t, "Role", ref[0], ref[1], &role)
			for _, pr := range role.Rules {
				if slices.Contains(pr.Resources, "leases") || (slices.Contains(pr.Resources, "pods") && slices.Contains(pr.Verbs, "patch")) ||
					(slices.Contains(pr.Resources, "jobs") && slices.Contains(pr.Verbs, "create") && ref[1] == chartService) {
					t.Errorf("Role %s/%s grants %+v with warm pools off", ref[0], ref[1], pr)
				}
			}
		}
		var d appsv1.Deployment
		r.get(t, "Deployment", chartNamespace, chartService, &d)
		args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
		if !strings.Contains(args, "--warm-pool=false") || strings.Contains(args, "--pool-user") {
			t.Errorf("webhook args with warm pools off: %s", args)
		}
	})

	t.Run("audit reader", func(t *testing.T) {
		const name = "agent-sandbox-audit-reader"
		r := chartRenderArgs(t)
		roleGrants(t, r, chartNamespace, name, rule{"", "configmaps", "list", ""})
		// The helm test's EndpointSlice Role and binding (TestChartHelmTest) are not counted here.
		notTest := func(objs []chartObject) (n int) {
			for _, o := range objs {
				if o.name != chartService+"-test-endpoints" {
					n++
				}
			}
			return n
		}
		if n := notTest(r.find("RoleBinding", chartNamespace)); n != 1 {
			t.Errorf("with no reader subjects the release namespace has %d RoleBindings, want only the webhook's", n)
		}
		r = chartRenderArgs(t, "--set", "auditAnchors.reader.subjects[0].kind=Group", "--set", "auditAnchors.reader.subjects[0].name=auditors",
			"--set", "auditAnchors.reader.subjects[0].apiGroup=rbac.authorization.k8s.io")
		var b rbacv1.RoleBinding
		r.get(t, "RoleBinding", chartNamespace, name, &b)
		if b.RoleRef.Kind != "Role" || b.RoleRef.Name != name || len(b.Subjects) != 1 || b.Subjects[0].Kind != "Group" || b.Subjects[0].Name != "auditors" {
			t.Errorf("audit-reader RoleBinding: %+v", b)
		}
		r = chartRenderArgs(t, "--set", "auditAnchors.reader.create=false")
		if n := notTest(r.find("Role", chartNamespace)); n != 1 {
			t.Errorf("with auditAnchors.reader.create=false the release namespace has %d Roles, want only the webhook's", n)
		}
	})

	t.Run("tool ServiceAccounts", func(t *testing.T) {
		r := chartRenderArgs(t)
		c, err := policy.Load(r.policyDocument(t))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range c.Spec.Tools {
			names = append(names, tool.ServiceAccount)
			var sa corev1.ServiceAccount
			r.get(t, "ServiceAccount", chartSandboxNS, tool.ServiceAccount, &sa)
			if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
				t.Errorf("tool ServiceAccount %s must not automount a token", sa.Name)
			}
		}
		for _, o := range r.find("ServiceAccount", chartSandboxNS) {
			if o.name != "agent-sandbox-mcp" && !slices.Contains(names, o.name) {
				t.Errorf("ServiceAccount %s in the sandbox namespace belongs to no tool", o.name)
			}
		}
	})
}

// TestChartSandboxNamespace: the namespace's labels and the default-deny egress, with and without creating
// the namespace.
func TestChartSandboxNamespace(t *testing.T) {
	t.Run("created", func(t *testing.T) {
		r := chartRenderArgs(t)
		var ns corev1.Namespace
		r.get(t, "Namespace", "", chartSandboxNS, &ns)
		for k, v := range map[string]string{
			"agent-sandbox.dev/sandbox":                  "true",
			"pod-security.kubernetes.io/enforce":         "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest",
			"pod-security.kubernetes.io/warn":            "restricted",
			"pod-security.kubernetes.io/audit":           "restricted",
		} {
			if ns.Labels[k] != v {
				t.Errorf("namespace label %s = %q, want %q", k, ns.Labels[k], v)
			}
		}
		if !chartWebhookSelects(t, ns.Labels) {
			t.Error("the webhooks' namespaceSelector does not select the sandbox namespace")
		}
		if chartWebhookSelects(t, map[string]string{"kubernetes.io/metadata.name": chartNamespace}) {
			t.Error("the webhooks' namespaceSelector selects the webhook's own namespace")
		}

		var deny networkingv1.NetworkPolicy
		r.get(t, "NetworkPolicy", chartSandboxNS, "agent-sandbox-default-deny", &deny)
		if len(deny.Spec.PodSelector.MatchLabels)+len(deny.Spec.PodSelector.MatchExpressions) != 0 || len(deny.Spec.Ingress)+len(deny.Spec.Egress) != 0 ||
			!slices.Equal(deny.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
			t.Errorf("default-deny must select every Pod and allow nothing in or out: %+v", deny.Spec)
		}
		var egress []string
		for _, o := range r.find("NetworkPolicy", "") {
			if o.namespace != chartSandboxNS {
				t.Errorf("NetworkPolicy %s/%s is outside the sandbox namespace", o.namespace, o.name)
			}
			var np networkingv1.NetworkPolicy
			r.get(t, "NetworkPolicy", o.namespace, o.name, &np)
			if len(np.Spec.Ingress) != 0 {
				t.Errorf("NetworkPolicy %s allows ingress", o.name)
			}
			for _, e := range np.Spec.Egress {
				for _, p := range e.Ports {
					for _, to := range e.To {
						peer := "peers"
						if to.IPBlock != nil {
							peer = to.IPBlock.CIDR
						}
						egress = append(egress, fmt.Sprintf("%s %s:%s", o.name, peer, p.Port))
					}
				}
			}
		}
		slices.Sort(egress)
		want := []string{
			"agent-sandbox-allow-apiserver 192.0.2.2/32:6443",
			"agent-sandbox-allow-dns peers:53",
			"agent-sandbox-allow-dns peers:53",
			"agent-sandbox-allow-vault 10.244.0.1/32:8200",
		}
		if !slices.Equal(egress, want) {
			t.Errorf("sandbox egress = %q, want only DNS, the API server and Vault: %q", egress, want)
		}
	})

	t.Run("existing namespace", func(t *testing.T) {
		r := chartRenderArgs(t, "--set", "sandbox.createNamespace=false", "--set", "networkPolicy.dns.enabled=false")
		if n := len(r.find("Namespace", "")); n != 0 {
			t.Errorf("createNamespace=false still renders %d Namespace", n)
		}
		for _, o := range []struct{ kind, name string }{
			{"NetworkPolicy", "agent-sandbox-default-deny"}, {"NetworkPolicy", "agent-sandbox-allow-apiserver"}, {"NetworkPolicy", "agent-sandbox-allow-vault"},
			{"ServiceAccount", "agent-sandbox-mcp"}, {"Role", "agent-sandbox-mcp"}, {"RoleBinding", "agent-sandbox-mcp"},
			{"Role", chartService}, {"RoleBinding", chartService}, {"ServiceAccount", "tool-terraform-apply"},
		} {
			if !r.has(o.kind, chartSandboxNS, o.name) {
				t.Errorf("createNamespace=false must still render %s %s/%s", o.kind, chartSandboxNS, o.name)
			}
		}
		if r.has("NetworkPolicy", chartSandboxNS, "agent-sandbox-allow-dns") {
			t.Error("networkPolicy.dns.enabled=false still allows DNS")
		}
	})

	t.Run("GKE placement and RuntimeClass", func(t *testing.T) {
		r := chartRenderArgs(t, "--set", "runtimeClass.create=true",
			"--set-json", `sandbox.nodeSelector={"sandbox.gke.io/runtime":"gvisor"}`,
			"--set-json", `sandbox.tolerations=[{"key":"sandbox.gke.io/runtime","operator":"Equal","value":"gvisor","effect":"NoSchedule"}]`)
		var rc struct {
			Metadata struct{ Name string } `json:"metadata"`
			Handler  string                `json:"handler"`
		}
		o, ok := r.lookup("RuntimeClass", "", "gvisor")
		if !ok {
			t.Fatalf("runtimeClass.create=true renders no RuntimeClass gvisor: %s", r.summary())
		}
		if err := json.Unmarshal(o.json, &rc); err != nil || rc.Handler != "runsc" {
			t.Errorf("RuntimeClass gvisor: handler %q, %v", rc.Handler, err)
		}
		c, err := policy.Load(r.policyDocument(t))
		if err != nil {
			t.Fatal(err)
		}
		if c.Spec.Sandbox.NodeSelector["sandbox.gke.io/runtime"] != "gvisor" || len(c.Spec.Sandbox.Tolerations) != 1 {
			t.Errorf("GKE placement missing from the policy: %+v %+v", c.Spec.Sandbox.NodeSelector, c.Spec.Sandbox.Tolerations)
		}
		// The webhook Pods are not sandbox Pods: they keep their own placement.
		if ps := r.deployment(t).Spec.Template.Spec; len(ps.NodeSelector) != 0 || len(ps.Tolerations) != 0 {
			t.Errorf("sandbox placement leaked into the webhook Deployment: %+v %+v", ps.NodeSelector, ps.Tolerations)
		}
	})
}

// chartWebhookSelects reports whether every webhook's namespaceSelector (from the code) matches labels.
func chartWebhookSelects(t *testing.T, labels map[string]string) bool {
	t.Helper()
	sel := webhook.SandboxNamespaceSelector()
	for k, v := range sel.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return len(sel.MatchExpressions) == 0
}

// TestChartCertManager: in certManager mode cert-manager issues the certificate for the Service's names, the
// webhook serves it from the mounted Secret, and the CA is injected into both configurations.
func TestChartCertManager(t *testing.T) {
	r := chartRenderArgs(t, "--set", "tls.mode=certManager")
	o, ok := r.lookup("Certificate", chartNamespace, chartService)
	if !ok {
		t.Fatalf("no Certificate %s: %s", chartService, r.summary())
	}
	var cert struct {
		Spec struct {
			SecretName string   `json:"secretName"`
			DNSNames   []string `json:"dnsNames"`
			IssuerRef  struct{ Name, Kind string }
		} `json:"spec"`
	}
	if err := json.Unmarshal(o.json, &cert); err != nil {
		t.Fatal(err)
	}
	svcDNS := chartService + "." + chartNamespace + ".svc"
	if cert.Spec.SecretName != "agent-sandbox-webhook-tls" || !slices.Contains(cert.Spec.DNSNames, svcDNS) {
		t.Errorf("Certificate: secret %q, dnsNames %q; want agent-sandbox-webhook-tls and %s", cert.Spec.SecretName, cert.Spec.DNSNames, svcDNS)
	}
	if !r.has("Issuer", chartNamespace, cert.Spec.IssuerRef.Name) || cert.Spec.IssuerRef.Kind != "Issuer" {
		t.Errorf("the Certificate's issuer %+v is not rendered", cert.Spec.IssuerRef)
	}
	ps := r.deployment(t).Spec.Template.Spec
	c := ps.Containers[0]
	if !slices.Contains(c.Args, "--tls-mode=files") || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--tls-secret") }) {
		t.Errorf("args %q: want --tls-mode=files and no --tls-secret", c.Args)
	}
	certDir := ""
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--cert-dir="); ok {
			certDir = v
		}
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		for _, v := range ps.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == cert.Spec.SecretName && m.MountPath == certDir && m.ReadOnly {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("the Certificate's Secret must be mounted read-only at --cert-dir=%s: %+v %+v", certDir, c.VolumeMounts, ps.Volumes)
	}
	if r2 := chartRenderArgs(t, "--set", "tls.mode=certManager", "--set", "tls.certManager.issuerRef.name=corp-ca", "--set", "tls.certManager.issuerRef.kind=ClusterIssuer"); len(r2.find("Issuer", "")) != 0 {
		t.Error("with tls.certManager.issuerRef the chart must not create its own Issuer")
	}
}

// TestChartMetrics: secure metrics by default (the webhook may create the two reviews controller-runtime's
// filter needs; scrapers get a reader role, bound only to the subjects the values name), plain metrics on
// request, and an optional ServiceMonitor that scrapes the Service's metrics port with the webhook's CA.
func TestChartMetrics(t *testing.T) {
	type rule struct{ groups, resources, urls, verbs string }
	rulesOf := func(rs []rbacv1.PolicyRule) []rule {
		var out []rule
		for _, r := range rs {
			out = append(out, rule{strings.Join(r.APIGroups, ","), strings.Join(r.Resources, ","), strings.Join(r.NonResourceURLs, ","), strings.Join(r.Verbs, ",")})
		}
		return out
	}
	auth, reader := chartNamespace+":"+chartService+"-metrics-auth", chartNamespace+":"+chartService+"-metrics-reader"

	r := chartRenderArgs(t)
	var cr rbacv1.ClusterRole
	r.get(t, "ClusterRole", "", auth, &cr)
	if got, want := rulesOf(cr.Rules), []rule{{"authentication.k8s.io", "tokenreviews", "", "create"}, {"authorization.k8s.io", "subjectaccessreviews", "", "create"}}; !slices.Equal(got, want) {
		t.Errorf("%s rules = %+v, want %+v", auth, got, want)
	}
	var crb rbacv1.ClusterRoleBinding
	r.get(t, "ClusterRoleBinding", "", auth, &crb)
	if crb.RoleRef.Name != auth || len(crb.Subjects) != 1 || crb.Subjects[0].Name != chartService || crb.Subjects[0].Namespace != chartNamespace {
		t.Errorf("%s must bind the webhook's ServiceAccount only: %+v", auth, crb)
	}
	var readerRole rbacv1.ClusterRole
	r.get(t, "ClusterRole", "", reader, &readerRole)
	if got, want := rulesOf(readerRole.Rules), []rule{{"", "", "/metrics", "get"}}; !slices.Equal(got, want) {
		t.Errorf("%s rules = %+v, want %+v", reader, got, want)
	}
	if r.has("ClusterRoleBinding", "", reader) || len(r.find("ServiceMonitor", "")) != 0 {
		t.Error("by default nobody is bound to the metrics reader role and no ServiceMonitor is rendered")
	}

	r = chartRenderArgs(t, "--set-json", `webhook.metrics.readers=[{"kind":"ServiceAccount","name":"prometheus-k8s","namespace":"monitoring"}]`)
	crb = rbacv1.ClusterRoleBinding{}
	r.get(t, "ClusterRoleBinding", "", reader, &crb)
	if crb.RoleRef.Name != reader || len(crb.Subjects) != 1 || crb.Subjects[0].Name != "prometheus-k8s" || crb.Subjects[0].Namespace != "monitoring" {
		t.Errorf("readers must be bound to %s: %+v", reader, crb)
	}

	type serviceMonitor struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			NamespaceSelector struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			Selector  metav1.LabelSelector `json:"selector"`
			Endpoints []struct {
				Port, Path, Scheme, Interval, ScrapeTimeout, BearerTokenFile string
				TLSConfig                                                    map[string]any `json:"tlsConfig"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	decodeSM := func(t *testing.T, r *chartRender) serviceMonitor {
		t.Helper()
		o, ok := r.lookup("ServiceMonitor", chartNamespace, chartService)
		if !ok || o.gvk.GroupVersion().String() != "monitoring.coreos.com/v1" {
			t.Fatalf("no monitoring.coreos.com/v1 ServiceMonitor %s/%s: %s", chartNamespace, chartService, r.summary())
		}
		var sm serviceMonitor
		if err := json.Unmarshal(o.json, &sm); err != nil {
			t.Fatal(err)
		}
		if len(sm.Spec.Endpoints) != 1 {
			t.Fatalf("endpoints: %+v", sm.Spec.Endpoints)
		}
		return sm
	}
	r = chartRenderArgs(t, "--set", "webhook.metrics.serviceMonitor.enabled=true", "--set", "webhook.metrics.serviceMonitor.labels.release=kube-prometheus")
	sm := decodeSM(t, r)
	var svc corev1.Service
	r.get(t, "Service", chartNamespace, chartService, &svc)
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor's selector %s=%s does not select the webhook Service (labels %v)", k, v, svc.Labels)
		}
	}
	e := sm.Spec.Endpoints[0]
	ca, _ := e.TLSConfig["ca"].(map[string]any)
	secret, _ := ca["secret"].(map[string]any)
	if e.Port != "metrics" || e.Scheme != "https" || e.BearerTokenFile == "" || secret["name"] != "agent-sandbox-webhook-tls" || secret["key"] != "ca.crt" ||
		e.TLSConfig["serverName"] != chartService+"."+chartNamespace+".svc" || e.TLSConfig["insecureSkipVerify"] != nil ||
		!slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{chartNamespace}) || sm.Metadata.Labels["release"] != "kube-prometheus" {
		t.Errorf("ServiceMonitor: %+v", sm)
	}

	r = chartRenderArgs(t, "--set", "webhook.metrics.serviceMonitor.enabled=true", "--set", "webhook.metrics.secure=false")
	if e := decodeSM(t, r).Spec.Endpoints[0]; e.Scheme != "http" || e.TLSConfig != nil || e.BearerTokenFile != "" {
		t.Errorf("plain metrics are scraped over http without a token: %+v", e)
	}
	if r.has("ClusterRole", "", auth) || r.has("ClusterRole", "", reader) {
		t.Error("plain metrics need no review permissions and no reader role")
	}
	if args := r.deployment(t).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--metrics-secure=false") {
		t.Errorf("plain metrics: args %q lack --metrics-secure=false", args)
	}
	r = chartRenderArgs(t, "--set", "webhook.metrics.serviceMonitor.enabled=true", "--set", "webhook.metrics.serviceMonitor.tlsConfig.insecureSkipVerify=true")
	if tc := decodeSM(t, r).Spec.Endpoints[0].TLSConfig; tc["insecureSkipVerify"] != true || tc["ca"] != nil {
		t.Errorf("an explicit tlsConfig replaces the default: %+v", tc)
	}
	if r := chartRenderArgs(t, "--set", "webhook.metrics.enabled=false", "--set", "webhook.metrics.serviceMonitor.enabled=true"); len(r.find("ServiceMonitor", "")) != 0 || r.has("ClusterRole", "", auth) {
		t.Error("with metrics off there is nothing to scrape or authorize")
	}
}

// TestChartHelmTest: helm test runs one Pod, in the release namespace, that passes the restricted Pod
// Security Standard, runs check-install with flags the command accepts and names the chart's own Service
// and namespaces; its ServiceAccount may create Jobs in the sandbox namespace and nothing else.
func TestChartHelmTest(t *testing.T) {
	r := chartRenderArgs(t, "--set-json", `imagePullSecrets=[{"name":"regcred"}]`)
	name := chartService + "-test"
	var pod corev1.Pod
	r.get(t, "Pod", chartNamespace, name, &pod)
	if pod.Annotations["helm.sh/hook"] != "test" {
		t.Errorf("the test Pod is not a helm test hook: %v", pod.Annotations)
	}
	if len(r.find("Pod", chartSandboxNS)) != 0 {
		t.Error("a Pod is rendered into the sandbox namespace, where only the Job controller may create Pods")
	}
	eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.MajorMinorVersion(1, 35)}
	if res := psapolicy.AggregateCheckResults(eval.EvaluatePod(restricted, &pod.ObjectMeta, &pod.Spec)); !res.Allowed {
		t.Errorf("the test Pod violates restricted Pod Security: %s", res.ForbiddenReason())
	}
	if pod.Spec.ServiceAccountName != name || pod.Spec.AutomountServiceAccountToken == nil || !*pod.Spec.AutomountServiceAccountToken ||
		pod.Spec.RestartPolicy != corev1.RestartPolicyNever || len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("test Pod spec: %+v", pod.Spec)
	}
	c := pod.Spec.Containers[0]
	if c.Image != r.deployment(t).Spec.Template.Spec.Containers[0].Image {
		t.Errorf("the test Pod runs %s, not the webhook's image", c.Image)
	}
	chartCommandAccepts(t, "the test Pod", c.Args, "check-install")
	for _, want := range []string{"--service=" + chartService, "--namespace=" + chartNamespace, "--sandbox-namespace=" + chartSandboxNS} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("test Pod args %q lack %s", c.Args, want)
		}
	}
	var sa corev1.ServiceAccount
	r.get(t, "ServiceAccount", chartNamespace, name, &sa)
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("the test ServiceAccount must not automount a token into other Pods")
	}
	var role rbacv1.Role
	r.get(t, "Role", chartSandboxNS, name, &role)
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].APIGroups, []string{"batch"}) || !slices.Equal(role.Rules[0].Resources, []string{"jobs"}) ||
		!slices.Equal(role.Rules[0].Verbs, []string{"create"}) {
		t.Errorf("test Role rules = %+v, want create jobs only", role.Rules)
	}
	var rb rbacv1.RoleBinding
	r.get(t, "RoleBinding", chartSandboxNS, name, &rb)
	if rb.RoleRef.Name != name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != name || rb.Subjects[0].Namespace != chartNamespace {
		t.Errorf("test RoleBinding: %+v", rb)
	}
	if r := chartRenderArgs(t, "--set", "tests.enabled=false"); r.has("Pod", chartNamespace, name) || r.has("Role", chartSandboxNS, name) ||
		r.has("Role", chartNamespace, name+"-endpoints") {
		t.Error("tests.enabled=false still renders the test Pod or its Role")
	}
}

// TestChartRejects: values that would weaken the webhook or cannot work fail the render with a clear message.
func TestChartRejects(t *testing.T) {
	_, chart, _ := chartPaths(t)
	dir := t.TempDir()
	privateJWKS := filepath.Join(dir, "private.jwks.json")
	if err := os.WriteFile(privateJWKS, []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"failurePolicy Ignore", []string{"--set", "webhook.failurePolicy=Ignore"}, "/webhook/failurePolicy"},
		{"unknown top-level key", []string{"--set", "replicas=3"}, "additional properties 'replicas' not allowed"},
		{"unknown nested key", []string{"--set", "webhook.failurPolicy=Fail"}, "additional properties 'failurPolicy' not allowed"},
		{"bad tls.mode", []string{"--set", "tls.mode=manual"}, "/tls/mode"},
		{"timeout above 30s", []string{"--set", "webhook.timeoutSeconds=31"}, "/webhook/timeoutSeconds"},
		{"timeout zero", []string{"--set", "webhook.timeoutSeconds=0"}, "/webhook/timeoutSeconds"},
		{"no replicas", []string{"--set", "webhook.replicaCount=0"}, "/webhook/replicaCount"},
		{"bad pull policy", []string{"--set", "image.pullPolicy=Sometimes"}, "/image/pullPolicy"},
		{"bad Vault namespace", []string{"--set", "vault.namespace=/admin//team"}, "/vault/namespace"},
		{"egress without port", []string{"--set-json", `vault.egress=[{"cidr":"10.0.0.1/32"}]`}, "/vault/egress/0"},
		{"webhook in the sandbox namespace", []string{"--namespace", chartSandboxNS}, "never into the namespace it guards"},
		{"approver keys not JSON", []string{"--set-string", "approvers.jwks=not json"}, "approvers.jwks must be a JWK set"},
		{"approver private key", []string{"--set-file", "approvers.jwks=" + privateJWKS}, "private key material"},
		{"Kubernetes older than 1.30", []string{"--kube-version", "1.29.0"}, "kubeVersion"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := chartHelm(t, append([]string{"template", chartRelease, chart, "--namespace", chartNamespace}, tc.args...)...)
			if err == nil {
				t.Fatalf("helm template %s succeeded; want a failure mentioning %q (rendered %d bytes)", strings.Join(tc.args, " "), tc.want, len(out))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %s failed without mentioning %q: %v", strings.Join(tc.args, " "), tc.want, err)
			}
		})
	}
}

// chartWideningValues are values that would silently weaken the sandbox (invariant 2's default-deny egress, and
// the identities the webhook trusts) and once rendered with rc=0: each names the value as the schema reports it
// (a JSON pointer) and as the template's own check does (under --skip-schema-validation).
var chartWideningValues = []struct {
	name, set, pointer, value string
}{
	{"empty egress rule (allow all)", `networkPolicy.extraEgress=[{}]`, "/networkPolicy/extraEgress/0", "networkPolicy.extraEgress[0] has no destinations"},
	{"egress rule without to", `networkPolicy.extraEgress=[{"ports":[{"port":443}]}]`, "/networkPolicy/extraEgress/0", "networkPolicy.extraEgress[0] has no destinations"},
	{"egress rule with empty to", `networkPolicy.extraEgress=[{"to":[],"ports":[{"port":443}]}]`, "/networkPolicy/extraEgress/0/to", "networkPolicy.extraEgress[0] has no destinations"},
	{"egress rule without ports", `networkPolicy.extraEgress=[{"to":[{"ipBlock":{"cidr":"10.1.2.3/32"}}]}]`, "/networkPolicy/extraEgress/0", "networkPolicy.extraEgress[0] has no ports"},
	{"egress rule with empty ports", `networkPolicy.extraEgress=[{"to":[{"ipBlock":{"cidr":"10.1.2.3/32"}}],"ports":[]}]`, "/networkPolicy/extraEgress/0/ports", "networkPolicy.extraEgress[0] has no ports"},
	{"egress port without a port", `networkPolicy.extraEgress=[{"to":[{"ipBlock":{"cidr":"10.1.2.3/32"}}],"ports":[{"protocol":"UDP"}]}]`, "/networkPolicy/extraEgress/0/ports/0", "networkPolicy.extraEgress[0].ports[0] has no port"},
	{"empty egress peer", `networkPolicy.extraEgress=[{"to":[{}],"ports":[{"port":8200}]}]`, "/networkPolicy/extraEgress/0/to/0", "networkPolicy.extraEgress[0].to[0] is an empty NetworkPolicy peer"},
	{"egress to 0.0.0.0/0", `networkPolicy.extraEgress=[{"to":[{"ipBlock":{"cidr":"0.0.0.0/0"}}],"ports":[{"port":443}]}]`, "/networkPolicy/extraEgress/0/to/0/ipBlock/cidr", "networkPolicy.extraEgress[0].to[0].ipBlock.cidr: 0.0.0.0/0 is too wide"},
	{"egress to ::/0", `networkPolicy.extraEgress=[{"to":[{"ipBlock":{"cidr":"::/0"}}],"ports":[{"port":443}]}]`, "/networkPolicy/extraEgress/0/to/0/ipBlock/cidr", "networkPolicy.extraEgress[0].to[0].ipBlock.cidr: ::/0 is too wide"},
	{"egress to every namespace", `networkPolicy.extraEgress=[{"to":[{"namespaceSelector":{}}],"ports":[{"port":8200}]}]`, "/networkPolicy/extraEgress/0/to/0/namespaceSelector", "networkPolicy.extraEgress[0].to[0].namespaceSelector is empty"},
	{"egress to every sandbox Pod", `networkPolicy.extraEgress=[{"to":[{"podSelector":{}}],"ports":[{"port":8200}]}]`, "/networkPolicy/extraEgress/0/to/0", "networkPolicy.extraEgress[0].to[0].podSelector is empty"},
	{"Vault egress to 0.0.0.0/0", `vault.egress=[{"cidr":"0.0.0.0/0","port":8200}]`, "/vault/egress/0/cidr", "vault.egress[0].cidr: 0.0.0.0/0 is too wide"},
	{"Vault egress to a /7", `vault.egress=[{"cidr":"4.0.0.0/7","port":8200}]`, "/vault/egress/0/cidr", "vault.egress[0].cidr: 4.0.0.0/7 is too wide"},
	{"Vault egress to ::/0", `vault.egress=[{"cidr":"::/0","port":8200}]`, "/vault/egress/0/cidr", "vault.egress[0].cidr: ::/0 is too wide"},
	{"API server egress to 0.0.0.0/0", `apiServer.endpoints=[{"cidr":"0.0.0.0/0","port":6443}]`, "/apiServer/endpoints/0/cidr", "apiServer.endpoints[0].cidr: 0.0.0.0/0 is too wide"},
	{"API server egress to an IPv6 /31", `apiServer.endpoints=[{"cidr":"2001:db8::/31","port":6443}]`, "/apiServer/endpoints/0/cidr", "apiServer.endpoints[0].cidr: 2001:db8::/31 is too wide"},
	{"DNS to 0.0.0.0/0", `networkPolicy.dns.to=[{"ipBlock":{"cidr":"0.0.0.0/0"}}]`, "/networkPolicy/dns/to/0/ipBlock/cidr", "networkPolicy.dns.to[0].ipBlock.cidr: 0.0.0.0/0 is too wide"},
	{"DNS to an empty peer", `networkPolicy.dns.to=[{}]`, "/networkPolicy/dns/to/0", "networkPolicy.dns.to[0] is an empty NetworkPolicy peer"},
	{"admin group system:authenticated", `webhook.adminGroups=["system:authenticated"]`, "/webhook/adminGroups/0", `webhook.adminGroups[0]: "system:authenticated" stands for everyone`},
	{"admin group system:unauthenticated", `webhook.adminGroups=["system:masters","system:unauthenticated"]`, "/webhook/adminGroups/1", `webhook.adminGroups[1]: "system:unauthenticated" stands for everyone`},
	{"admin group system:serviceaccounts", `webhook.adminGroups=["system:serviceaccounts"]`, "/webhook/adminGroups/0", `webhook.adminGroups[0]: "system:serviceaccounts" stands for everyone`},
	{"admin group of a namespace's ServiceAccounts", `webhook.adminGroups=["system:serviceaccounts:agent-sandbox"]`, "/webhook/adminGroups/0", `webhook.adminGroups[0]: "system:serviceaccounts:agent-sandbox" stands for everyone`},
	{"admin user system:anonymous", `webhook.adminUsers=["system:anonymous"]`, "/webhook/adminUsers/0", `webhook.adminUsers[0]: "system:anonymous" stands for everyone`},
	{"job controller user system:anonymous", `webhook.jobControllerUsers=["system:anonymous"]`, "/webhook/jobControllerUsers/0", `webhook.jobControllerUsers[0]: "system:anonymous" stands for everyone`},
	{"scheduler user system:authenticated", `webhook.schedulerUsers=["system:authenticated"]`, "/webhook/schedulerUsers/0", `webhook.schedulerUsers[0]: "system:authenticated" stands for everyone`},
	{"metrics reader system:authenticated", `webhook.metrics.readers=[{"kind":"Group","name":"system:authenticated","apiGroup":"rbac.authorization.k8s.io"}]`, "/webhook/metrics/readers/0/name", `webhook.metrics.readers[0].name: "system:authenticated" stands for everyone`},
	{"audit reader system:serviceaccounts", `auditAnchors.reader.subjects=[{"kind":"Group","name":"system:serviceaccounts","apiGroup":"rbac.authorization.k8s.io"}]`, "/auditAnchors/reader/subjects/0/name", `auditAnchors.reader.subjects[0].name: "system:serviceaccounts" stands for everyone`},
}

// TestChartRefusesWideningValues: every value of chartWideningValues fails the render, refused by the schema
// at the value's path, and, with the schema skipped (helm --skip-schema-validation), by the template's own
// check naming the value and the reason. The narrow values the repository and its docs use still render.
func TestChartRefusesWideningValues(t *testing.T) {
	_, chart, _ := chartPaths(t)
	for _, tc := range chartWideningValues {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []struct {
				args []string
				want string
			}{
				{[]string{"--set-json", tc.set}, "at '" + tc.pointer + "'"},
				{[]string{"--set-json", tc.set, "--skip-schema-validation"}, tc.value},
			} {
				out, err := chartTemplate(t, chart, mode.args...)
				if err == nil {
					t.Errorf("helm template %s succeeded; want a failure mentioning %q (rendered %d bytes)", strings.Join(mode.args, " "), mode.want, len(out))
				} else if !strings.Contains(err.Error(), mode.want) {
					t.Errorf("helm template %s failed without mentioning %q: %v", strings.Join(mode.args, " "), mode.want, err)
				}
			}
		})
	}

	// What the repository and its docs set (scripts/deploy.sh's /32 endpoints, docs/install.md's HVN /20 and
	// in-cluster Vault rule, NodeLocal DNSCache's address) and the narrowest widths still allowed must render.
	for _, set := range []string{
		`vault.egress=[{"cidr":"172.25.16.0/20","port":8200},{"cidr":"10.0.0.0/8","port":8200}]`,
		`apiServer.endpoints=[{"cidr":"192.0.2.2/32","port":6443},{"cidr":"2001:db8::/32","port":443},{"cidr":"fd00:10:96::1/128","port":443}]`,
		`networkPolicy.extraEgress=[{"to":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"vault"}},"podSelector":{"matchLabels":{"app.kubernetes.io/name":"vault"}}}],"ports":[{"protocol":"TCP","port":8200}]}]`,
		`networkPolicy.extraEgress=[{"to":[{"namespaceSelector":{"matchExpressions":[{"key":"team","operator":"In","values":["vault"]}]},"podSelector":{}}],"ports":[{"port":"https"}]}]`,
		`networkPolicy.dns.to=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kube-system"}}},{"ipBlock":{"cidr":"169.254.20.10/32"}}]`,
		`webhook.adminUsers=["system:serviceaccount:ci:helm-deployer"]`,
	} {
		for _, skip := range [][]string{nil, {"--skip-schema-validation"}} {
			args := append([]string{"--set-json", set}, skip...)
			if out, err := chartTemplate(t, chart, args...); err != nil {
				t.Errorf("helm template %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
}

// TestChartLintAndPackage: helm lint --strict is clean, and the packaged chart (which must follow the
// files/policy.yaml symlink and carry the policy's contents) renders exactly like the chart folder.
func TestChartLintAndPackage(t *testing.T) {
	_, chart, policyFile := chartPaths(t)
	for _, args := range [][]string{nil, {"--set", "tls.mode=certManager"}, {"--set", "sandbox.createNamespace=false"}} {
		if out, err := chartHelm(t, append([]string{"lint", "--strict", chart, "--namespace", chartNamespace}, args...)...); err != nil {
			t.Errorf("helm lint --strict %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	if fi, err := os.Lstat(filepath.Join(chart, "files", "policy.yaml")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("charts/agent-sandbox/files/policy.yaml must be a symlink to policy/policy.yaml (one policy, no copy): %v", err)
	}
	dir := t.TempDir()
	if out, err := chartHelm(t, "package", chart, "--destination", dir); err != nil {
		t.Fatalf("helm package: %v\n%s", err, out)
	}
	pkgs, _ := filepath.Glob(filepath.Join(dir, "agent-sandbox-*.tgz"))
	if len(pkgs) != 1 {
		t.Fatalf("helm package wrote %v", pkgs)
	}
	fromDir, err := chartTemplate(t, chart)
	if err != nil {
		t.Fatal(err)
	}
	fromPkg, err := chartTemplate(t, pkgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if fromDir != fromPkg {
		t.Error("the packaged chart renders differently from the chart folder")
	}
	extract := exec.Command("tar", "-xzf", pkgs[0], "-C", dir, "agent-sandbox/files/policy.yaml")
	if out, err := extract.CombinedOutput(); err != nil {
		t.Fatalf("the package has no files/policy.yaml: %v\n%s", err, out)
	}
	packaged, err := os.Lstat(filepath.Join(dir, "agent-sandbox", "files", "policy.yaml"))
	if err != nil || !packaged.Mode().IsRegular() {
		t.Fatalf("files/policy.yaml in the package must be a regular file (the symlink's target): %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "agent-sandbox", "files", "policy.yaml"))
	want, _ := os.ReadFile(policyFile)
	if !bytes.Equal(got, want) {
		t.Error("the packaged files/policy.yaml differs from policy/policy.yaml")
	}
	list, err := exec.Command("tar", "-tzf", pkgs[0]).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(list), "agent-sandbox/tests/") {
		t.Error("the package carries the chart's tests folder (.helmignore)")
	}
}

// TestChartGolden compares the full default render with charts/agent-sandbox/tests/golden/default.yaml.
// UPDATE_GOLDEN=1 rewrites the file; review its diff like code.
func TestChartGolden(t *testing.T) {
	_, chart, _ := chartPaths(t)
	got, err := chartTemplate(t, chart)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join(chart, "tests", "golden", "default.yaml")
	if os.Getenv(chartGoldenEnv) == "1" {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", golden)
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (create it with %s=1)", err, chartGoldenEnv)
	}
	// Helm 4 ends every document with a blank line where Helm 3 does not, and orders some kinds differently
	// (a ValidatingAdmissionPolicy before or after the webhook configurations); the documents are the same,
	// and one golden file serves both.
	if got, want := chartNormalize(got), chartNormalize(string(want)); got != want {
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		line := 0
		for line < len(gl) && line < len(wl) && gl[line] == wl[line] {
			line++
		}
		show := func(ls []string) string { return strings.Join(ls[line:min(line+5, len(ls))], "\n") }
		t.Errorf("the default render differs from %s from line %d on (rerun with %s=1 if the change is intended)\nrendered:\n%s\ngolden:\n%s",
			golden, line+1, chartGoldenEnv, show(gl), show(wl))
	}
}

// chartNormalize trims the space around each document of a render and sorts the documents, so that renders
// differing only in the blank lines between documents, or in the order Helm sorts kinds into, compare equal.
func chartNormalize(render string) string {
	docs := strings.Split(render, "\n---\n")
	for i, d := range docs {
		docs[i] = strings.TrimSpace(d)
	}
	slices.Sort(docs)
	return strings.Join(docs, "\n---\n") + "\n"
}

// TestHelmInstallOnAPIServer installs the chart with helm into a real kube-apiserver the way the local
// cluster does (the sandbox namespace already exists, created by cluster/manifests/namespaces.yaml), then
// runs the webhook's own TLS and ledger code and the MCP server's permissions under the installed
// ServiceAccounts: the chart's RBAC must be enough for what the webhook does, and no more.
//
// It is named without "Chart" so that `-run Chart` needs only helm; it needs $KUBEBUILDER_ASSETS too,
// which scripts/test-integration.sh sets.
func TestHelmInstallOnAPIServer(t *testing.T) {
	ctx := context.Background()
	api, admin, chart, kube := chartInstallTarget(t, ctx)
	// With the default sandbox.createNamespace=true, Helm refuses a namespace it does not own, before it
	// creates anything: that is why the local cluster installs with createNamespace=false.
	if out, err := chartHelm(t, append([]string{"install", chartRelease, chart, "--create-namespace"}, kube...)...); err == nil {
		t.Fatalf("helm install over an existing, unowned sandbox namespace succeeded:\n%s", out)
	} else if !strings.Contains(err.Error(), `Namespace "agent-sandbox"`) {
		t.Errorf("helm install over an existing namespace failed for another reason: %v", err)
	}
	if out, err := chartHelm(t, append([]string{"install", chartRelease, chart, "--create-namespace", "--set", "sandbox.createNamespace=false"}, kube...)...); err != nil {
		t.Fatalf("helm install with sandbox.createNamespace=false: %v\n%s", err, out)
	} else if !strings.Contains(out, `WARNING: approvals are addressed to cluster ID "agent-sandbox-local", the shipped default`) {
		// Every install that keeps the default accepts the others' approvals: the notes must say so.
		t.Errorf("helm install with the default cluster ID printed no warning about it:\n%s", out)
	}

	var dep appsv1.Deployment
	if err := admin.Get(ctx, client.ObjectKey{Namespace: chartNamespace, Name: chartService}, &dep); err != nil {
		t.Fatal(err)
	}
	// Helm 4 installs a new release with server-side apply (field manager helm, operation Apply); Helm 3
	// creates and patches (operation Update).
	major := chartHelmMajor(t)
	wantOp := map[int]metav1.ManagedFieldsOperationType{3: metav1.ManagedFieldsOperationUpdate, 4: metav1.ManagedFieldsOperationApply}[major]
	if !chartManagedBy(dep.ManagedFields, "helm", wantOp) {
		t.Errorf("Helm %d installed the Deployment without a %s by field manager helm: %+v", major, wantOp, dep.ManagedFields)
	}
	flags := map[string]string{}
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			flags[k] = v
		}
	}
	hook := chartServiceAccount("webhook", chartNamespace, dep.Spec.Template.Spec.ServiceAccountName)
	helmTest := chartServiceAccount("test", chartNamespace, chartService+"-test")
	mcp := chartServiceAccount("mcp", chartSandboxNS, "agent-sandbox-mcp")
	auditor := chartIdentity{who: "auditor", user: "auditor", groups: []string{"system:authenticated"}}
	asWebhook := newClient(t, hook.impersonating(api.Config))

	t.Run("self-managed TLS as the webhook", func(t *testing.T) {
		tlsm := &servingcert.SelfManaged{Client: asWebhook, Namespace: chartNamespace, SecretName: flags["--tls-secret"],
			ServiceName: flags["--service-name"], WebhookConfigs: []string{flags["--webhook-config"]}, CertDir: t.TempDir()}
		for i := range 2 { // the first run creates the Secret, the second reads it back
			if err := tlsm.Ensure(ctx); err != nil {
				t.Fatalf("Ensure #%d with the chart's RBAC: %v", i+1, err)
			}
		}
		chartCABundles(t, ctx, admin, flags["--webhook-config"], len(chartWebhookNames()))

		// An upgrade that changes the configurations keeps the injected caBundle: the chart never sets it,
		// so neither Helm's three-way merge nor a server-side apply (whose field manager never owned it)
		// touches it.
		upgrade := append([]string{"upgrade", chartRelease, chart, "--set", "sandbox.createNamespace=false", "--set", "webhook.timeoutSeconds=12"}, kube...)
		if major == 4 {
			// Helm 4 upgrades a release it installed server-side by applying every object again, changed or
			// not, so the sandbox namespace's NetworkPolicies and quota go through the webhook that guards
			// them. No webhook runs here, and it fails closed: the upgrade is refused. (On a cluster the
			// running webhook admits them for the chart's identity.) With --server-side=false Helm 4 patches
			// only what changed, as Helm 3 does: docs/install.md gives it as the way to repair a webhook that
			// is down.
			out, err := chartHelm(t, upgrade...)
			if err == nil || !strings.Contains(err.Error(), "protected.validate.agent-sandbox.dev") {
				t.Fatalf("Helm 4's server-side upgrade without a webhook = %v, want it refused by the protected webhook (fail closed)\n%s", err, out)
			}
			upgrade = append(upgrade, "--server-side=false")
		}
		if out, err := chartHelm(t, upgrade...); err != nil {
			t.Fatalf("helm upgrade: %v\n%s", err, out)
		}
		var v admissionregistrationv1.ValidatingWebhookConfiguration
		if err := admin.Get(ctx, client.ObjectKey{Name: flags["--webhook-config"]}, &v); err != nil {
			t.Fatal(err)
		}
		if v.Webhooks[0].TimeoutSeconds == nil || *v.Webhooks[0].TimeoutSeconds != 12 {
			t.Errorf("helm upgrade did not change timeoutSeconds: %v", v.Webhooks[0].TimeoutSeconds)
		}
		chartCABundles(t, ctx, admin, flags["--webhook-config"], len(chartWebhookNames()))
	})

	t.Run("the webhook's identity changes caBundle and nothing else", func(t *testing.T) {
		chartWebhookIdentityOnlyInjectsCA(t, ctx, kubernetes.NewForConfigOrDie(hook.impersonating(api.Config)), flags["--webhook-config"])
	})

	t.Run("approval ledger as the webhook", func(t *testing.T) {
		l := &ledger.ConfigMapLedger{Client: asWebhook, Namespace: chartNamespace}
		const id = "00112233445566778899aabbccddeeff"
		if seen, err := l.Seen(ctx, id); err != nil || seen {
			t.Fatalf("Seen before Record with the chart's RBAC = %v, %v; want false", seen, err)
		}
		if err := l.Record(ctx, id, time.Now().Add(-time.Hour)); err != nil {
			t.Fatalf("Record with the chart's RBAC: %v", err)
		}
		if seen, err := l.Seen(ctx, id); err != nil || !seen {
			t.Fatalf("Seen after Record with the chart's RBAC = %v, %v; want true", seen, err)
		}
		if err := l.Record(ctx, id, time.Now().Add(-time.Hour)); !errors.Is(err, approval.ErrReplayed) {
			t.Fatalf("second Record = %v, want ErrReplayed", err)
		}
		if n, err := l.Prune(ctx); err != nil || n != 1 {
			t.Fatalf("Prune with the chart's RBAC = %d, %v; want 1 pruned", n, err)
		}
	})

	t.Run("audit anchors: recorded as the webhook, read as an auditor bound to the audit-reader Role", func(t *testing.T) {
		l := &ledger.ConfigMapLedger{Client: asWebhook, Namespace: chartNamespace}
		a := audit.Anchor{RequestID: "req-0123456789ab", Head: strings.Repeat("ab", 32), Tool: "k8s_get_pod_status", Job: "as-k8s-get-pod-status-0123456789ab",
			Admitted: time.Now(), Deadline: 2 * time.Minute}
		if err := l.RecordAnchor(ctx, a, time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("RecordAnchor with the chart's RBAC: %v", err)
		}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "auditor", Namespace: chartNamespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agent-sandbox-audit-reader"},
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: auditor.user}}}
		if err := admin.Create(ctx, binding); err != nil {
			t.Fatal(err)
		}
		asAuditor := newClient(t, auditor.impersonating(api.Config))
		// RBAC grants a new binding at once, but give the authorizer's cache a moment.
		var got []audit.Anchor
		var err error
		for i := 0; i < 50; i++ {
			if got, err = ledger.ListAnchors(ctx, asAuditor, chartNamespace); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil || len(got) != 1 || got[0].RequestID != a.RequestID || got[0].Head != a.Head {
			t.Fatalf("ListAnchors as the auditor: %+v, %v", got, err)
		}
	})

	t.Run("owner Jobs as the webhook", func(t *testing.T) {
		var job batchv1.Job
		// NotFound, not Forbidden: authorization is checked before existence.
		if err := asWebhook.Get(ctx, client.ObjectKey{Namespace: chartSandboxNS, Name: "no-such-job"}, &job); !apierrors.IsNotFound(err) {
			t.Errorf("get a Job in the sandbox namespace: %v, want NotFound", err)
		}
		if err := asWebhook.Get(ctx, client.ObjectKey{Namespace: "demo-app", Name: "no-such-job"}, &job); !apierrors.IsForbidden(err) {
			t.Errorf("get a Job outside the sandbox namespace: %v, want Forbidden", err)
		}
	})

	t.Run("helm test's check as its ServiceAccount", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(helmTest.impersonating(api.Config))
		if err != nil {
			t.Fatal(err)
		}
		// No webhook process runs here, and the configurations fail closed: the chart's RBAC lets the check
		// reach admission (not Forbidden by RBAC), and the check reports the unreachable webhook as such.
		_, err = installcheck.CheckDeniesUnsafeJob(ctx, cs.BatchV1().Jobs(chartSandboxNS), chartSandboxNS, "registry.invalid/x", chartWebhookNames())
		if !errors.Is(err, installcheck.ErrUnreachable) {
			t.Errorf("check-install's dry run as the test ServiceAccount = %v, want ErrUnreachable", err)
		}
		// The configurations Helm installed, as the API server defaulted them and the webhook injected its
		// CA, read with the test ServiceAccount's rights, guard all that agent-sandbox renders; with one
		// webhook failing open they do not.
		ar := cs.AdmissionregistrationV1()
		liveM, err := ar.MutatingWebhookConfigurations().Get(ctx, flags["--webhook-config"], metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the test ServiceAccount reads the mutating configuration: %v", err)
		}
		liveV, err := ar.ValidatingWebhookConfigurations().Get(ctx, flags["--webhook-config"], metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the test ServiceAccount reads the validating configuration: %v", err)
		}
		wantM, wantV := webhook.Configurations(webhook.ConfigurationsFor{Name: flags["--webhook-config"], ServiceNamespace: chartNamespace,
			ServiceName: flags["--service-name"], Port: 443, SandboxNamespace: chartSandboxNS})
		if err := installcheck.CheckConfigurations(liveM, liveV, wantM, wantV); err != nil {
			t.Errorf("check-install finds the installed configurations drifted: %v", err)
		}
		liveV.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		if err := installcheck.CheckConfigurations(liveM, liveV, wantM, wantV); !errors.Is(err, installcheck.ErrDrifted) {
			t.Errorf("check-install with a webhook failing open: %v, want ErrDrifted", err)
		}
		// And the admission policy that keeps the webhook's ServiceAccount to caBundle, read likewise.
		p, err := ar.ValidatingAdmissionPolicies().Get(ctx, chartGuard, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the test ServiceAccount reads the admission policy: %v", err)
		}
		b, err := ar.ValidatingAdmissionPolicyBindings().Get(ctx, chartGuard, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the test ServiceAccount reads the admission policy's binding: %v", err)
		}
		if err := installcheck.CheckGuard(p, b); err != nil {
			t.Errorf("check-install finds the installed admission policy wanting: %v", err)
		}
	})

	t.Run("other operators' APIs are checked at install", func(t *testing.T) {
		for _, tc := range []struct{ set, want string }{
			{"tls.mode=certManager", "this cluster does not serve cert-manager.io/v1 Certificate"},
			{"webhook.metrics.serviceMonitor.enabled=true", "this cluster does not serve monitoring.coreos.com/v1 ServiceMonitor"},
		} {
			_, err := chartHelm(t, append([]string{"upgrade", chartRelease, chart, "--dry-run=server", "--set", "sandbox.createNamespace=false", "--set", tc.set}, kube...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm upgrade --set %s on a cluster without that API: %v, want a failure saying %q", tc.set, err, tc.want)
			}
		}
	})

	for _, tc := range []struct {
		id                                   chartIdentity
		verb, group, resource, sub, ns, name string
		allowed                              bool
	}{
		{auditor, "list", "", "configmaps", "", chartNamespace, "", true},
		{auditor, "create", "", "configmaps", "", chartNamespace, "", false},
		{auditor, "delete", "", "configmaps", "", chartNamespace, "anchor-x", false},
		{auditor, "list", "", "secrets", "", chartNamespace, "", false},
		{auditor, "list", "", "configmaps", "", chartSandboxNS, "", false},
		{mcp, "list", "", "configmaps", "", chartNamespace, "", false},
		{mcp, "create", "", "configmaps", "", chartNamespace, "", false},
		{hook, "get", "", "secrets", "", chartNamespace, "some-other-secret", false},
		{hook, "list", "", "secrets", "", chartNamespace, "", false},
		{hook, "get", "", "secrets", "", chartSandboxNS, flags["--tls-secret"], false},
		{hook, "update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "someone-elses", false},
		{hook, "create", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "", false},
		{hook, "create", "", "configmaps", "", chartSandboxNS, "", false},
		// The warm pool: the webhook keeps warm Jobs in the sandbox namespace, and nowhere else.
		{hook, "list", "batch", "jobs", "", chartSandboxNS, "", true},
		{hook, "create", "batch", "jobs", "", chartSandboxNS, "", true},
		{hook, "create", "batch", "jobs", "", "demo-app", "", false},
		{hook, "delete", "", "pods", "", chartSandboxNS, "p", false},
		// A warm Pod left unclaimed under a claim anchored but never stored is evicted (webhook/settle.go).
		{hook, "create", "", "pods", "eviction", chartSandboxNS, "p", true},
		{hook, "create", "", "pods", "eviction", "demo-app", "p", false},
		// The audit anchors and the pool's void marks are the webhook's: the MCP server can write neither.
		{mcp, "create", "", "pods", "eviction", chartSandboxNS, "p", false},
		{hook, "update", "coordination.k8s.io", "leases", "", chartNamespace, "someone-elses", false},
		// The secure metrics: the webhook may ask the API server to check a scrape's token.
		{hook, "create", "authentication.k8s.io", "tokenreviews", "", "", "", true},
		{hook, "create", "authorization.k8s.io", "subjectaccessreviews", "", "", "", true},
		// helm test's ServiceAccount: create Jobs in the sandbox namespace (every one still passes the
		// webhook) ...
		{helmTest, "create", "batch", "jobs", "", chartSandboxNS, "", true},
		{helmTest, "get", "batch", "jobs", "", chartSandboxNS, "j", false},
		{helmTest, "create", "", "pods", "", chartSandboxNS, "", false},
		{helmTest, "create", "batch", "jobs", "", "demo-app", "", false},
		{helmTest, "get", "", "secrets", "", chartNamespace, "agent-sandbox-webhook-tls", false},
		// ... and list EndpointSlices in its own namespace, to dial each webhook replica without cluster DNS.
		{helmTest, "list", "discovery.k8s.io", "endpointslices", "", chartNamespace, "", true},
		{helmTest, "list", "discovery.k8s.io", "endpointslices", "", chartSandboxNS, "", false},
		{helmTest, "update", "discovery.k8s.io", "endpointslices", "", chartNamespace, "e", false},
		{mcp, "patch", "", "pods", "", chartSandboxNS, "p", true},
		{mcp, "patch", "", "pods", "status", chartSandboxNS, "p", false},
		{mcp, "create", "batch", "jobs", "", chartSandboxNS, "", true},
		{mcp, "delete", "batch", "jobs", "", chartSandboxNS, "j", true},
		{mcp, "create", "", "configmaps", "", chartSandboxNS, "", true},
		// RBAC lets the MCP server delete ConfigMaps; the webhook admits only its deletes of workspaces (the
		// corpus's own-objects cases: a saved plan and the API server's CA are refused).
		{mcp, "delete", "", "configmaps", "", chartSandboxNS, "tfws-0123456789abcdef0123", true},
		{mcp, "update", "", "configmaps", "", chartSandboxNS, "tfws-0123456789abcdef0123", false},
		{mcp, "get", "", "pods", "log", chartSandboxNS, "p", true},
		{mcp, "list", "", "events", "", chartSandboxNS, "", true},
		{mcp, "get", "", "secrets", "", chartSandboxNS, "s", false},
		{mcp, "list", "", "secrets", "", chartSandboxNS, "", false},
		{mcp, "create", "", "pods", "exec", chartSandboxNS, "p", false},
		{mcp, "get", "", "pods", "exec", chartSandboxNS, "p", false},
		{mcp, "create", "", "pods", "attach", chartSandboxNS, "p", false},
		{mcp, "create", "", "pods", "", chartSandboxNS, "", false},
		{mcp, "update", "", "pods", "ephemeralcontainers", chartSandboxNS, "p", false},
		{mcp, "create", "batch", "jobs", "", "demo-app", "", false},
		{mcp, "create", "", "serviceaccounts", "token", chartSandboxNS, "tool-terraform-apply", false},
		{mcp, "create", "batch", "cronjobs", "", chartSandboxNS, "", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: tc.id.user, Groups: tc.id.groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tc.verb, Group: tc.group, Resource: tc.resource,
				Subresource: tc.sub, Namespace: tc.ns, Name: tc.name}}}
		if err := admin.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.allowed {
			t.Errorf("%s may %s %s/%s %s in %q (name %q): %v, want %v", tc.id.who, tc.verb, tc.resource, tc.sub, tc.group, tc.ns, tc.name, sar.Status.Allowed, tc.allowed)
		}
	}
}

// chartInstallTarget starts a real kube-apiserver holding the local cluster's namespaces, as a helm install
// there finds it, and returns it, an admin client of it, the chart's folder and the helm flags that aim at it.
func chartInstallTarget(t *testing.T, ctx context.Context) (api *harness.APIServer, admin client.Client, chart string, kube []string) {
	t.Helper()
	root, chart, _ := chartPaths(t)
	api = harness.StartAPIServer(t)
	admin = newClient(t, api.Config)
	chartLocalNamespaces(t, ctx, admin, root)
	return api, admin, chart, []string{"--kubeconfig", api.KubeconfigPath, "--namespace", chartNamespace}
}

// chartLocalNamespaces creates the local cluster's namespaces, from the same manifest scripts/up.sh applies.
func chartLocalNamespaces(t *testing.T, ctx context.Context, admin client.Client, root string) {
	t.Helper()
	manifest, err := os.ReadFile(filepath.Join(root, "cluster", "manifests", "namespaces.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range chartDecode(t, string(manifest)).find("Namespace", "") {
		var ns corev1.Namespace
		if err := chartStrictUnmarshal(o.json, &ns); err != nil {
			t.Fatal(err)
		}
		if err := admin.Create(ctx, &ns); err != nil {
			t.Fatalf("create namespace %s: %v", ns.Name, err)
		}
	}
}

// TestHelmHandOverOnAPIServer: one release passes between Helm 3 and Helm 4 both ways, as `make deploy HELM=4`
// over a Helm 3 install and `make deploy` (Helm 3) over a Helm 4 install do on the local cluster. Helm 4
// upgrades and rolls back a Helm 3 release client-side (its "auto" keeps the method the release was installed
// with), uninstalls it removing the webhook configurations first, installs afresh server-side; Helm 3 reads
// and upgrades that release, after which Helm 4 continues client-side. No webhook runs here and the
// configurations fail closed, so every step that re-applied the guarded sandbox objects would be refused:
// none does. It needs both binaries ($AGENT_SANDBOX_HELM_BIN a Helm 3, $AGENT_SANDBOX_HELM4_BIN a Helm 4).
func TestHelmHandOverOnAPIServer(t *testing.T) {
	helm3, helm4 := os.Getenv(chartHelmEnv), os.Getenv(chartHelm4Env)
	if helm3 == "" || helm4 == "" {
		t.Skipf("needs $%s (Helm 3) and $%s (Helm 4); scripts/test-integration.sh sets both", chartHelmEnv, chartHelm4Env)
	}
	if chartHelmMajorOf(t, chartHelmEnv, helm3) != 3 || chartHelmMajorOf(t, chartHelm4Env, helm4) != 4 {
		t.Skipf("$%s is not a Helm 3 or $%s not a Helm 4", chartHelmEnv, chartHelm4Env)
	}
	ctx := context.Background()
	_, admin, chart, kube := chartInstallTarget(t, ctx)
	run := func(who string, args ...string) {
		t.Helper()
		env, bin := chartHelmEnv, helm3
		if who == "helm4" {
			env, bin = chartHelm4Env, helm4
		}
		if out, err := chartHelmWith(t, env, bin, append(args, kube...)...); err != nil {
			t.Fatalf("%s %s: %v\n%s", who, strings.Join(args, " "), err, out)
		}
	}
	values := []string{"--set", "sandbox.createNamespace=false"}
	timeout := func(want int32) {
		t.Helper()
		var v admissionregistrationv1.ValidatingWebhookConfiguration
		if err := admin.Get(ctx, client.ObjectKey{Name: chartConfig}, &v); err != nil {
			t.Fatal(err)
		}
		if got := v.Webhooks[0].TimeoutSeconds; got == nil || *got != want {
			t.Errorf("timeoutSeconds = %v, want %d", got, want)
		}
	}
	applyMethod := func(want string) {
		t.Helper()
		out, err := chartHelmWith(t, chartHelm4Env, helm4, append([]string{"get", "metadata", chartRelease, "-o", "json"}, kube...)...)
		if err != nil {
			t.Fatal(err)
		}
		var md struct {
			ApplyMethod string `json:"applyMethod"`
		}
		if err := json.Unmarshal([]byte(out), &md); err != nil {
			t.Fatalf("helm get metadata: %v\n%s", err, out)
		}
		if md.ApplyMethod != want {
			t.Errorf("the release's apply method is %q, want %q", md.ApplyMethod, want)
		}
	}

	// A Helm 3 release, upgraded and rolled back by Helm 4: client-side, as Helm 3 would.
	run("helm3", append([]string{"install", chartRelease, chart, "--create-namespace"}, values...)...)
	run("helm4", append([]string{"upgrade", chartRelease, chart, "--set", "webhook.timeoutSeconds=11"}, values...)...)
	timeout(11)
	applyMethod("csa")
	run("helm4", "rollback", chartRelease, "1")
	timeout(10)

	// Helm 4 uninstalls it: the webhook configurations go first, so the guarded NetworkPolicies and quota can
	// be deleted although no webhook answers (Helm 3 deletes the configurations last).
	run("helm4", "uninstall", chartRelease, "--wait")
	var nps networkingv1.NetworkPolicyList
	if err := admin.List(ctx, &nps, client.InNamespace(chartSandboxNS)); err != nil || len(nps.Items) != 0 {
		t.Errorf("after helm uninstall: %d NetworkPolicies left in %s (%v)", len(nps.Items), chartSandboxNS, err)
	}

	// A fresh Helm 4 install is server-side; Helm 3 takes it over with a three-way merge of what changed,
	// after which Helm 4 follows the release's last method, client-side.
	run("helm4", append([]string{"install", chartRelease, chart}, values...)...)
	applyMethod("ssa")
	run("helm3", append([]string{"upgrade", chartRelease, chart, "--set", "webhook.timeoutSeconds=12"}, values...)...)
	timeout(12)
	applyMethod("")
	run("helm4", append([]string{"upgrade", chartRelease, chart, "--set", "webhook.timeoutSeconds=13"}, values...)...)
	timeout(13)
	applyMethod("csa")
	run("helm3", "rollback", chartRelease, "2")
	timeout(12)
	out, err := chartHelmWith(t, chartHelmEnv, helm3, append([]string{"history", chartRelease, "-o", "json"}, kube...)...)
	if err != nil {
		t.Fatal(err)
	}
	var history []struct {
		Revision int    `json:"revision"`
		Status   string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &history); err != nil || len(history) != 4 || history[3].Status != "deployed" {
		t.Errorf("helm history after the hand-over: %v\n%s", err, out)
	}
}

// chartIdentity is a user the API server's authorizer is asked about, or that a client impersonates; who
// names it in failures.
type chartIdentity struct {
	who, user string
	groups    []string
}

// chartServiceAccount is the identity of the ServiceAccount namespace/name, with the groups the API server
// gives every ServiceAccount's token.
func chartServiceAccount(who, namespace, name string) chartIdentity {
	return chartIdentity{who: who, user: "system:serviceaccount:" + namespace + ":" + name,
		groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
}

// impersonating is a copy of cfg that acts as the identity.
func (id chartIdentity) impersonating(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: id.user, Groups: id.groups}
	return c
}

// chartManagedBy reports whether a field manager of that name and operation owns fields of an object.
func chartManagedBy(entries []metav1.ManagedFieldsEntry, manager string, op metav1.ManagedFieldsOperationType) bool {
	return slices.ContainsFunc(entries, func(e metav1.ManagedFieldsEntry) bool { return e.Manager == manager && e.Operation == op })
}

// chartWebhookNames are the names of the webhooks the chart registers.
func chartWebhookNames() []string {
	m, v := webhook.Configurations(webhook.ConfigurationsFor{Name: "x", SandboxNamespace: "agent-sandbox"})
	var names []string
	for _, w := range m.Webhooks {
		names = append(names, w.Name)
	}
	for _, w := range v.Webhooks {
		names = append(names, w.Name)
	}
	return names
}

// chartCABundles checks that want webhooks of the two configurations named name have a caBundle.
func chartCABundles(t *testing.T, ctx context.Context, c client.Client, name string, want int) {
	t.Helper()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &m); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &v); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, w := range m.Webhooks {
		if len(w.ClientConfig.CABundle) > 0 {
			n++
		}
	}
	for _, w := range v.Webhooks {
		if len(w.ClientConfig.CABundle) > 0 {
			n++
		}
	}
	if n != want {
		t.Errorf("%d of the webhooks have a caBundle, want %d", n, want)
	}
}

// chartWebhookIdentityOnlyInjectsCA: the webhook's ServiceAccount may update its two configurations
// (self-managed TLS injects the CA), and the built-in edit role of the release namespace may act as it. The
// chart's admission policy keeps that to caBundle (corpus.WebhookIdentityAttempts, which make verify runs on
// the live cluster too): every change that turns the webhook against the cluster or off is refused (dry
// runs); a new caBundle alone passes.
func chartWebhookIdentityOnlyInjectsCA(t *testing.T, ctx context.Context, asWebhook kubernetes.Interface, name string) {
	t.Helper()
	attacks, caBundle := corpus.WebhookIdentityAttempts(ctx, asWebhook, name, 30*time.Second)
	for _, a := range attacks {
		if !a.Refused {
			t.Errorf("as the webhook, %s: %v; want it refused by the chart's admission policy", a.Name, a.Err)
		}
	}
	if caBundle != nil {
		t.Errorf("as the webhook, a new caBundle alone: %v", caBundle)
	}
}
