package corpus

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/terraform"
)

// The shipped rule plan-known-pod-fields lets a pod spec, a container and their security contexts set only
// the attributes it lists; the other plan rules judge those attributes by name. Its lists must be exactly
// what the pinned provider (the mirror's, AGENT_SANDBOX_TF_PROVIDER_MIRROR) has: a name the provider lacks
// would let a newer provider's attribute of that name through unjudged, and a name the provider has but the
// rule lacks would refuse a plan the other rules judge. Real Terraform prints the provider's schema; a
// provider upgrade fails this test with the new attributes named. Skipped without the mirror.
func TestKnownPodFieldsAreTheProvidersSchemaWithTerraform(t *testing.T) {
	bin, mirror := offlineTerraform(t)
	files, err := terraform.DemoFiles()
	if err != nil {
		t.Fatal(err)
	}
	w, err := newLocalWorkdir(t.TempDir(), mirror, files)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tf := w.terraform(bin, "/nonexistent")
	if _, err := tf(ctx, "init", "-input=false", "-no-color", "-backend=false"); err != nil {
		t.Fatal(err)
	}
	out, err := tf(ctx, "providers", "schema", "-json")
	if err != nil {
		t.Fatal(err)
	}
	schema := podSchemaKeys(t, out)

	shipped, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var expr string
	for _, r := range shipped.PlanRules.Rules() {
		if r.Name == "plan-known-pod-fields" {
			expr = r.Expression
		}
	}
	lists := regexp.MustCompile(`\bk in \[([^\]]*)\]`).FindAllStringSubmatch(expr, -1)
	names := []string{"pod spec", "pod security_context", "container", "container security_context", "capabilities"}
	if len(lists) != len(names) {
		t.Fatalf("plan-known-pod-fields has %d attribute lists, want %d (%s)", len(lists), len(names), strings.Join(names, ", "))
	}
	for i, name := range names {
		var rule []string
		for _, q := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(lists[i][1], -1) {
			rule = append(rule, q[1])
		}
		sort.Strings(rule)
		want := schema[name]
		if len(want) == 0 {
			t.Fatalf("the provider's schema has no %s attributes", name)
		}
		for _, k := range want {
			if !slices.Contains(rule, k) {
				t.Errorf("%s: the provider has %q, which plan-known-pod-fields does not list: write the rule that judges it, then list it", name, k)
			}
		}
		for _, k := range rule {
			if !slices.Contains(want, k) {
				t.Errorf("%s: plan-known-pod-fields lists %q, which the provider does not have", name, k)
			}
		}
	}
}

type schemaBlock struct {
	Attributes map[string]json.RawMessage `json:"attributes"`
	BlockTypes map[string]struct {
		Block schemaBlock `json:"block"`
	} `json:"block_types"`
}

func (b schemaBlock) keys() []string {
	var ks []string
	for k := range b.Attributes {
		ks = append(ks, k)
	}
	for k := range b.BlockTypes {
		ks = append(ks, k)
	}
	return ks
}

// podSchemaKeys reads `terraform providers schema -json` and returns, for every pod spec of every resource
// of the kubernetes provider (a block with a container block), the union of the attribute names of the
// pod spec, its security_context, its containers and init containers, their security_context and its
// capabilities.
func podSchemaKeys(t *testing.T, out []byte) map[string][]string {
	t.Helper()
	var doc struct {
		ProviderSchemas map[string]struct {
			ResourceSchemas map[string]struct {
				Block schemaBlock `json:"block"`
			} `json:"resource_schemas"`
		} `json:"provider_schemas"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	sets := map[string]map[string]bool{}
	add := func(name string, keys []string) {
		if sets[name] == nil {
			sets[name] = map[string]bool{}
		}
		for _, k := range keys {
			sets[name][k] = true
		}
	}
	// As plandiff's RuleView finds pod specs: a "spec" block with a container block (not the deprecated
	// template { container } form of a replication controller, which the rules do not read and
	// plan-allowed-types refuses).
	var walk func(name string, b schemaBlock)
	walk = func(name string, b schemaBlock) {
		if c, ok := b.BlockTypes["container"]; ok && name == "spec" && len(c.Block.BlockTypes) > 0 {
			add("pod spec", b.keys())
			if sc, ok := b.BlockTypes["security_context"]; ok {
				add("pod security_context", sc.Block.keys())
			}
			for _, name := range []string{"container", "init_container"} {
				c, ok := b.BlockTypes[name]
				if !ok {
					continue
				}
				add("container", c.Block.keys())
				if sc, ok := c.Block.BlockTypes["security_context"]; ok {
					add("container security_context", sc.Block.keys())
					if caps, ok := sc.Block.BlockTypes["capabilities"]; ok {
						add("capabilities", caps.Block.keys())
					}
				}
			}
		}
		for name, sub := range b.BlockTypes {
			walk(name, sub.Block)
		}
	}
	for addr, p := range doc.ProviderSchemas {
		if !strings.HasSuffix(addr, "hashicorp/kubernetes") {
			continue
		}
		for _, r := range p.ResourceSchemas {
			walk("", r.Block)
		}
	}
	keys := map[string][]string{}
	for name, set := range sets {
		for k := range set {
			keys[name] = append(keys[name], k)
		}
		sort.Strings(keys[name])
	}
	return keys
}
