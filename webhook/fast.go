package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"

	"github.com/agent-sandbox/agent-sandbox/cel"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// The fast path. Almost every Job the webhook sees is exactly what the policy renders: the MCP server
// renders it with the same code. For those, the expensive parts of a decision — rendering the expectation,
// decoding the whole object into maps, comparing them, evaluating the CEL rules — give the same answer
// for every Job of one rendering (one tool, parameters and approval token), apart from the handful of
// values the API server and the request make unique: the Job's UID, its name and its request ID. So the
// webhook computes a rendering's expectation once — the exact JSON of the Job's spec, split where those
// values go, and the CEL verdict — and then decides on a Job by comparing its spec's bytes with that
// JSON and its metadata with what the policy allows. Any difference at all, in any byte, sends the Job
// down the slow path, which decodes and compares everything field by field and says what differs; so the
// fast path can only admit a Job that the slow path would admit too.
//
// The CEL verdict is reused only when the rules read nothing of the object but the rendered fields
// (cel.Program.ReadsOnlyRenderedFields, a static analysis of the compiled rules); otherwise the fast path
// is off and every Job is evaluated.

// Placeholders in the expected spec JSON where per-Job values go. They cannot occur in a rendering
// otherwise: no policy value contains "\u0001", and expect refuses parameters that do.
const (
	slotUID       = "\x01uid\x01"
	slotName      = "\x01name\x01"
	slotRequestID = "\x01req\x01"
)

// expectation is one rendering of a tool call, computed once.
type expectation struct {
	inv *policy.Invocation
	// nameFromRequest is true when the Job's name is derived from its request ID (not its token).
	nameFromRequest bool
	name            string // the name, when it is not derived from the request ID
	// frags is the expected spec JSON cut at the slots; slots[i] names the value between frags[i] and
	// frags[i+1].
	frags [][]byte
	slots []string
	// verdict is the CEL rules' verdict on the rendering (nil: every rule holds).
	verdict error
}

type expectationKey struct {
	policy              *policy.Compiled
	tool, params, token string
}

// expectations caches renderings. It is bounded: when full it is emptied (renderings are cheap to redo,
// and a long-lived webhook sees an unbounded number of distinct parameters).
type expectations struct {
	mu sync.Mutex
	m  map[expectationKey]*expectation
}

const maxExpectations = 4096

func (c *expectations) get(k expectationKey) (*expectation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	return e, ok
}

func (c *expectations) put(k expectationKey, e *expectation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxExpectations {
		c.m = make(map[expectationKey]*expectation, 64)
	}
	c.m[k] = e
}

// errNotFast sends a Job down the slow path.
var errNotFast = errors.New("not the rendering")

// fastJob decides on a new Job by comparing it with its rendering's cached expectation. It returns
// errNotFast whenever anything differs, and the caller then runs the full check.
func (c *Checker) fastJob(ctx context.Context, p *policy.Compiled, req Request, raw []byte) (*Decision, error) {
	if !p.Rules.ReadsOnlyRenderedFields() {
		return nil, errNotFast
	}
	parts, ok := topLevel(raw)
	if !ok || !bytes.Equal(parts.apiVersion, []byte(`"batch/v1"`)) || !bytes.Equal(parts.kind, []byte(`"Job"`)) ||
		(parts.status != nil && !bytes.Equal(parts.status, []byte(`{}`))) {
		return nil, errNotFast
	}
	var meta metav1.ObjectMeta
	if strict, err := sigsjson.UnmarshalStrict(parts.metadata, &meta); err != nil || len(strict) > 0 {
		return nil, errNotFast
	}
	tool := meta.Labels[contract.LabelTool]
	params, hasParams := meta.Annotations[contract.AnnotationParams]
	token := meta.Annotations[contract.AnnotationApprovalToken]
	head := meta.Annotations[contract.AnnotationAuditHead]
	requestID := meta.Labels[contract.LabelRequestID]
	if !hasParams || !approval.ValidRequestID(requestID) || meta.UID == "" {
		return nil, errNotFast
	}
	key := expectationKey{policy: p, tool: tool, params: params, token: token}
	exp, ok := c.cache.get(key)
	if !ok {
		var err error
		if exp, err = c.expect(ctx, p, tool, params, requestID, token); err != nil {
			return nil, errNotFast
		}
		c.cache.put(key, exp)
	}
	name := exp.name
	if exp.nameFromRequest {
		name = sandbox.JobName(exp.inv.Tool.Name, requestID)
	}
	if !exactMeta(&meta, p.Spec.Sandbox.Namespace, name, tool, requestID, params, token, head) {
		return nil, errNotFast
	}
	if !matchSlots(parts.spec, exp.frags, exp.slots, map[string]string{slotUID: string(meta.UID), slotName: name, slotRequestID: requestID}) {
		return nil, errNotFast
	}
	if exp.verdict != nil {
		return nil, exp.verdict
	}
	d := &Decision{Tool: exp.inv.Tool.Name}
	if err := c.admitCall(ctx, req, d, p, exp.inv, token, requestID, head, name); err != nil {
		return nil, err
	}
	return d, nil
}

