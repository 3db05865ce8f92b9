// Command mutate-exactness proves that the webhook's unit tests notice when a comparison of the exactness
// check (webhook/expect.go, diff.go), a check of the decision around it (job.go, pod.go), or a condition of
// the caches that make that decision fast (rendering.go, cel/reads.go), is
// removed or weakened. Each mutation below edits one comparison so that the check accepts more; the mutated
// file is handed to `go test -overlay`, which builds with it instead of the file on disk, so the tree is
// never modified, not even for a moment; on Ctrl-C only the temporary directory is left, and it is removed.
// A mutation the tests do not notice (SURVIVED) is a comparison no test holds the webhook to: an attacker's
// object that only this comparison stops would go unnoticed if it regressed.
//
// Usage (from anywhere in the module):
//
//	go run ./scripts/mutate-exactness [-run regexp] [-v] [-list] [-sample N [-seed S]] [-budget 150s]
//	make mutate-exactness MUTATE_FLAGS='-run ^cache/ -v'
//
// The whole table takes most of an hour on two cores. CI (scripts/test.sh) runs a bounded sample:
// -sample draws N mutations with -seed (by default today's date, so that successive days cover the table;
// the seed is printed, and -seed reproduces the draw), and -budget starts no mutation once the time is
// spent, naming the ones it left out. Within the sample and the budget every mutation must be killed.
//
// Before mutating, every snippet must occur exactly once in its file (a stale table is an error, not a
// pass), and the unmutated tests must pass. The mutations run one after another (one go test at a time,
// 8 to 40 s each, depending on the load); go test reads the other files of the package from disk, so do not edit them meanwhile.
// A few mutations are accepted as equivalent: they cannot change what is admitted, for the reason the table
// gives. They run like the others and are reported as EQUIV when they survive.
//
// Exit status: 0 when every mutation is killed (or accepted as equivalent), 1 when one survives (or does
// not compile), 2 when the table or the baseline is broken or the run was interrupted.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// edit replaces old, which must occur exactly once in the file, by new.
type edit struct{ old, new string }

type mutation struct {
	name  string // short and unique; -run selects by it
	file  string // relative to the module root
	desc  string // which comparison it removes or weakens
	edits []edit
	// equivalent, when set, says why the mutation cannot change what is admitted. It is run all the
	// same; its survival is reported as EQUIV and accepted, not counted as a hole.
	equivalent string
}

func mut(name, file, desc string, edits ...edit) mutation {
	return mutation{name: name, file: file, desc: desc, edits: edits}
}

// equiv is a mutation accepted as equivalent, for the reason given.
func equiv(name, file, desc, reason string, edits ...edit) mutation {
	return mutation{name: name, file: file, desc: desc, edits: edits, equivalent: reason}
}

func e(old, new string) edit { return edit{old, new} }

const (
	expectGo    = "webhook/expect.go"
	diffGo      = "webhook/diff.go"
	checkerGo   = "webhook/checker.go"
	renderingGo = "webhook/rendering.go"
	celReadsGo  = "cel/reads.go"
	jobGo       = "webhook/job.go"
	podGo       = "webhook/pod.go"
)

// helperFileInTree is where the overlay puts helpers; no such file exists in the tree.
const helperFileInTree = "webhook/zz_mutation_helpers.go"

// helpers is added to the package under test (as a new file of the overlay) so that a mutation can say
// "take whatever the admitted object has here" in a few words: mutationGot(obj, "spec", "selector").
const helpers = `package webhook

// mutationGot returns the value at path (map keys and list indexes) in v, or nil.
func mutationGot(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}
`

