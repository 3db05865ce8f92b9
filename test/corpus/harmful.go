package corpus

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/terraform"
)

// The harmful-plan corpus (issue 21): variants of the demo workspace (terraform/k8s-demo) that run no
// program, read no file and use only the kubernetes provider — every one passes the workspace allowlist
// (internal/tfcheck) — and yet deploy something that takes the node or the cluster: a privileged root pod
// with the node's state folder mounted, host namespaces, a mounted token, Secrets in env, RBAC, exposure,
// another image or command, a destroy approved by one person. The allowlist stops code execution inside the
// sandbox; the policy's plan rules (spec.planRules) must stop these, at plan, on the approval screen and in
// the apply sandbox's check container before the credential is used. Each folder of harmful/ is the demo
// plus one change: NAME.patch, a unified diff of the demo's file NAME (applied strictly, see applyPatch);
// main.tf.json, the module in JSON syntax in place of main.tf; any other file, added. And a WHY file:
//
//	<first line: what the attack is>
//	RULES: <plan rules this case exists to prove; the refusal must name at least one>
//	ALSO: <plan rules that may fire too>            (optional)
//	AT: <resource addresses the refusal may name>
//	APPROVALS: <distinct approvers the rule asks>   (optional; only the two-person rule)
//	FLAG: <the line the approval screen must show>
//
//go:embed harmful
var harmfulFS embed.FS

// PlanRules are the names of the plan rules the policy ships (spec.planRules). A harmful case names only
// these, so a renamed rule fails the corpus's own test rather than a live run.
var PlanRules = []string{
	"plan-allowed-types",
	"plan-pods-known-at-plan",
	"plan-values-shown-whole",
	"plan-nothing-hidden",
	"plan-config-known-at-plan",
	"plan-object-known-at-plan",
	"plan-service-known-at-plan",
	"plan-no-binary-data",
	"plan-no-rbac",
	"plan-no-interactive",
	"plan-command-explicit",
	"plan-command-literal",
	"plan-no-code-env",
	"plan-no-privileged",
	"plan-no-privilege-escalation",
	"plan-no-host-namespaces",
	"plan-no-executable-volumes",
	"plan-no-host-path",
	"plan-no-host-ports",
	"plan-no-added-capabilities",
	"plan-capabilities-dropped",
	"plan-no-root-user",
	"plan-no-root-group",
	"plan-no-token-automount",
	"plan-no-secret-env",
	"plan-no-sysctls",
	"plan-no-selinux-override",
	"plan-no-unconfined-profiles",
	"plan-no-probe-host",
	"plan-no-node-placement",
	"plan-no-external-exposure",
	"plan-allowed-images",
	"plan-command-pinned",
	"plan-mounts-pinned",
	"plan-destroy-needs-two-approvers",
}

// TwoApproversRule is the two-person rule: a plan it matches is not refused outright, it needs that many
// distinct approvers.
const TwoApproversRule = "plan-destroy-needs-two-approvers"

// HarmfulPlan is one harmful variant of the demo workspace.
type HarmfulPlan struct {
	// Name is the folder's name under harmful/.
	Name string
	// Why says what the attack is.
	Why string
	// Rules are the plan rules the case exists to prove: a refusal must name at least one of them.
	Rules []string
	// Also are rules that may fire as well (a changed command beside a privileged container); a refusal
	// that names only these does not prove the case.
	Also []string
	// At are the resource addresses a refusal may name.
	At []string
	// Approvals is how many distinct approvers the case's rule asks; 0 for a rule that refuses outright.
	Approvals int
	// Flag is the risk line the approval screen must show for the plan (package plandiff).
	Flag string
	// Files are the workspace's files, name -> content (WHY excluded).
	Files map[string][]byte
}

// Matches reports whether msg is a refusal of this case: it names one of the case's rules and one of its
// resource addresses ("plan refused by rule plan-no-privileged at kubernetes_deployment.web: …"). It
// returns the first of the case's rules that msg names.
func (h HarmfulPlan) Matches(msg string) (rule string, ok bool) {
	for _, r := range h.Rules {
		if containsWord(msg, r) {
			rule = r
			break
		}
	}
	if rule == "" {
		return "", false
	}
	for _, a := range h.At {
		if strings.Contains(msg, a) {
			return rule, true
		}
	}
	return rule, false
}

// containsWord reports whether s holds w not followed by a rule-name character, so that "plan-no-host-path"
// does not match inside "plan-no-host-paths" and "plan-no-privileged" is not found in a longer name.
func containsWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		end := i + j + len(w)
		if end == len(s) || !isRuleChar(s[end]) {
			return true
		}
		i = end
	}
}

func isRuleChar(b byte) bool {
	return b == '-' || b == '_' || ('a' <= b && b <= 'z') || ('0' <= b && b <= '9')
}

