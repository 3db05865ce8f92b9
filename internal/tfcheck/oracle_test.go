package tfcheck

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
)

// jsonOracle reads a JSON configuration with HCL's own JSON decoder, the one inside Terraform,
// with Terraform's top-level block schema, and reports what the allowlist forbids in it. It is a
// second, independent reading of the JSON rules (bodies as objects or arrays, "//" comments,
// labels): whenever Check accepts a file, the oracle must find nothing.
func jsonOracle(src []byte) []string {
	f, diags := hcljson.Parse(src, "main.tf.json")
	if diags.HasErrors() {
		return nil // Terraform would refuse the file itself
	}
	var found []string
	top, _, _ := f.Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: "terraform"}, {Type: "provider", LabelNames: []string{"name"}},
		{Type: "resource", LabelNames: []string{"type", "name"}}, {Type: "data", LabelNames: []string{"type", "name"}},
		{Type: "module", LabelNames: []string{"name"}}, {Type: "import"}, {Type: "check", LabelNames: []string{"name"}},
		{Type: "removed"}, {Type: "ephemeral", LabelNames: []string{"type", "name"}},
	}})
	for _, b := range top.Blocks {
		switch b.Type {
		case "module", "import", "check", "removed", "ephemeral":
			found = append(found, b.Type+" block")
		case "terraform":
			c, _, _ := b.Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
				{Type: "backend", LabelNames: []string{"type"}}, {Type: "cloud"}, {Type: "provider_meta", LabelNames: []string{"p"}},
			}})
			for _, nb := range c.Blocks {
				found = append(found, nb.Type+" in terraform")
			}
		case "provider":
			if b.Labels[0] != "kubernetes" {
				found = append(found, "provider "+b.Labels[0])
			}
			attrs, _ := b.Body.JustAttributes()
			for name := range attrs {
				if name != "alias" {
					found = append(found, "provider argument or block "+name)
				}
			}
		case "resource", "data":
			if b.Type == "resource" && !resourceTypes[b.Labels[0]] || b.Type == "data" && !dataSourceTypes[b.Labels[0]] {
				found = append(found, b.Type+" "+b.Labels[0])
			}
			found = append(found, oracleResourceBody(b.Body)...)
		}
	}
	return found
}

// oracleResourceBody finds provisioner and connection blocks, and dynamic blocks that generate
// them, as Terraform's resource schema sees them.
func oracleResourceBody(body hcl.Body) []string {
	var found []string
	c, _, _ := body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: "provisioner", LabelNames: []string{"type"}}, {Type: "connection"},
		{Type: "dynamic", LabelNames: []string{"type"}},
	}})
	for _, b := range c.Blocks {
		switch b.Type {
		case "dynamic":
			if forbiddenDynamic(b.Labels[0]) != "" || forbiddenInOpen(b.Labels[0]) != "" {
				found = append(found, "dynamic "+b.Labels[0])
			}
		default:
			found = append(found, b.Type)
		}
	}
	return found
}

// TestJSONOracle runs the oracle on the corpus: the good JSON workspaces are valid Terraform JSON
// in which it finds nothing, and it finds something in every malicious JSON workspace it can read.
func TestJSONOracle(t *testing.T) {
	cases, err := Corpus("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for name, src := range c.Files {
			if !strings.HasSuffix(name, ".tf.json") || len(src) > 64<<10 {
				// HCL's JSON parser has no depth bound: on the 100000-deep case it takes many
				// seconds (the checker refuses that case before any HCL parser sees it).
				continue
			}
			_, diags := hcljson.Parse(src, name)
			found := jsonOracle(src)
			switch {
			case !c.Malicious && diags.HasErrors():
				t.Errorf("%s/%s: not valid Terraform JSON: %v", c.Name, name, diags)
			case !c.Malicious && len(found) > 0:
				t.Errorf("%s/%s: the oracle finds %v", c.Name, name, found)
			case c.Malicious:
				t.Logf("%s/%s: oracle finds %v (HCL errors: %v)", c.Name, name, found, diags.HasErrors())
			}
		}
	}
}

// TestJSONOracleGenerated builds random JSON configurations from the pieces that make HCL's JSON
// rules tricky (arrays for bodies and labels, nulls, "//" keys, escapes, dynamic blocks, the block
// names the allowlist refuses) and checks the oracle finds nothing in each one Check accepts.
func TestJSONOracleGenerated(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	accepted := 0
	for range n {
		src := genTop(rng)
		if Check(map[string][]byte{"main.tf.json": []byte(src)}, testOpts) != nil {
			continue
		}
		accepted++
		if found := jsonOracle([]byte(src)); len(found) > 0 {
			t.Fatalf("accepted, but HCL's JSON decoder finds %v in:\n%s", found, src)
		}
	}
	t.Logf("%d of %d generated configurations accepted", accepted, n)
}

func pick(rng *rand.Rand, xs ...string) string { return xs[rng.IntN(len(xs))] }

// key spells a name plainly or with a \u escape for one of its letters.
func key(rng *rand.Rand, name string) string {
	if name == "" || rng.IntN(3) > 0 {
		return strconv.Quote(name)
	}
	i := rng.IntN(len(name))
	return `"` + name[:i] + fmt.Sprintf(`\u%04x`, name[i]) + name[i+1:] + `"`
}