// mutations weaken each comparison of the exactness check in turn: the mutated check accepts an object
// the real one refuses. Mutations that cannot change what is admitted are not listed; they are named in
// the comments where they would be.
var mutations = []mutation{
	// exactJob: what the API server adds to a new Job is derived from the Job's own UID and name.
	mut("job/uid", expectGo, "a Job without a UID is compared (its selector would be derived from the empty UID)",
		e(`if uid == "" {`, `if false {`)),
	mut("job/selector", expectGo, "the Job's selector is not compared with the one generated from its UID",
		e(`spec["selector"] = map[string]any{"matchLabels": map[string]any{labelControllerUID: uid}}`,
			`spec["selector"] = mutationGot(got, "spec", "selector")`)),
	mut("job/manual-selector", expectGo, "spec.manualSelector may be anything",
		e(`spec["manualSelector"] = false`, `spec["manualSelector"] = mutationGot(got, "spec", "manualSelector")`)),
	mut("job/template-controller-uid", expectGo, "the template's controller-uid label may name any Job",
		e(`labels[labelControllerUID], labels[labelJobName] = uid, name`,
			`labels[labelControllerUID], labels[labelJobName] = mutationGot(got, "spec", "template", "metadata", "labels", labelControllerUID), name`)),
	mut("job/template-job-name", expectGo, "the template's job-name label may name any Job",
		e(`labels[labelControllerUID], labels[labelJobName] = uid, name`,
			`labels[labelControllerUID], labels[labelJobName] = uid, mutationGot(got, "spec", "template", "metadata", "labels", labelJobName)`)),
	mut("job/template-legacy-controller-uid", expectGo, "the template's legacy controller-uid label may name any Job",
		e(`labels[labelLegacyControllerUID], labels[labelLegacyJobName] = uid, name`,
			`labels[labelLegacyControllerUID], labels[labelLegacyJobName] = mutationGot(got, "spec", "template", "metadata", "labels", labelLegacyControllerUID), name`)),
	mut("job/template-legacy-job-name", expectGo, "the template's legacy job-name label may name any Job",
		e(`labels[labelLegacyControllerUID], labels[labelLegacyJobName] = uid, name`,
			`labels[labelLegacyControllerUID], labels[labelLegacyJobName] = uid, mutationGot(got, "spec", "template", "metadata", "labels", labelLegacyJobName)`)),
	mut("job/status", expectGo, "a new Job may carry a status",
		e(`if st, ok := g["status"]; ok && !isEmpty(st) {`, `if st, ok := g["status"]; ok && !isEmpty(st) && false {`)),
	mut("job/diff", expectGo, "the Job is not compared with its rendering at all",
		e("if m := diff(\"\", g, w); m != nil {\n\t\treturn deny(exactRule(\"Job\"", "if m := (*Mismatch)(nil); m != nil {\n\t\treturn deny(exactRule(\"Job\"")),

	// exactPod: the Pod is its Job's template plus what the Job controller and the admission plugins add.
	mut("pod/name-prefix", expectGo, "the Pod's name need not start with its Job's name",
		e(`if !strings.HasPrefix(name, prefix) {`, `if false {`)),
	mut("pod/generate-name", expectGo, "the Pod's generateName may be anything",
		e(`wantMeta["generateName"] = prefix`, `wantMeta["generateName"] = meta["generateName"]`)),
	mut("pod/namespace", expectGo, "the Pod may be in another namespace than its Job",
		e(`wantMeta["namespace"] = owner.Namespace`, `wantMeta["namespace"] = meta["namespace"]`)),
	mut("pod/label-controller-uid", expectGo, "the Pod's controller-uid label may name any Job",
		e(`labels[labelControllerUID], labels[labelJobName] = uid, owner.Name`,
			`labels[labelControllerUID], labels[labelJobName] = mutationGot(meta, "labels", labelControllerUID), owner.Name`)),
	mut("pod/label-job-name", expectGo, "the Pod's job-name label may name any Job",
		e(`labels[labelControllerUID], labels[labelJobName] = uid, owner.Name`,
			`labels[labelControllerUID], labels[labelJobName] = uid, mutationGot(meta, "labels", labelJobName)`)),
	mut("pod/label-legacy-controller-uid", expectGo, "the Pod's legacy controller-uid label may name any Job",
		e(`labels[labelLegacyControllerUID], labels[labelLegacyJobName] = uid, owner.Name`,
			`labels[labelLegacyControllerUID], labels[labelLegacyJobName] = mutationGot(meta, "labels", labelLegacyControllerUID), owner.Name`)),
	mut("pod/label-legacy-job-name", expectGo, "the Pod's legacy job-name label may name any Job",
		e(`labels[labelLegacyControllerUID], labels[labelLegacyJobName] = uid, owner.Name`,
			`labels[labelLegacyControllerUID], labels[labelLegacyJobName] = uid, mutationGot(meta, "labels", labelLegacyJobName)`)),
	mut("pod/owner-api-version-kind", expectGo, "the owner reference's apiVersion and kind may be anything",
		e(`"apiVersion": "batch/v1", "kind": "Job", "name": owner.Name, "uid": uid,`,
			`"apiVersion": mutationGot(meta, "ownerReferences", 0, "apiVersion"), "kind": mutationGot(meta, "ownerReferences", 0, "kind"), "name": owner.Name, "uid": uid,`)),
	mut("pod/owner-name", expectGo, "the owner reference may name any Job",
		e(`"apiVersion": "batch/v1", "kind": "Job", "name": owner.Name, "uid": uid,`,
			`"apiVersion": "batch/v1", "kind": "Job", "name": mutationGot(meta, "ownerReferences", 0, "name"), "uid": uid,`)),
	mut("pod/owner-uid", expectGo, "the owner reference may carry any UID",
		e(`"apiVersion": "batch/v1", "kind": "Job", "name": owner.Name, "uid": uid,`,
			`"apiVersion": "batch/v1", "kind": "Job", "name": owner.Name, "uid": mutationGot(meta, "ownerReferences", 0, "uid"),`)),
	mut("pod/owner-controller", expectGo, "the owner reference need not mark the Job as the Pod's controller",
		e(`"controller": true, "blockOwnerDeletion": true,`, `"controller": mutationGot(meta, "ownerReferences", 0, "controller"), "blockOwnerDeletion": true,`)),
	mut("pod/owner-block-deletion", expectGo, "the owner reference need not block the Job's deletion",
		e(`"controller": true, "blockOwnerDeletion": true,`, `"controller": true, "blockOwnerDeletion": mutationGot(meta, "ownerReferences", 0, "blockOwnerDeletion"),`)),
	mut("pod/finalizers", expectGo, "the Pod may carry any finalizers",
		e(`wantMeta["finalizers"] = []any{finalizerJobTracking}`, `wantMeta["finalizers"] = meta["finalizers"]`)),
	mut("pod/priority", expectGo, "the Pod may have any priority",
		e(`spec["priority"] = int64(0)`, `spec["priority"] = gspec["priority"]`)),
	mut("pod/preemption-policy", expectGo, "the Pod may have any preemption policy",
		e(`spec["preemptionPolicy"] = string(corev1.PreemptLowerPriority)`, `spec["preemptionPolicy"] = gspec["preemptionPolicy"]`)),
	mut("pod/tolerations", expectGo, "the Pod may have any tolerations",
		e(`spec["tolerations"] = withDefaultTolerations(spec["tolerations"], gspec["tolerations"])`, `spec["tolerations"] = gspec["tolerations"]`)),
	mut("pod/diff", expectGo, "the Pod is not compared with its Job's rendering at all",
		e("if m := diff(\"\", g, w); m != nil {\n\t\treturn deny(exactRule(\"Pod\"", "if m := (*Mismatch)(nil); m != nil {\n\t\treturn deny(exactRule(\"Pod\"")),

	// withDefaultTolerations: only the DefaultTolerationSeconds plugin's two tolerations are added.
	mut("tolerations/key", expectGo, "a default toleration may tolerate any taint key",
		e(`(key == "node.kubernetes.io/not-ready" || key == "node.kubernetes.io/unreachable")`, `len(key) >= 0`)),
	mut("tolerations/operator", expectGo, "a default toleration may use any operator",
		e(`m["operator"] == "Exists"`, `true`)),
	mut("tolerations/effect", expectGo, "a default toleration may tolerate any effect",
		e(`m["effect"] == "NoExecute"`, `true`)),
	mut("tolerations/no-other-fields", expectGo, "a default toleration may carry other fields",
		e(` && len(m) == 4`, ``)),
	mut("tolerations/seconds", expectGo, "a default toleration need not be limited in time",
		e(`if _, ok := number(m["tolerationSeconds"]); ok {`, `if true {`)),

	// withoutServerFields: dropping a field from serverMetadata only refuses more; adding one that the
	// rendering does not set (or that an UPDATE must not change) admits more.
	mut("server-fields/labels", expectGo, "labels are treated as the API server's (not compared on UPDATE)",
		e(`"managedFields", "selfLink"}`, `"managedFields", "selfLink", "labels"}`)),
	mut("server-fields/annotations", expectGo, "annotations are treated as the API server's (not compared on UPDATE)",
		e(`"managedFields", "selfLink"}`, `"managedFields", "selfLink", "annotations"}`)),
	mut("server-fields/owner-references", expectGo, "ownerReferences are treated as the API server's",
		e(`"managedFields", "selfLink"}`, `"managedFields", "selfLink", "ownerReferences"}`)),
	mut("server-fields/finalizers", expectGo, "finalizers are treated as the API server's",
		e(`"managedFields", "selfLink"}`, `"managedFields", "selfLink", "finalizers"}`)),
	mut("server-fields/generate-name", expectGo, "generateName is treated as the API server's",
		e(`"managedFields", "selfLink"}`, `"managedFields", "selfLink", "generateName"}`)),
	mut("server-fields/deletion-timestamp", expectGo, "deletionTimestamp is treated as the API server's",
		e(`"managedFields", "selfLink"}`, `"managedFields", "selfLink", "deletionTimestamp"}`)),

	// diff: every branch.
	mut("diff/extra-key", diffGo, "a field the rendering does not have is accepted",
		e(`return &Mismatch{Path: d.at(k), Got: describe(gv)}`, `return nil`)),
	mut("diff/map-values", diffGo, "the values under an object's keys are not compared, only which keys there are",
		e(`if m := d.diff(gv, wv); m != nil {`, `if m := d.diff(gv, wv); m != nil && false {`)),
	mut("diff/missing-key", diffGo, "a field the rendering has may be left out",
		e(`if _, ok := g[k]; !ok && !isEmpty(wv) {`, `if _, ok := g[k]; !ok && !isEmpty(wv) && false {`)),
	mut("diff/not-a-map", diffGo, "anything (null, a string) stands in for a rendered object",
		e("if !ok {\n\t\t\treturn &Mismatch{Path: d.at(\"\"), Got: describe(got), Want: describe(want)}", "if !ok {\n\t\t\treturn nil")),
	// The first, unordered run decides whether there is a difference at all; the ordered run only names it.
	mut("diff/unordered-extra", diffGo, "the unordered run does not look for fields the rendering lacks",
		e(`for k, gv := range g {`, `for k, gv := range map[string]any{} {`)),
	mut("diff/unordered-missing", diffGo, "the unordered run does not look for rendered fields the object lacks",
		e(`for k, wv := range w {`, `for k, wv := range map[string]any{} {`)),
	mut("diff/null-list", diffGo, "null stands in for a rendered non-empty list",
		e(`if got == nil && len(w) == 0 {`, `if got == nil {`)),
	mut("diff/list-longer", diffGo, "a list may have more items than the rendering",
		e("case i >= len(w):\n\t\t\t\treturn &Mismatch{Path: d.at(\"\"), Got: describe(g[i])}", "case i >= len(w):\n\t\t\t\treturn nil")),
	mut("diff/list-shorter", diffGo, "a list may have fewer items than the rendering",
		e("case i >= len(g):\n\t\t\t\treturn &Mismatch{Path: d.at(\"\"), Want: describe(w[i])}", "case i >= len(g):\n\t\t\t\treturn nil")),
	mut("diff/list-items", diffGo, "the items of a list are not compared, only the list's length",
		e(`if m := d.diff(g[i], w[i]); m != nil {`, `if m := d.diff(g[i], w[i]); m != nil && false {`)),
	mut("diff/null-scalar", diffGo, "null (or {} or []) stands in for a rendered value",
		e(`if want == nil && isEmpty(got) {`, `if isEmpty(got) {`)),
	mut("diff/string-prefix", diffGo, "a string equals the rendered one when it merely starts with it",
		e("\treturn a == b\n}", "\tif as, ok := a.(string); ok {\n\t\tif bs, ok := b.(string); ok {\n\t\t\treturn strings.HasPrefix(as, bs)\n\t\t}\n\t}\n\treturn a == b\n}")),
	mut("diff/bool-value", diffGo, "any bool equals any other (true for false)",
		e("\treturn a == b\n}", "\tif _, ok := a.(bool); ok {\n\t\treturn true\n\t}\n\treturn a == b\n}")),
	mut("diff/number-value", diffGo, "any number equals any other",
		e(`return ok && af == bf`, `return ok && (af == bf || af != bf)`)),
	mut("diff/empty-false", diffGo, "false counts as empty (an extra or missing false is ignored)",
		e("case nil:\n\t\treturn true\n", "case nil:\n\t\treturn true\n\tcase bool:\n\t\treturn !x\n")),
	mut("diff/empty-zero", diffGo, "0 counts as empty (an extra or missing 0 is ignored)",
		e("case nil:\n\t\treturn true\n", "case nil:\n\t\treturn true\n\tcase int64:\n\t\treturn x == 0\n")),
	mut("diff/empty-list-of-one", diffGo, "a list of one item counts as empty",
		e("case []any:\n\t\treturn len(x) == 0", "case []any:\n\t\treturn len(x) <= 1")),
	mut("diff/empty-map-of-one", diffGo, "an object with one field counts as empty",
		e("case map[string]any:\n\t\treturn len(x) == 0", "case map[string]any:\n\t\treturn len(x) <= 1")),

	// The rendering cache (rendering.go, job.go) and the verdict cache (cel.SameRenderedFields): what a
	// cached rendering or verdict is keyed by, and when it may be reused. A mutation here must change a
	// decision that TestCacheNeverChangesADecision and its neighbours hold.
	mut("cache/key-params", jobGo, "renderings are cached per tool and tokens, not per parameters",
		e(`key := renderKey{tool: labels[contract.LabelTool], params: annotations[contract.AnnotationParams], tokens:`, `key := renderKey{tool: labels[contract.LabelTool], tokens:`)),
	mut("cache/key-tokens", jobGo, "renderings are cached per tool and parameters, not per approval tokens",
		e(`tokens: annotations[contract.AnnotationApprovalToken]}`, `}`)),
	mut("cache/reload", checkerGo, "a policy reload keeps the renderings of the old policy",
		e(`c.renderings.policy, c.renderings.lru = p, lru.New(maxRenderings)`, `c.renderings.policy = p
	if c.renderings.lru == nil {
		c.renderings.lru = lru.New(maxRenderings)
	}`)),
	mut("cache/get-policy", renderingGo, "a decision under an older policy reads the new policy's renderings",
		e(`if r.policy != p || r.lru == nil {`, `if r.lru == nil {`)),
	mut("cache/put-policy", renderingGo, "a decision under an older policy puts its rendering in the new policy's cache",
		e(`if r.policy == p && r.lru != nil {`, `if r.lru != nil {`)),
	// The two below are equivalent today: forRequest puts in every field that the request ID and the audit
	// head reach in today's rendering (TestForRequestIsTheRendering), so every rendering passes the check.
	// It guards against a rendering that one day puts them elsewhere.
	equiv("cache/put-only-cacheable", jobGo, "a rendering whose request-free part is not shown exact is cached all the same",
		"every rendering of today's renderer is shown exact",
		e(`renderErr = newRendering(p, inv, requestID, token, head); cacheable {`, `renderErr = newRendering(p, inv, requestID, token, head); cacheable || r != nil {`)),
	equiv("cache/self-check", renderingGo, "a rendering is cached without checking forRequest against a second rendering",
		"every rendering of today's renderer is shown exact",
		e(`return r, reflect.DeepEqual(r.forRequest(otherID, otherHead), other), nil`, `return r, reflect.DeepEqual(other, other), nil`)),
	mut("cache/name", renderingGo, "a cached rendering keeps the name of the request it was rendered for",
		e(`meta["name"] = sandbox.JobName(r.inv.Tool.Name, requestID)`, `_ = sandbox.JobName`)),
	mut("cache/name-from-request", renderingGo, "a Job named after its approval tokens is renamed after its request ID",
		e(`nameFromRequest: tokens == ""}`, `nameFromRequest: true}`)),
	mut("cache/request-label", renderingGo, "a cached rendering keeps the request-ID label of the request it was rendered for",
		e(`cloneMember(meta, "labels")[contract.LabelRequestID] = requestID`, `cloneMember(meta, "labels")`)),
	mut("cache/template-request-label", renderingGo, "a cached rendering keeps the pod template's request-ID label of the request it was rendered for",
		e(`cloneMember(tmeta, "labels")[contract.LabelRequestID] = requestID`, `cloneMember(tmeta, "labels")`)),
	mut("cache/audit-head", renderingGo, "a cached rendering keeps the audit head of the request it was rendered for",
		e(`ann[contract.AnnotationAuditHead] = head`, `_ = ann`)),
	mut("cache/same-request", renderingGo, "a cached rendering is reused as is when only the audit head differs",
		e(`if requestID == r.requestID && head == r.head {`, `if requestID == r.requestID {`)),
	mut("cache/verdict-rules-read-only", jobGo, "the cached verdict is reused even when the rules read per-Job fields",
		e(`op == "CREATE" && p.Rules.ReadsOnlyRenderedFields() &&`, `op == "CREATE" &&`)),
	mut("cache/verdict-same-fields", jobGo, "the cached verdict is reused for a Job that differs from the rendering in what the rules read",
		e(`&& cel.SameRenderedFields(obj, want)`, ``)),
	mut("cache/verdict-pure", jobGo, "a verdict from an evaluation that was stopped is kept for the rendering",
		e(`if reuse && pure(vs) {`, `if reuse {`)),
	mut("cache/same-spec", celReadsGo, "the verdict cache ignores the Job's spec",
		e(`if !sameExcept(as, bs, "selector", "template") {`, `if false {`)),
	mut("cache/same-template-spec", celReadsGo, "the verdict cache ignores the pod spec",
		e(`return sameMember(at, bt, "spec") && sameMember(am, bm, "annotations")`, `return sameMember(am, bm, "annotations") || (len(at) >= 0 && len(bt) < 0)`)),
	mut("cache/same-annotations", celReadsGo, "the verdict cache ignores the pod template's annotations",
		e(`return sameMember(at, bt, "spec") && sameMember(am, bm, "annotations")`, `return sameMember(at, bt, "spec") || (len(am) >= 0 && len(bm) < 0)`)),
	equiv("cache/same-presence", celReadsGo, "the verdict cache takes a member set to null for one left out",
		"the members compared by name (apiVersion, kind, spec, the template's spec, its annotations) are in every rendering, and below them an object with one more member, null or not, differs in length",
		e(`return aok == bok && same(av, bv)`, `return (aok == bok || true) && same(av, bv)`)),
	mut("cache/same-number-type", celReadsGo, "the verdict cache takes a double for the int of the same value",
		e("case float64:\n\t\ty, ok := b.(float64)\n\t\treturn ok && x == y", "case float64:\n\t\ty, ok := b.(int64)\n\t\treturn ok && x == float64(y)")),
	// Not listed: taking null for an empty list or object (a rendering has none: the converter leaves
	// empty members out, and a member one side lacks is told apart by its presence).

	// CheckJob and checkUpdate (job.go): the decisions around the comparison.
	mut("decide/job-update", jobGo, "an UPDATE of a Job is not checked",
		e(`return checkUpdate("Job", obj, old, false)`, `return &Decision{}, nil`)),
	mut("decide/job-request-id", jobGo, "a Job's request-ID label need not hold a request ID",
		e(`if !approval.ValidRequestID(requestID) {`, `if !approval.ValidRequestID(requestID) && false {`)),
	mut("decide/job-rules", jobGo, "the policy's CEL rules are not evaluated on a Job",
		e(`if err := c.jobRules(ctx, p, obj, req.Operation, r, full); err != nil {`, `if err := c.jobRules(ctx, p, obj, req.Operation, r, full); err != nil && false {`)),
	mut("decide/job-token-on-read-tool", jobGo, "a tool that takes no approval may carry a token",
		e(`if token != "" && !inv.Tool.RequiresApproval {`, `if false {`)),
	mut("decide/job-exact", jobGo, "the Job is not compared with its rendering",
		e(`if err := compareJob(obj, full); err != nil {`, `if err := compareJob(obj, full); err != nil && false {`)),
	// Not listed: ignoring exactErr or renderErr (both leave no expected tree, and the comparison with none
	// refuses every Job).
	mut("decide/job-approval", jobGo, "a Job that needs approval is admitted without checking its token",
		e(`if inv.Tool.RequiresApproval {`, `if false {`)),
	mut("decide/job-audit-head", jobGo, "a Job's audit chain head is not checked",
		e(`if err := checkHead(rules.ExactMetadata, "annotation "+contract.AnnotationAuditHead, head); err != nil {`, `if err := error(nil); err != nil {`)),
	mut("decide/job-anchor", jobGo, "an admitted Job's audit anchor is not recorded",
		e(`if err := c.recordAnchor(ctx, req, inv.Tool, requestID, head, job, claimedPod{}); err != nil {`, `if err := error(nil); err != nil {`)),
	mut("decide/job-record", jobGo, "an admitted Job's UID is not recorded, so its Pod is refused as a Job made in a gap",
		e(`return c.recordJob(ctx, req, uid, inv.Tool.Deadline.Duration)`, `return nil`)),
	mut("decide/job-admit", jobGo, "a Job is admitted without its approval being consumed or its audit anchor recorded",
		e(`if err := c.admitCall(ctx, req, d, p, inv, token, requestID, head, jobName(want), obj.uid()); err != nil {`, `if err := error(nil); err != nil {`)),
	mut("decide/update-without-old", jobGo, "an UPDATE without the old object is admitted",
		e(`return nil, deny(rules.Immutable, "an UPDATE without the old object cannot be checked")`, `return &Decision{}, nil`)),
	mut("decide/update-diff", jobGo, "an UPDATE may change anything but finalizers",
		e(`if m := diff("", g, o); m != nil {`, `if m := diff("", g, o); m != nil && false {`)),
	equiv("decide/update-orphan-job", jobGo, "a Job's UPDATE may drop its owner references, as a Pod's may",
		"a sandbox Job is admitted without owner references (exactJob), so it has none to drop",
		e(`kind == "Pod" && isEmpty(refs)`, `isEmpty(refs)`)),
	mut("decide/update-finalizers", jobGo, "an UPDATE may add any finalizer",
		e(`if !was[f] && !gcFinalizers[f] {`, `if false {`)),
	mut("decide/update-labels", jobGo, "labels may change after admission, as finalizers may",
		e(`[]string{"finalizers", "deletionTimestamp", "deletionGracePeriodSeconds"}`, `[]string{"finalizers", "deletionTimestamp", "deletionGracePeriodSeconds", "labels"}`)),

	// CheckPod (pod.go): one admitted Job makes one Pod, once.
	mut("decide/pod-update", podGo, "an UPDATE of a Pod is not checked",
		e(`return checkUpdate("Pod", obj, old, contains(orDefault(c.Identities.GCUsers, DefaultGCUsers), req.User))`, `return &Decision{}, nil`)),
	mut("decide/pod-creator", podGo, "anyone, not only the Job controller, may create a sandbox Pod",
		e(`if !contains(users, req.User) {`, `if false {`)),
	mut("decide/pod-owner-uid", podGo, "the owner reference's UID need not be the owner Job's",
		e(`if string(job.UID) != ownerUID {`, `if false {`)),
	mut("decide/pod-runnable", podGo, "a Pod may be made for a suspended, finished or deleted Job",
		e(`if err := runnable(job); err != nil {`, `if err := runnable(job); err != nil && false {`)),
	mut("decide/pod-job-deleted", podGo, "a Pod may be made for a Job being deleted",
		e(`case job.DeletionTimestamp != nil:`, `case false:`)),
	mut("decide/pod-job-suspended", podGo, "a Pod may be made for a suspended Job",
		e(`case job.Spec.Suspend != nil && *job.Spec.Suspend:`, `case false:`)),
	mut("decide/pod-job-complete", podGo, "a Pod may be made for a Job that completed",
		e(`case batchv1.JobComplete, batchv1.JobFailed,`, `case batchv1.JobFailed,`)),
	mut("decide/pod-job-failed", podGo, "a Pod may be made for a Job that failed",
		e(`batchv1.JobComplete, batchv1.JobFailed, batchv1.JobFailureTarget,`, `batchv1.JobComplete, batchv1.JobFailureTarget,`)),
	mut("decide/pod-job-failure-target", podGo, "a Pod may be made for a Job marked to fail",
		e(`batchv1.JobFailed, batchv1.JobFailureTarget, batchv1.JobSuccessCriteriaMet:`, `batchv1.JobFailed, batchv1.JobSuccessCriteriaMet:`)),
	mut("decide/pod-job-success-criteria", podGo, "a Pod may be made for a Job that met its success criteria",
		e(`batchv1.JobFailureTarget, batchv1.JobSuccessCriteriaMet:`, `batchv1.JobFailureTarget:`)),
	mut("decide/pod-rules", podGo, "the policy's CEL rules are not evaluated on a Pod",
		e(`if err := c.evaluate(ctx, p, obj, "Pod", req.Operation); err != nil {`, `if err := c.evaluate(ctx, p, obj, "Pod", req.Operation); err != nil && false {`)),
	mut("decide/pod-owner-name", podGo, "the owner Job need not be named after its rendering",
		e(`if want.Name != job.Name {`, `if false {`)),
	mut("decide/pod-exact", podGo, "the Pod is not compared with its owner's rendering",
		e(`if err := exactPod(obj, want, job); err != nil {`, `if err := exactPod(obj, want, job); err != nil && false {`)),
	mut("decide/pod-ledger", podGo, "the Pod is not recorded: a second Pod for the Job is admitted",
		e(`if !req.DryRun {`, `if false {`)),
	mut("decide/pod-no-ledger", podGo, "without a Pod ledger the Pod is admitted unrecorded",
		e(`return nil, deny(rules.OnePodPerJob, "the webhook has no Pod ledger, so it cannot guarantee one Pod per Job")`, `return &Decision{}, nil`)),
	equiv("decide/pod-second", podGo, "ledger.ErrSecondPod is not told apart from other ledger errors",
		"every ledger error refuses the Pod under the same rule; only the message differs",
		e(`case errors.Is(err, ledger.ErrSecondPod):`, `case errors.Is(err, ledger.ErrSecondPod) && false:`)),
	mut("decide/pod-ledger-error", podGo, "a ledger that cannot record lets the Pod through",
		e("case err != nil:\n\t\t\treturn nil, deny(rules.OnePodPerJob, \"cannot record the Pod", "case false:\n\t\t\treturn nil, deny(rules.OnePodPerJob, \"cannot record the Pod")),
	mut("decide/pod-job-admitted", podGo, "a Pod is admitted for a Job the webhook never admitted (made in a registration gap)",
		e(`if err := c.jobAdmitted(ctx, job); err != nil {`, `if err := c.jobAdmitted(ctx, job); err != nil && false {`)),
	mut("decide/pod-job-unrecorded", podGo, "a Job missing from the Pod ledger counts as admitted",
		e(`case !ok:
		return deny(rules.OwnerJob, "the webhook never admitted Job`, `case !ok && false:
		return deny(rules.OwnerJob, "the webhook never admitted Job`)),
	equiv("decide/pod-owner-controller", podGo, "any owner reference names the owner Job, not only the controller's",
		"exactPod compares the whole ownerReferences list with the one rendered from the owner Job",
		e(`if c, _ := m["controller"].(bool); !c {`, `if false {`)),
	equiv("decide/pod-owner-kind", podGo, "an owner reference of any kind names the owner Job",
		"exactPod compares the whole ownerReferences list with the one rendered from the owner Job",
		e(`if m["apiVersion"] != "batch/v1" || m["kind"] != "Job" {`, `if false {`)),
}

