// Package schema holds the JSON Schemas of tool results: the ones a policy declares for its `json` tools,
// and the ones the built-in result kinds infer from Go types. It is the only importer of
// github.com/google/jsonschema-go.
//
// A policy's schema is what the MCP server publishes as the tool's outputSchema, and every MCP client may
// validate results against it with its own validator (the TypeScript SDK uses Ajv, draft-07; the Go SDK
// uses jsonschema-go, draft 2020-12). So Compile admits only a small vocabulary that every draft reads the
// same way -- no $ref, no format, no combinators -- and refuses any other keyword by name, so that a typo
// ("requried") is an error and not a schema that quietly checks nothing.
package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// Schema is a compiled JSON Schema. It is immutable.
type Schema struct {
	doc      map[string]any
	resolved *jsonschema.Resolved
}

// Problem is one reason a schema is refused, at a JSON path inside it ("" for the root).
type Problem struct {
	Path   string
	Reason string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Reason
	}
	return p.Path + ": " + p.Reason
}

// Error lists every problem of a schema.
type Error struct{ Problems []Problem }

func (e *Error) Error() string {
	s := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// types are the JSON Schema type names.
var types = []string{"object", "array", "string", "integer", "number", "boolean", "null"}

// Compile decodes a JSON Schema written in a policy, checks it against the vocabulary (Keywords) and
// compiles it. The root must be an object schema: a tool's structured result is a JSON object.
func Compile(doc []byte) (*Schema, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil || dec.More() {
		return nil, &Error{Problems: []Problem{{Reason: "not one JSON object"}}}
	}
	var probs []Problem
	check(m, "", &probs)
	if t, _ := m["type"].(string); t != "object" {
		probs = append(probs, Problem{Path: "type", Reason: `the root must be "type": "object" (a tool's result is a JSON object)`})
	}
	if len(probs) > 0 {
		return nil, &Error{Problems: probs}
	}
	return compileMap(normalize(m).(map[string]any))
}

// For infers the schema of a Go type, the way the MCP SDK infers its typed tools' schemas.
func For[T any]() (*Schema, error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return compileMap(m)
}

// FromMap compiles a schema built in Go (the server's envelopes around a tool's result). It is checked
// like Compile's, so whatever the server publishes stays inside the vocabulary.
func FromMap(m map[string]any) (*Schema, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return Compile(data)
}

func compileMap(m map[string]any) (*Schema, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var js jsonschema.Schema
	if err := json.Unmarshal(data, &js); err != nil {
		return nil, &Error{Problems: []Problem{{Reason: err.Error()}}}
	}
	r, err := js.Resolve(nil)
	if err != nil {
		return nil, &Error{Problems: []Problem{{Reason: err.Error()}}}
	}
	return &Schema{doc: m, resolved: r}, nil
}

// Validate checks a value (anything that encodes to JSON) against the schema. The error names the first
// place where it differs.
func (s *Schema) Validate(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	var inst any
	if err := json.Unmarshal(data, &inst); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return s.resolved.Validate(inst)
}

// Map returns the schema as a JSON object, a fresh copy each time.
func (s *Schema) Map() map[string]any { return deepCopy(s.doc).(map[string]any) }

// MarshalJSON writes the schema as it was compiled.
func (s *Schema) MarshalJSON() ([]byte, error) { return json.Marshal(s.doc) }

// Property returns the schema of one property of an object schema, or nil.
func (s *Schema) Property(name string) map[string]any {
	props, _ := s.doc["properties"].(map[string]any)
	p, _ := props[name].(map[string]any)
	if p == nil {
		return nil
	}
	return deepCopy(p).(map[string]any)
}

// Keywords are the JSON Schema keywords a policy's schema may use, each read the same way by draft-07
// and draft 2020-12 validators.
var Keywords = []string{
	"type", "title", "description", "properties", "required", "additionalProperties", "items", "enum", "const",
	"minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "pattern", "default",
}

func check(v any, path string, probs *[]Problem) {
	m, ok := v.(map[string]any)
	if !ok {
		if _, isBool := v.(bool); isBool {
			return // true and false are schemas
		}
		*probs = append(*probs, Problem{Path: path, Reason: "a schema must be an object"})
		return
	}
	at := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	keys := slices.Sorted(maps.Keys(m))
	for _, k := range keys {
		val := m[k]
		if !slices.Contains(Keywords, k) {
			*probs = append(*probs, Problem{Path: at(k), Reason: "keyword not allowed; use only " + strings.Join(Keywords, ", ")})
			continue
		}
		switch k {
		case "type":
			checkType(val, at(k), probs)
		case "title", "description", "pattern":
			s, isString := val.(string)
			if !isString {
				*probs = append(*probs, Problem{Path: at(k), Reason: "must be a string"})
			} else if k == "pattern" {
				if _, err := regexp.Compile(s); err != nil {
					*probs = append(*probs, Problem{Path: at(k), Reason: "not an RE2 expression: " + err.Error()})
				}
			}
		case "properties":
			props, isMap := val.(map[string]any)
			if !isMap {
				*probs = append(*probs, Problem{Path: at(k), Reason: "must map property names to schemas"})
				continue
			}
			for _, name := range slices.Sorted(maps.Keys(props)) {
				check(props[name], at(k)+"."+name, probs)
			}
		case "required":
			list, isList := val.([]any)
			if !isList {
				*probs = append(*probs, Problem{Path: at(k), Reason: "must be a list of property names"})
				continue
			}
			props, _ := m["properties"].(map[string]any)
			for _, r := range list {
				name, isString := r.(string)
				if !isString {
					*probs = append(*probs, Problem{Path: at(k), Reason: "must be a list of property names"})
				} else if _, declared := props[name]; !declared {
					*probs = append(*probs, Problem{Path: at(k), Reason: fmt.Sprintf("%q is not a declared property", name)})
				}
			}
		case "additionalProperties", "items":
			check(val, at(k), probs)
		case "enum":
			if list, isList := val.([]any); !isList || len(list) == 0 {
				*probs = append(*probs, Problem{Path: at(k), Reason: "must be a non-empty list"})
			}
		case "minimum", "maximum":
			if _, isNum := val.(json.Number); !isNum {
				*probs = append(*probs, Problem{Path: at(k), Reason: "must be a number"})
			}
		case "minLength", "maxLength", "minItems", "maxItems":
			if n, isNum := val.(json.Number); !isNum || !isNonNegativeInt(n) {
				*probs = append(*probs, Problem{Path: at(k), Reason: "must be a non-negative integer"})
			}
		}
	}
}

func checkType(v any, path string, probs *[]Problem) {
	var names []string
	switch t := v.(type) {
	case string:
		names = []string{t}
	case []any:
		for _, x := range t {
			s, _ := x.(string)
			names = append(names, s)
		}
	}
	if len(names) == 0 {
		*probs = append(*probs, Problem{Path: path, Reason: "must be a type name or a list of them"})
	}
	for _, n := range names {
		if !slices.Contains(types, n) {
			*probs = append(*probs, Problem{Path: path, Reason: fmt.Sprintf("%q is not one of %s", n, strings.Join(types, ", "))})
		}
	}
}

func isNonNegativeInt(n json.Number) bool {
	i, err := n.Int64()
	return err == nil && i >= 0
}

// normalize turns json.Numbers into int64 or float64, so the schema marshals as it was written.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	case []string:
		return append([]string(nil), x...)
	}
	return v
}
