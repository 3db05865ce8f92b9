package schema

import (
	"errors"
	"strings"
	"testing"
)

func TestCompileRefusesWhatClientsReadDifferently(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"not an object", `[1]`, "not one JSON object"},
		{"root not an object schema", `{"type":"array","items":{"type":"string"}}`, `the root must be "type": "object"`},
		{"typo", `{"type":"object","requried":["a"]}`, "requried: keyword not allowed"},
		{"ref", `{"type":"object","properties":{"a":{"$ref":"#/x"}}}`, "properties.a.$ref: keyword not allowed"},
		{"format", `{"type":"object","properties":{"t":{"type":"string","format":"date-time"}}}`, "properties.t.format: keyword not allowed"},
		{"unknown type", `{"type":"object","properties":{"a":{"type":"text"}}}`, `properties.a.type: "text" is not one of`},
		{"required undeclared", `{"type":"object","properties":{"a":{"type":"string"}},"required":["b"]}`, `required: "b" is not a declared property`},
		{"empty enum", `{"type":"object","properties":{"a":{"enum":[]}}}`, "properties.a.enum: must be a non-empty list"},
		{"bad pattern", `{"type":"object","properties":{"a":{"type":"string","pattern":"(?<=x)"}}}`, "properties.a.pattern: not an RE2 expression"},
		{"negative bound", `{"type":"object","properties":{"a":{"type":"string","maxLength":-1}}}`, "properties.a.maxLength: must be a non-negative integer"},
		{"nested item", `{"type":"object","properties":{"l":{"type":"array","items":{"type":"object","oneOf":[]}}}}`, "properties.l.items.oneOf: keyword not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile([]byte(tt.doc))
			var se *Error
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	s, err := Compile([]byte(`{
	  "type": "object", "additionalProperties": false, "required": ["status", "items"],
	  "properties": {
	    "status": {"type": "string", "enum": ["complete", "progressing", "failed"]},
	    "items": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 3}},
	    "count": {"type": "integer", "minimum": 0}
	  }}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(map[string]any{"status": "complete", "items": []string{"a"}, "count": 2}); err != nil {
		t.Errorf("a valid result: %v", err)
	}
	for name, v := range map[string]any{
		"status outside the enum": map[string]any{"status": "done", "items": []string{}},
		"too many items":          map[string]any{"status": "failed", "items": []string{"a", "b", "c"}},
		"item too long":           map[string]any{"status": "failed", "items": []string{"abcd"}},
		"extra property":          map[string]any{"status": "failed", "items": []string{}, "x": 1},
		"missing property":        map[string]any{"status": "failed"},
		"negative count":          map[string]any{"status": "failed", "items": []string{}, "count": -1},
	} {
		if err := s.Validate(v); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if m := s.Map(); m["type"] != "object" || s.Property("count")["minimum"] != int64(0) {
		t.Errorf("Map %v", m)
	}
}

func TestForStaysInTheVocabulary(t *testing.T) {
	type row struct {
		Name  string   `json:"name" jsonschema:"the name"`
		Tags  []string `json:"tags"`
		Count int32    `json:"count,omitempty"`
	}
	type out struct {
		Rows []row `json:"rows"`
		OK   bool  `json:"ok"`
	}
	s, err := For[out]()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromMap(s.Map()); err != nil {
		t.Errorf("an inferred schema leaves the vocabulary: %v", err)
	}
	if err := s.Validate(out{Rows: []row{{Name: "a"}}, OK: true}); err != nil {
		t.Error(err)
	}
}