// options are the command's flags.
type options struct {
	run     string
	verbose bool
	list    bool
	timeout time.Duration
	// sample, when not 0, runs that many of the selected mutations, drawn with seed.
	sample int
	seed   uint64
	// budget, when not 0, is the time after which no further mutation is started.
	budget time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.run, "run", "", "run only the mutations whose name matches this regexp")
	flag.BoolVar(&o.verbose, "v", false, "show the failing test output of each killed mutation")
	flag.BoolVar(&o.list, "list", false, "list the mutations and exit")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "timeout of each go test run")
	flag.IntVar(&o.sample, "sample", 0, "run only this many of the selected mutations, drawn with -seed (0: all of them)")
	flag.Uint64Var(&o.seed, "seed", 0, "seed of the -sample draw (0: today's date, so that each day's runs cover another part of the table)")
	flag.DurationVar(&o.budget, "budget", 0, "start no mutation once this much time has passed, the baseline included (0: no limit); the ones left out are reported")
	flag.Parse()
	// Ctrl-C reaches go test too (it is in the same process group); stop, remove the temporary files, and
	// say so.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	switch {
	case errors.Is(err, errSurvived):
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "mutate-exactness:", err)
		os.Exit(2)
	}
}

// errSurvived reports that a mutation survived (or did not compile); the table says which.
var errSurvived = errors.New("not every mutation was killed")