// many wraps a body as itself, an array of it, or splits it.
func many(rng *rand.Rand, body string) string {
	switch rng.IntN(6) {
	case 0:
		return "[" + body + "]"
	case 1:
		return "[" + body + ", {}]"
	case 2:
		return "[{}, " + body + "]"
	case 3:
		return "[[" + body + "]]"
	case 4:
		return "[[{}, " + body + "]]"
	}
	return body
}

func genTop(rng *rand.Rand) string {
	var parts []string
	for range 1 + rng.IntN(3) {
		switch rng.IntN(7) {
		case 0:
			parts = append(parts, key(rng, "resource")+": "+many(rng, "{"+key(rng, pick(rng, "kubernetes_pod", "null_resource", "//"))+": {"+key(rng, "x")+": "+many(rng, genBody(rng, 0))+"}}"))
		case 1:
			parts = append(parts, key(rng, "data")+": {"+key(rng, pick(rng, "kubernetes_pod", "external"))+": "+many(rng, "{\"x\": "+genBody(rng, 0)+"}")+"}")
		case 2:
			parts = append(parts, key(rng, "provider")+": "+many(rng, "{"+key(rng, pick(rng, "kubernetes", "local"))+": "+many(rng, genProvider(rng))+"}"))
		case 3:
			parts = append(parts, key(rng, "terraform")+": "+many(rng, "{"+key(rng, pick(rng, "required_version", "backend", "cloud", "//"))+": "+pick(rng, `">= 1"`, `{"local": {}}`, `{}`, `null`)+"}"))
		case 4:
			parts = append(parts, key(rng, pick(rng, "module", "check", "import", "removed", "ephemeral"))+": "+pick(rng, `{"m": {"source": "./x"}}`, `{}`, `null`, `[]`))
		case 5:
			parts = append(parts, `"//": `+pick(rng, `"c"`, `{"resource": {"null_resource": {"x": {}}}}`, `null`))
		case 6:
			parts = append(parts, key(rng, "output")+`: {"o": {"value": 1}}`)
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func genProvider(rng *rand.Rand) string {
	switch rng.IntN(6) {
	case 0:
		return `{"alias": "a"}`
	case 1:
		return "{" + key(rng, "exec") + `: {"command": "id"}}`
	case 2:
		return `{"dynamic": {"exec": {"for_each": [], "content": {}}}}`
	case 3:
		return `{"//": {"exec": {}}}`
	}
	return `null`
}

func genBody(rng *rand.Rand, depth int) string {
	var parts []string
	for range rng.IntN(3) {
		name := pick(rng, "provisioner", "connection", "dynamic", "lifecycle", "metadata", "//", "labels", "count")
		var val string
		switch {
		case name == "provisioner":
			val = "{" + key(rng, pick(rng, "local-exec", "file")) + `: {"command": "id"}}`
		case name == "dynamic":
			val = "{" + key(rng, pick(rng, "provisioner", "env", "connection", "lifecycle")) + `: {"for_each": [], "content": ` + genBody(rng, depth+1) + "}}"
		case name == "count":
			val = "1"
		case depth < 3:
			val = many(rng, genBody(rng, depth+1))
		default:
			val = `"v"`
		}
		parts = append(parts, key(rng, name)+": "+val)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// nativeOracle walks a native-syntax file with hclsyntax.VisitAll, which knows nothing of the
// allowlist's structure, and lists what must never be in an accepted file: a function outside the
// allowlist (type constructors aside), terraform.applying, and refused block types anywhere, or
// any block in a provider.
func nativeOracle(src []byte) []string {
	f, diags := hclsyntax.ParseConfig(src, "main.tf", hcl.InitialPos)
	if diags.HasErrors() {
		return nil
	}
	var found []string
	inProvider := map[*hclsyntax.Body]bool{}
	_ = hclsyntax.VisitAll(f.Body.(*hclsyntax.Body), func(n hclsyntax.Node) hcl.Diagnostics {
		switch n := n.(type) {
		case *hclsyntax.Block:
			switch n.Type {
			case "provisioner", "connection", "module", "import", "check", "removed", "ephemeral", "backend", "cloud":
				found = append(found, n.Type+" block")
			case "provider":
				inProvider[n.Body] = true
			}
		case *hclsyntax.Body:
			for _, b := range n.Blocks {
				if inProvider[n] {
					found = append(found, "block "+b.Type+" in provider")
				}
			}
		case *hclsyntax.FunctionCallExpr:
			if !functions[n.Name] && !typeFunctions[n.Name] {
				found = append(found, "function "+n.Name)
			}
		case *hclsyntax.ScopeTraversalExpr:
			if n.Traversal.RootName() == "terraform" && len(n.Traversal) > 1 {
				if a, ok := n.Traversal[1].(hcl.TraverseAttr); ok && a.Name == "applying" {
					found = append(found, "terraform.applying")
				}
			}
		}
		return nil
	})
	return found
}

// TestNativeOracle: the good corpus holds nothing the native oracle finds.
func TestNativeOracle(t *testing.T) {
	cases, err := Corpus("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for name, src := range c.Files {
			if !c.Malicious && strings.HasSuffix(name, ".tf") {
				if found := nativeOracle(src); len(found) > 0 {
					t.Errorf("%s/%s: the oracle finds %v", c.Name, name, found)
				}
			}
		}
	}
}
