package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sigsjson "sigs.k8s.io/json"
)

// object is an admitted object as the API server sent it: JSON decoded into maps, integers kept as int64.
// The checks compare these maps with what the policy renders, so a field this program's API types do not
// know (one a newer Kubernetes added) is still seen, and refused.
type object map[string]any

func decodeObject(raw []byte) (object, error) {
	if len(raw) == 0 {
		return nil, errors.New("the request carries no object")
	}
	var m map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &m); err != nil {
		return nil, fmt.Errorf("decode the object: %w", err)
	}
	if m == nil {
		return nil, errors.New("the object is not a JSON object")
	}
	return m, nil
}

func (o object) meta() map[string]any {
	m, _ := o["metadata"].(map[string]any)
	return m
}

func (o object) name() string      { s, _ := o.meta()["name"].(string); return s }
func (o object) namespace() string { s, _ := o.meta()["namespace"].(string); return s }
func (o object) uid() string       { s, _ := o.meta()["uid"].(string); return s }

func (o object) labels() map[string]string      { return stringMap(o.meta()["labels"]) }
func (o object) annotations() map[string]string { return stringMap(o.meta()["annotations"]) }

func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := make(map[string]string, len(m))
	for k, x := range m {
		if s, ok := x.(string); ok {
			out[k] = s
		}
	}
	return out
}

func stringList(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// withoutManagedFields is what the CEL rules see: the object without the API server's field ownership
// bookkeeping, which no decision rests on.
func (o object) withoutManagedFields() map[string]any {
	meta := o.meta()
	if _, ok := meta["managedFields"]; !ok {
		return o
	}
	m := make(map[string]any, len(meta))
	for k, v := range meta {
		if k != "managedFields" {
			m[k] = v
		}
	}
	out := make(map[string]any, len(o))
	for k, v := range o {
		out[k] = v
	}
	out["metadata"] = m
	return out
}

func decodeParams(raw string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var params map[string]any
	if err := dec.Decode(&params); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	if params == nil {
		return nil, errors.New("not a JSON object")
	}
	return params, nil
}