func run(ctx context.Context, o options) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	// Check the whole table, selected or not: a snippet that no longer matches is a stale table.
	mutated, err := apply(root, mutations)
	if err != nil {
		return err
	}
	selected, err := selectMutations(o)
	if err != nil {
		return err
	}
	if o.list {
		for _, i := range selected {
			m := mutations[i]
			fmt.Printf("%-36s %s\n", m.name, m.desc)
			if m.equivalent != "" {
				fmt.Printf("%-36s   (equivalent: %s)\n", "", m.equivalent)
			}
		}
		return nil
	}

	tmp, err := os.MkdirTemp("", "mutate-exactness-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	helperPath := filepath.Join(tmp, "helpers.go")
	if err := os.WriteFile(helperPath, []byte(helpers), 0o644); err != nil {
		return err
	}

	start := time.Now()
	fmt.Printf("baseline: go test ./webhook/ (unmutated) ... ")
	if out, err := goTest(ctx, root, "", o.timeout); err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted")
		}
		fmt.Println("FAIL")
		os.Stdout.Write(out)
		return errors.New("the unmutated tests fail; fix them before mutating")
	}
	fmt.Printf("ok (%s)\n\n", time.Since(start).Round(time.Second))

	fmt.Printf("%-3s %-36s %-8s %-6s %s\n", "#", "mutation", "result", "time", "killed by / what the mutation weakens")
	var t tally
	for n, i := range selected {
		if o.budget > 0 && time.Since(start)+t.mean() > o.budget {
			t.skipped = selected[n:]
			break
		}
		result, err := runOne(ctx, root, tmp, helperPath, i, mutated[i], o)
		if err != nil {
			return err
		}
		t.add(result)
		fmt.Printf("%-3d %s", n+1, result.line)
	}
	return t.report(time.Since(start), o.budget)
}