// HarmfulPlans reads the harmful-plan corpus, sorted by name.
func HarmfulPlans() ([]HarmfulPlan, error) {
	entries, err := fs.ReadDir(harmfulFS, "harmful")
	if err != nil {
		return nil, fmt.Errorf("harmful plans: %w", err)
	}
	var out []HarmfulPlan
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		h, err := readHarmful(path.Join("harmful", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("harmful plan %s: %w", e.Name(), err)
		}
		h.Name = e.Name()
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b HarmfulPlan) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func readHarmful(dir string) (HarmfulPlan, error) {
	demo, err := terraform.DemoFiles()
	if err != nil {
		return HarmfulPlan{}, fmt.Errorf("the demo workspace: %w", err)
	}
	h := HarmfulPlan{Files: demo}
	entries, err := fs.ReadDir(harmfulFS, dir)
	if err != nil {
		return h, err
	}
	for _, e := range entries {
		if e.IsDir() {
			return h, fmt.Errorf("unexpected folder %s", e.Name())
		}
		b, err := fs.ReadFile(harmfulFS, path.Join(dir, e.Name()))
		if err != nil {
			return h, err
		}
		if e.Name() != "WHY" {
			if err := h.change(e.Name(), b); err != nil {
				return h, err
			}
			continue
		}
		for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			line = strings.TrimSpace(line)
			if i == 0 {
				h.Why = line
				continue
			}
			key, val, ok := strings.Cut(line, ":")
			if !ok {
				return h, fmt.Errorf("WHY line %d: no KEY: value", i+1)
			}
			val = strings.TrimSpace(val)
			switch key {
			case "RULES":
				h.Rules = strings.Fields(val)
			case "ALSO":
				h.Also = strings.Fields(val)
			case "AT":
				h.At = strings.Fields(val)
			case "FLAG":
				h.Flag = val
			case "APPROVALS":
				if h.Approvals, err = strconv.Atoi(val); err != nil {
					return h, fmt.Errorf("WHY APPROVALS: %w", err)
				}
			default:
				return h, fmt.Errorf("WHY line %d: unknown key %q", i+1, key)
			}
		}
	}
	switch {
	case h.Why == "":
		return h, fmt.Errorf("no WHY file")
	case len(h.Rules) == 0:
		return h, fmt.Errorf("WHY has no RULES: line")
	case len(h.At) == 0:
		return h, fmt.Errorf("WHY has no AT: line")
	case h.Flag == "":
		return h, fmt.Errorf("WHY has no FLAG: line")
	}
	return h, nil
}

// The demo's one-line edit (terraform/k8s-demo/main.tf, test/demo): the track label of the Deployment, part
// of its selector, "stable" in the repository.
var (
	trackHCL   = regexp.MustCompile(`(?m)^(\s*track\s*=\s*)"stable"`)
	trackJSON  = regexp.MustCompile(`("track":\s*)"stable"`)
	trackValue = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// OnTrack returns the case for a demo whose live Deployment runs track (after the demo's edit, "canary"):
// the same attack on the workspace as it now stands, so that its plan changes what the attack changes and
// not also the selector (which would replace the Deployment and bring in the two-person rule).
func (h HarmfulPlan) OnTrack(track string) (HarmfulPlan, error) {
	if track == "stable" {
		return h, nil
	}
	if !trackValue.MatchString(track) || len(track) > 63 {
		return h, fmt.Errorf("track %q is not a label value", track)
	}
	files := make(map[string][]byte, len(h.Files))
	found := false
	for n, b := range h.Files {
		re := trackHCL
		if strings.HasSuffix(n, ".json") {
			re = trackJSON
		}
		if re.Match(b) {
			found = true
			b = re.ReplaceAll(b, []byte(`${1}"`+track+`"`))
		}
		files[n] = b
	}
	if !found {
		return h, fmt.Errorf("harmful plan %s: no track \"stable\" to change", h.Name)
	}
	h.Files = files
	return h, nil
}

// change applies one file of a case's folder to the demo's files: NAME.patch is a unified diff of the demo's
// NAME; NAME.tf.json stands in for the demo's NAME.tf (the same module in JSON syntax, which Terraform would
// otherwise load beside it); any other file is added to the workspace.
func (h *HarmfulPlan) change(name string, b []byte) error {
	if target, ok := strings.CutSuffix(name, ".patch"); ok {
		old, ok := h.Files[target]
		if !ok {
			return fmt.Errorf("%s: the demo workspace has no %s", name, target)
		}
		out, err := applyPatch(string(old), string(b))
		if err != nil {
			return fmt.Errorf("%s does not apply to terraform/k8s-demo/%s: %w", name, target, err)
		}
		if out == string(old) {
			return fmt.Errorf("%s changes nothing", name)
		}
		h.Files[target] = []byte(out)
		return nil
	}
	if _, ok := h.Files[name]; ok {
		return fmt.Errorf("%s: the demo workspace has one already; write the change as %s.patch", name, name)
	}
	if hcl, ok := strings.CutSuffix(name, ".json"); ok {
		delete(h.Files, hcl)
	}
	h.Files[name] = b
	return nil
}
