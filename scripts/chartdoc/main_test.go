package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const chart = "../../charts/agent-sandbox"

// TestREADMEUpToDate: the committed values reference is exactly what the schema gives. After changing
// values.schema.json or values.yaml, run make chart-docs.
func TestREADMEUpToDate(t *testing.T) {
	if err := run(chart, true); err != nil {
		t.Fatal(err)
	}
}

// TestEveryValueDocumented: no key of values.yaml lacks a description in the schema (generate refuses to
// write a README then), and an undocumented key is caught.
func TestEveryValueDocumented(t *testing.T) {
	d, err := load(chart)
	if err != nil {
		t.Fatal(err)
	}
	if u := undocumented(d); len(u) > 0 {
		t.Errorf("values without a schema description: %v", u)
	}

	dir := t.TempDir()
	schema := `{"type":"object","properties":{"a":{"type":"string","description":"A."},"b":{"type":"object","properties":{"c":{"type":"integer"}}},"free":{"type":"object","description":"Any map."}}}`
	for name, content := range map[string]string{"values.schema.json": schema, "values.yaml": "a: x\nb:\n  c: 1\nfree:\n  k: v\nextra: 1\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = generate(dir)
	if !errors.Is(err, errUndocumented) || !strings.Contains(err.Error(), "b.c") || !strings.Contains(err.Error(), "extra (not in the schema)") || strings.Contains(err.Error(), "free") {
		t.Errorf("generate with undocumented values: %v", err)
	}
}

func TestGenerateRows(t *testing.T) {
	out, err := generate(chart)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `image.repository` | string | `\"localhost/agent-sandbox\"` |",
		"| `webhook.failurePolicy` | only \"Fail\" |",
		"| `webhook.port` | integer 1–65535 (port) | `9443` |",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("README lacks %q", want)
		}
	}
}