// selectMutations returns the indexes of the mutations to run: those -run matches, or -sample of them.
func selectMutations(o options) ([]int, error) {
	re, err := regexp.Compile(o.run)
	if err != nil {
		return nil, fmt.Errorf("-run: %w", err)
	}
	var selected []int
	for i, m := range mutations {
		if re.MatchString(m.name) {
			selected = append(selected, i)
		}
	}
	if len(selected) == 0 {
		return nil, fmt.Errorf("no mutation matches -run %q", o.run)
	}
	if o.sample <= 0 || o.sample >= len(selected) {
		return selected, nil
	}
	seed := o.seed
	if seed == 0 {
		y, m, d := time.Now().UTC().Date()
		seed = uint64(y*10000 + int(m)*100 + d)
	}
	// The draw depends on the seed alone, so a failure is reproduced with the -seed it prints.
	rng := rand.New(rand.NewPCG(seed, 0))
	rng.Shuffle(len(selected), func(i, j int) { selected[i], selected[j] = selected[j], selected[i] })
	selected = selected[:o.sample]
	slices.Sort(selected)
	fmt.Printf("sample: %d of the mutations, drawn with -seed %d\n", o.sample, seed)
	return selected, nil
}

// outcome is the result of one mutation: how it ended, and its lines of the table.
type outcome struct {
	result string // KILLED, SURVIVED, EQUIV or BROKEN
	took   time.Duration
	line   string
}