// expect computes a rendering's expectation: the exact spec JSON with slots, and the CEL verdict on the
// whole expected Job.
func (c *Checker) expect(ctx context.Context, p *policy.Compiled, tool, params, requestID, token string) (*expectation, error) {
	inv, err := invocation(p, map[string]string{contract.LabelTool: tool}, map[string]string{contract.AnnotationParams: params})
	if err != nil {
		return nil, err
	}
	if token != "" && !inv.Tool.RequiresApproval {
		return nil, errNotFast
	}
	// The slots must be where the request ID and the API server's fields go, and nowhere else. A parameter
	// is the caller's, limited only by the policy's pattern: one that holds a marker (JSON can carry
	// "\u0001" in a string) would put a slot where the rendering has a literal value. (A token with one
	// never verifies.)
	if strings.Contains(params, `\u0001`) {
		return nil, errNotFast
	}
	// The audit head is on the Job's metadata only (exactMeta checks it), never in its spec.
	want, err := expectedJob(p, inv, slotRequestID, token, "")
	if err != nil {
		return nil, err
	}
	exp := &expectation{inv: inv, nameFromRequest: token == ""}
	if !exp.nameFromRequest {
		exp.name = want.Name
	}
	// What the API server adds: the selector and labels derived from the UID and name.
	withServerFields(want, slotUID, slotName)
	spec, err := json.Marshal(want.Spec)
	if err != nil {
		return nil, err
	}
	exp.frags, exp.slots = cutSlots(spec, []string{slotUID, slotName, slotRequestID})
	// The verdict of the rules on the rendering, with this request's values in the slots: the rules read
	// none of them (ReadsOnlyRenderedFields), so it is the verdict on every Job of this rendering.
	u, err := toUnstructured(want)
	if err != nil {
		return nil, err
	}
	in, err := cel.NewInput(&unstructured.Unstructured{Object: u}, p.Settings(), "CREATE")
	if err != nil {
		return nil, err
	}
	if vs := p.Rules.Evaluate(ctx, in); len(vs) > 0 {
		exp.verdict = violationsDenial(vs)
	}
	return exp, nil
}

// withServerFields adds to a rendered Job what the API server adds before validating admission: the
// selector on the Job's UID and the controller labels on the pod template.
func withServerFields(j *batchv1.Job, uid, name string) {
	j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{labelControllerUID: uid}}
	j.Spec.ManualSelector = ptr.To(false)
	l := j.Spec.Template.Labels
	if l == nil {
		l = map[string]string{}
		j.Spec.Template.Labels = l
	}
	l[labelControllerUID], l[labelJobName], l[labelLegacyControllerUID], l[labelLegacyJobName] = uid, name, uid, name
}

// exactMeta checks a Job's metadata: exactly the rendered name, namespace, labels and annotations (a
// well-formed audit head among them), and of everything else only what the API server sets on a new
// object.
func exactMeta(m *metav1.ObjectMeta, namespace, name, tool, requestID, params, token, head string) bool {
	if m.Name != name || m.Namespace != namespace || m.GenerateName != "" || m.DeletionTimestamp != nil || m.DeletionGracePeriodSeconds != nil ||
		len(m.OwnerReferences) != 0 || len(m.Finalizers) != 0 || m.SelfLink != "" {
		return false
	}
	if len(m.Labels) != 2 || m.Labels[contract.LabelTool] != tool || m.Labels[contract.LabelRequestID] != requestID {
		return false
	}
	wantAnn := 2
	if token != "" {
		wantAnn = 3
	}
	if len(m.Annotations) != wantAnn || m.Annotations[contract.AnnotationParams] != params || m.Annotations[contract.AnnotationApprovalToken] != token {
		return false
	}
	if !audit.ValidHead(head) || m.Annotations[contract.AnnotationAuditHead] != head {
		return false
	}
	// Every other field of ObjectMeta must be one the API server fills in itself; a field added to
	// ObjectMeta by a future API version is caught here, because the copy below keeps it.
	rest := *m
	rest.Name, rest.Namespace, rest.Labels, rest.Annotations = "", "", nil, nil
	rest.UID, rest.ResourceVersion, rest.Generation, rest.CreationTimestamp, rest.ManagedFields = "", "", 0, metav1.Time{}, nil
	return equality.Semantic.DeepEqual(rest, metav1.ObjectMeta{})
}

