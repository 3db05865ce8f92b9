package policy

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"testing"
)

// fuzzTool has one parameter of each type; m has only a maximum, the bound a wrapped value slips past.
func fuzzTool() *Tool {
	minN, maxN, maxM := int64(-5), int64(10), int64(100)
	return &Tool{
		Name: "t", Namespaces: []string{"x"},
		Command: []string{"run", "--n={{n}}", "--m={{m}}", "--u={{u}}", "--s={{s}}", "--b={{b}}"},
		Parameters: []Parameter{
			{Name: "n", Type: TypeInteger, Minimum: &minN, Maximum: &maxN},
			{Name: "m", Type: TypeInteger, Maximum: &maxM},
			{Name: "u", Type: TypeInteger},
			{Name: "s", Type: TypeString, Pattern: "[a-z]+", MaxLength: 8},
			{Name: "b", Type: TypeBoolean},
		},
	}
}

// FuzzInvokeParams feeds a call's parameters, as the JSON an agent (or a tampered annotation) sends, to
// Invoke, decoded both ways the callers decode: into float64 (the MCP server) and into json.Number (the
// webhook). Whatever Invoke accepts must be exactly the number that was sent and within its bounds.
func FuzzInvokeParams(f *testing.F) {
	for _, s := range []string{
		`{"m":9223372036854775808}`, `{"m":1e19}`, `{"m":-1e19}`, `{"n":3,"m":100,"u":-9223372036854775808}`,
		`{"u":9223372036854775807}`, `{"m":1e2}`, `{"n":2.5}`, `{"s":"abc","b":true}`, `{"s":"ABC"}`, `{}`,
	} {
		f.Add(s)
	}
	tool := fuzzTool()
	f.Fuzz(func(t *testing.T, data string) {
		var asFloat map[string]any
		if err := json.Unmarshal([]byte(data), &asFloat); err == nil {
			checkInvoke(t, tool, asFloat)
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(data)))
		dec.UseNumber()
		var asNumber map[string]any
		if err := dec.Decode(&asNumber); err == nil {
			checkInvoke(t, tool, asNumber)
		}
	})
}

func checkInvoke(t *testing.T, tool *Tool, raw map[string]any) {
	t.Helper()
	inv, err := tool.Invoke(raw)
	if err != nil {
		return
	}
	for _, prm := range tool.Parameters {
		got, ok := inv.Params[prm.Name]
		if !ok {
			continue
		}
		if prm.Type != TypeInteger {
			continue
		}
		n, ok := got.(int64)
		if !ok {
			t.Fatalf("%s: accepted as %T, want int64", prm.Name, got)
		}
		if prm.Minimum != nil && n < *prm.Minimum || prm.Maximum != nil && n > *prm.Maximum {
			t.Fatalf("%s=%v accepted as %d, outside its bounds", prm.Name, raw[prm.Name], n)
		}
		if !sameNumber(raw[prm.Name], n) {
			t.Fatalf("%s=%v accepted as %d, a different number", prm.Name, raw[prm.Name], n)
		}
	}
}

// sameNumber reports whether the decoded JSON value v is exactly n, compared in arbitrary precision so
// the check does not share the conversion it checks.
func sameNumber(v any, n int64) bool {
	want := new(big.Float).SetInt64(n)
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
		return big.NewFloat(x).Cmp(want) == 0
	case json.Number:
		i, err := strconv.ParseInt(string(x), 10, 64)
		return err == nil && i == n
	}
	return false
}
