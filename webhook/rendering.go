package webhook

import (
	"maps"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/utils/lru"

	"github.com/agent-sandbox/agent-sandbox/cel"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// A new Job is decided once: decoded, then compared field by field with what the policy renders for its
// declared tool and parameters (exactJobTree, diff). Two parts of that decision are pure, and the checker
// keeps them per policy so that it does not redo them for every Job of one call's shape:
//
//   - the rendering: the invocation and the expected Job as the tree the comparison reads, for one tool,
//     parameters and approval tokens. What the request makes unique is not in it: the request ID (in the
//     Job's name and labels) and the audit head (in its annotations) are put in per request (forRequest),
//     and what the API server derives from the Job's UID and name by exactJobTree. A rendering is kept only
//     once forRequest has been shown to give, for other values, exactly what rendering with them gives.
//   - the verdict of the policy's rules on the rendering, when the rules read only rendered fields
//     (cel.Program.ReadsOnlyRenderedFields) and the Job agrees with the rendering exactly, in value and
//     type, in every such field (cel.SameRenderedFields): the rules then see the same input and cannot
//     answer otherwise. Any other Job is evaluated.
//
// Neither changes a decision: a Job is compared with the same tree, and refused by the same rule with the
// same message, whether its rendering was cached or not (TestCacheNeverChangesADecision).

// maxRenderings bounds the cache: a long-lived webhook sees an unbounded number of distinct parameters
// (and every approved call has tokens of its own). A rendering is a few kilobytes.
const maxRenderings = 512

// renderKey is what a rendering depends on besides the policy: the Job's declared tool, parameters (the
// annotation as declared, byte for byte) and approval tokens.
type renderKey struct {
	tool, params, tokens string
}

// rendering is one call's expected Job, read-only once cached.
type rendering struct {
	inv *policy.Invocation
	// tree is the expected Job (expectedTree) for requestID and head.
	tree            map[string]any
	requestID, head string
	// nameFromRequest: the Job is named after its request ID (it carries no approval tokens, which
	// would name it).
	nameFromRequest bool
	// verdict holds the rules' violations on the rendering once a Job that agrees with it in every field
	// they read was evaluated (nil until then).
	verdict atomic.Pointer[[]cel.Violation]
}

// renderings is the cache of one policy: an LRU of renderings, replaced by an empty one when the policy is
// swapped (Checker.SetPolicy, under mu, so that no rendering of the old policy is put after the swap).
type renderings struct {
	mu     sync.Mutex
	policy *policy.Compiled
	lru    *lru.Cache
}

// get returns the rendering cached for k under p. A decision under another policy than the cache's (one
// that began before a reload) finds nothing.
func (r *renderings) get(p *policy.Compiled, k renderKey) (*rendering, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.policy != p || r.lru == nil {
		return nil, false
	}
	v, ok := r.lru.Get(k)
	if !ok {
		return nil, false
	}
	return v.(*rendering), true
}

// put caches a rendering made under p, unless the policy was swapped since.
func (r *renderings) put(p *policy.Compiled, k renderKey, v *rendering) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.policy == p && r.lru != nil {
		r.lru.Add(k, v)
	}
}

func (r *renderings) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lru == nil {
		return 0
	}
	return r.lru.Len()
}

// renderTree is the expected Job of an invocation for one request, as the tree the comparison reads.
func renderTree(p *policy.Compiled, inv *policy.Invocation, requestID, tokens, head string) (map[string]any, error) {
	want, err := expectedJob(p, inv, requestID, tokens, head)
	if err != nil {
		return nil, err
	}
	return expectedTree(want)
}

// newRendering renders an invocation for one request. It reports whether the rendering may be cached:
// whether forRequest turns it into exactly the rendering for another request ID and audit head.
func newRendering(p *policy.Compiled, inv *policy.Invocation, requestID, tokens, head string) (*rendering, bool, error) {
	tree, err := renderTree(p, inv, requestID, tokens, head)
	if err != nil {
		return nil, false, err
	}
	r := &rendering{inv: inv, tree: tree, requestID: requestID, head: head, nameFromRequest: tokens == ""}
	otherID, otherHead := "req-zzzzzzzzzzzz", strings.Repeat("0f", 32)
	if requestID == otherID || head == otherHead {
		otherID, otherHead = "req-yyyyyyyyyyyy", strings.Repeat("e1", 32)
	}
	other, err := renderTree(p, inv, otherID, tokens, otherHead)
	if err != nil {
		return r, false, nil
	}
	return r, reflect.DeepEqual(r.forRequest(otherID, otherHead), other), nil
}

// forRequest returns the rendering's tree for a request: its request ID in the Job's name (unless approval
// tokens name the Job), in the Job's labels and in its pod template's labels, and its audit head in the
// Job's annotations. The cached tree is not modified: the maps on those paths are copied, the rest (the
// pod spec, nearly all of it) is shared.
func (r *rendering) forRequest(requestID, head string) map[string]any {
	if requestID == r.requestID && head == r.head {
		return r.tree
	}
	w := maps.Clone(r.tree)
	meta := cloneMember(w, "metadata")
	if r.nameFromRequest {
		meta["name"] = sandbox.JobName(r.inv.Tool.Name, requestID)
	}
	cloneMember(meta, "labels")[contract.LabelRequestID] = requestID
	if ann := cloneMember(meta, "annotations"); head != "" {
		ann[contract.AnnotationAuditHead] = head
	} else {
		delete(ann, contract.AnnotationAuditHead)
	}
	tmeta := cloneMember(cloneMember(cloneMember(w, "spec"), "template"), "metadata")
	cloneMember(tmeta, "labels")[contract.LabelRequestID] = requestID
	return w
}

// cloneMember replaces m[key] by a shallow copy of the object there (an empty one if there is none) and
// returns the copy.
func cloneMember(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	c := make(map[string]any, len(v)+1)
	maps.Copy(c, v)
	m[key] = c
	return c
}

// jobName is the name in an expected Job's tree.
func jobName(tree map[string]any) string {
	meta, _ := tree["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	return name
}