// cutSlots splits js at every JSON string whose value is one of slots.
func cutSlots(js []byte, slots []string) ([][]byte, []string) {
	var frags [][]byte
	var order []string
	for {
		at, which := -1, ""
		for _, s := range slots {
			q, _ := json.Marshal(s)
			if i := bytes.Index(js, q); i >= 0 && (at < 0 || i < at) {
				at, which = i, s
			}
		}
		if at < 0 {
			return append(frags, js), order
		}
		q, _ := json.Marshal(which)
		frags = append(frags, js[:at])
		order = append(order, which)
		js = js[at+len(q):]
	}
}

// matchSlots reports whether got is frags with each slot filled by the JSON string of its value.
func matchSlots(got []byte, frags [][]byte, slots []string, values map[string]string) bool {
	for i, f := range frags {
		if !bytes.HasPrefix(got, f) {
			return false
		}
		got = got[len(f):]
		if i == len(slots) {
			break
		}
		// The slot holds the value's JSON string, so that the spec decodes to exactly this value. (The
		// values are UIDs, DNS names and request IDs, which JSON does not escape; but the UID comes from the
		// object's metadata, and a raw comparison would let one with a quote close the string and add
		// members to the spec that the slow path sees.)
		q, err := json.Marshal(values[slots[i]])
		if err != nil || !bytes.HasPrefix(got, q) {
			return false
		}
		got = got[len(q):]
	}
	return len(got) == 0
}

// topFields are the top-level members of an admitted object the fast path looks at.
type topFields struct {
	apiVersion, kind, metadata, spec, status []byte
}

// topLevel splits a JSON object into its top-level members without decoding them. It accepts only the
// members a Job has (apiVersion, kind, metadata, spec, status), each at most once, and compact JSON as the
// API server writes it; anything else is for the slow path.
func topLevel(raw []byte) (topFields, bool) {
	var t topFields
	s := scanner{b: raw}
	if !s.consume('{') {
		return t, false
	}
	for first := true; ; first = false {
		if s.consume('}') {
			return t, s.i == len(s.b) && t.metadata != nil && t.spec != nil
		}
		if !first && !s.consume(',') {
			return t, false
		}
		key, ok := s.str()
		if !ok || !s.consume(':') {
			return t, false
		}
		start := s.i
		if !s.skipValue() {
			return t, false
		}
		v := raw[start:s.i]
		var dst *[]byte
		switch string(key) {
		case `"apiVersion"`:
			dst = &t.apiVersion
		case `"kind"`:
			dst = &t.kind
		case `"metadata"`:
			dst = &t.metadata
		case `"spec"`:
			dst = &t.spec
		case `"status"`:
			dst = &t.status
		default:
			return t, false
		}
		if *dst != nil {
			return t, false
		}
		*dst = v
	}
}

// scanner walks compact JSON. It only finds where values end; it does not validate them (the slow path
// and the strict metadata decoding do).
type scanner struct {
	b []byte
	i int
}

func (s *scanner) consume(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str skips a string and returns it with its quotes.
func (s *scanner) str() ([]byte, bool) {
	start := s.i
	if !s.consume('"') {
		return nil, false
	}
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
		case '"':
			s.i++
			return s.b[start:s.i], true
		default:
			s.i++
		}
	}
	return nil, false
}

// skipValue skips one value: a string, or anything up to the matching bracket, or a bare literal.
func (s *scanner) skipValue() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		_, ok := s.str()
		return ok
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, ok := s.str(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default:
		for s.i < len(s.b) && s.b[s.i] != ',' && s.b[s.i] != '}' {
			s.i++
		}
		return true
	}
}

// violationsDenial turns CEL violations into one denial.
func violationsDenial(vs []cel.Violation) error {
	if len(vs) == 1 {
		return deny(vs[0].Rule, "%s", vs[0].Message)
	}
	names := make([]string, len(vs))
	parts := make([]string, len(vs))
	for i, v := range vs {
		names[i], parts[i] = v.Rule, v.Rule+": "+v.Message
	}
	return &Denial{Rule: strings.Join(names, ","), Reason: fmt.Sprintf("%d rules failed: %s", len(vs), strings.Join(parts, "; "))}
}