// runOne runs the webhook's tests with mutation i applied.
func runOne(ctx context.Context, root, tmp, helperPath string, i int, mutated string, o options) (outcome, error) {
	m := mutations[i]
	t0 := time.Now()
	file := filepath.Join(tmp, fmt.Sprintf("m%d.go", i))
	if err := os.WriteFile(file, []byte(mutated), 0o644); err != nil {
		return outcome{}, err
	}
	ovl, _ := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(root, m.file):           file,
		filepath.Join(root, helperFileInTree): helperPath,
	}})
	ovlPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovlPath, ovl, 0o644); err != nil {
		return outcome{}, err
	}
	out, err := goTest(ctx, root, ovlPath, o.timeout)
	if ctx.Err() != nil {
		return outcome{}, errors.New("interrupted")
	}
	result, by := "SURVIVED", ""
	switch {
	case err == nil && m.equivalent != "":
		result, by = "EQUIV", "accepted: "+m.equivalent
	case err == nil:
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		result = "BROKEN"
	default:
		result, by = "KILLED", firstFailure(out)
	}
	took := time.Since(t0)
	var b strings.Builder
	fmt.Fprintf(&b, "%-36s %-8s %-6s %s\n", m.name, result, took.Round(time.Second), by)
	fmt.Fprintf(&b, "    %s\n", m.desc)
	if result == "BROKEN" || (o.verbose && result == "KILLED") {
		for _, l := range failureLines(out, 30) {
			fmt.Fprintf(&b, "      | %s\n", l)
		}
	}
	return outcome{result: result, took: took, line: b.String()}, nil
}

