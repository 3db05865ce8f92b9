package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
)

// Placement is where sandbox Pods run: spec.sandbox.nodeSelector and spec.sandbox.tolerations. On GKE with
// Agent Sandbox (gVisor node pools) it is {sandbox.gke.io/runtime: gvisor} and the toleration of the
// sandbox.gke.io/runtime=gvisor:NoSchedule taint.
type Placement struct {
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
}

// WithPlacement returns the policy document data with spec.sandbox.nodeSelector and spec.sandbox.tolerations
// replaced by pl's (an empty one removes the field), everything else (comments and order included) as it
// was. The result is loaded as the webhook would load it: a document that does not load is an error, and
// so is one that was not a policy with a spec.sandbox to begin with.
func WithPlacement(data []byte, pl Placement) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("decode policy: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errors.New("the policy is not one YAML document")
	}
	sandbox := mappingAt(doc.Content[0], "spec", "sandbox")
	if sandbox == nil {
		return nil, errors.New("the policy has no spec.sandbox mapping")
	}
	for _, f := range []struct {
		key   string
		value any
		set   bool
	}{
		{"nodeSelector", pl.NodeSelector, len(pl.NodeSelector) > 0},
		{"tolerations", pl.Tolerations, len(pl.Tolerations) > 0},
	} {
		var v *yaml.Node
		if f.set {
			var err error
			if v, err = flowNode(f.value); err != nil {
				return nil, fmt.Errorf("encode %s: %w", f.key, err)
			}
		}
		setKey(sandbox, f.key, v)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("encode policy: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode policy: %w", err)
	}
	out := b.Bytes()
	if _, err := Load(out); err != nil {
		return nil, fmt.Errorf("the policy with this placement does not load:\n%w", err)
	}
	return out, nil
}

// mappingAt follows keys from the mapping n and returns the mapping there, or nil.
func mappingAt(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	return n
}

// setKey sets key in the mapping m to v in place (after the last existing key when it is new), or removes
// it when v is nil.
func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != key {
			continue
		}
		if v == nil {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
		m.Content[i+1] = v
		return
	}
	if v != nil {
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
	}
}

// flowNode is v as a YAML node under its JSON names (Kubernetes types have no yaml tags), written in flow
// style as the policy's own comments write a placement.
func flowNode(v any) (*yaml.Node, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var generic any
	if err := json.Unmarshal(js, &generic); err != nil {
		return nil, err
	}
	var n yaml.Node
	if err := n.Encode(generic); err != nil { // yaml sorts map keys: the output is stable
		return nil, err
	}
	n.Style = yaml.FlowStyle
	if n.Kind == yaml.SequenceNode {
		n.Style = 0
		for _, c := range n.Content {
			c.Style = yaml.FlowStyle
		}
	}
	return &n, nil
}