// tally counts the outcomes of a run.
type tally struct {
	killed, survived, equivalent, broken int
	took                                 time.Duration
	skipped                              []int // left out by the time budget
}

func (t *tally) add(o outcome) {
	switch o.result {
	case "KILLED":
		t.killed++
	case "SURVIVED":
		t.survived++
	case "EQUIV":
		t.equivalent++
	case "BROKEN":
		t.broken++
	}
	t.took += o.took
}

// mean is the mean time of a mutation so far (0 before the first).
func (t *tally) mean() time.Duration {
	n := t.killed + t.survived + t.equivalent + t.broken
	if n == 0 {
		return 0
	}
	return t.took / time.Duration(n)
}

func (t *tally) report(total, budget time.Duration) error {
	fmt.Printf("\ntotal time %s\n", total.Round(time.Second))
	if t.broken > 0 {
		fmt.Printf("broken (do not compile): %d\n", t.broken)
	}
	run := t.killed + t.survived + t.equivalent + t.broken
	fmt.Printf("mutations: %d killed, %d survived, %d accepted as equivalent (of %d run)\n", t.killed, t.survived, t.equivalent, run)
	if len(t.skipped) > 0 {
		names := make([]string, len(t.skipped))
		for i, s := range t.skipped {
			names[i] = mutations[s].name
		}
		fmt.Printf("not run, over the %s budget: %s\n", budget, strings.Join(names, " "))
	}
	if t.survived > 0 || t.broken > 0 {
		return errSurvived
	}
	return nil
}

// apply returns each mutation's mutated file, after checking that every snippet occurs exactly once in
// the original and that every name is unique.
func apply(root string, ms []mutation) ([]string, error) {
	var problems []string
	names := map[string]bool{}
	sources := map[string]string{}
	out := make([]string, len(ms))
	for i, m := range ms {
		if names[m.name] {
			problems = append(problems, fmt.Sprintf("%s: duplicate name", m.name))
		}
		names[m.name] = true
		src, ok := sources[m.file]
		if !ok {
			b, err := os.ReadFile(filepath.Join(root, m.file))
			if err != nil {
				return nil, err
			}
			src = string(b)
			sources[m.file] = src
		}
		if len(m.edits) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no edit", m.name))
		}
		mutated := src
		for _, ed := range m.edits {
			if n := strings.Count(src, ed.old); n != 1 {
				problems = append(problems, fmt.Sprintf("%s: %q occurs %d times in %s, want exactly once", m.name, ed.old, n, m.file))
				continue
			}
			if ed.old == ed.new {
				problems = append(problems, fmt.Sprintf("%s: the edit changes nothing", m.name))
			}
			mutated = strings.Replace(mutated, ed.old, ed.new, 1)
		}
		out[i] = mutated
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("the mutation table is stale:\n  %s", strings.Join(problems, "\n  "))
	}
	return out, nil
}

func goTest(ctx context.Context, root, overlay string, timeout time.Duration) ([]byte, error) {
	// -vet=off: vet does not judge a mutation, and it would rerun on every mutated build.
	args := []string{"test", "-count=1", "-failfast", "-vet=off", "-timeout=" + timeout.String()}
	if overlay != "" {
		args = append(args, "-overlay="+overlay)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./webhook/")...)
	cmd.Dir = root
	// On SIGTERM, ask go test to stop as Ctrl-C would (it stops the test binary); kill it if it does not.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	return cmd.CombinedOutput()
}

var failRe = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// firstFailure names the test that noticed the mutation (its innermost failing subtest), or says how
// the run failed.
func firstFailure(out []byte) string {
	ms := failRe.FindAllSubmatch(out, -1)
	best := ""
	for _, m := range ms {
		if name := string(m[1]); strings.HasPrefix(name, best) {
			best = name
		} else if best != "" {
			break
		}
	}
	switch {
	case best != "":
		return best
	case bytes.Contains(out, []byte("panic: test timed out")):
		return "(timeout)"
	case bytes.Contains(out, []byte("panic:")):
		return "(panic)"
	}
	return "(go test failed)"
}

// failureLines is the interesting part of a failed run's output: the failing tests and their messages.
func failureLines(out []byte, limit int) []string {
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		t := strings.TrimSpace(l)
		if t == "" || t == "FAIL" || strings.HasPrefix(t, "FAIL\t") || strings.HasPrefix(t, "ok ") {
			continue
		}
		lines = append(lines, l)
		if len(lines) == limit {
			lines = append(lines, "...")
			break
		}
	}
	return lines
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside a Go module (no go.mod above the working directory)")
		}
		dir = parent
	}
}
