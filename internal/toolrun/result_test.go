package toolrun

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestWriteAndDecodeResult(t *testing.T) {
	want := PlanResult{
		Workspace: "demo", PlanID: strings.Repeat("ab", 32),
		Summary: PlanSummary{Add: 1, Destroy: 1, Replace: 1},
		Changes: []ResourceChange{{Address: "kubernetes_deployment.web", Type: "kubernetes_deployment", Name: "web",
			Actions: []string{"delete", "create"}, Replace: true}},
		Text: "  # kubernetes_deployment.web must be replaced\n-/+ resource ... <computed> & more\n",
	}
	var buf bytes.Buffer
	if err := WriteResult(&buf, want); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("not one line: %q", out)
	}
	if !strings.Contains(out, "<computed> & more") {
		t.Errorf("HTML-escaped: %s", out)
	}
	got, err := DecodeResult[PlanResult](buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got.PlanID != want.PlanID || got.Text != want.Text || got.Summary != want.Summary || !got.Changes[0].Replace {
		t.Errorf("round trip: %+v", got)
	}
}

func TestDecodeResult(t *testing.T) {
	type r struct {
		Workspace string `json:"workspace"`
	}
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr string
	}{
		{name: "only line", in: `{"workspace":"a"}` + "\n", want: "a"},
		{name: "no trailing newline", in: `{"workspace":"a"}`, want: "a"},
		{name: "pod log with stderr lines", in: "Initializing...\n{\"not\":\"last\"}\nError: something\n{\"workspace\":\"b\"}\n\n", want: "b"},
		{name: "trailing stderr after result", in: "{\"workspace\":\"c\"}\ntime=... level=INFO msg=done\n", want: "c"},
		{name: "broken JSON skipped", in: "{\"workspace\":\"d\"}\n{\"workspace\":\n", want: "d"},
		{name: "CRLF", in: "{\"workspace\":\"e\"}\r\n", want: "e"},
		{name: "error line", in: "progress\n{\"error\":\"saved plan does not match the approved plan id\"}\n", wantErr: "saved plan does not match the approved plan id"},
		{name: "empty error", in: `{"error":""}`, wantErr: "the tool failed without a reason"},
		{name: "error not a string", in: `{"error":42}`, wantErr: "the tool failed without a reason"},
		{name: "wrong type", in: `{"workspace":3}`, wantErr: "decode result"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeResult[r]([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Workspace != tt.want {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
	var te *ToolError
	if _, err := DecodeResult[r]([]byte(`{"error":"x"}`)); !errors.As(err, &te) || te.Message != "x" {
		t.Errorf("error line is not a *ToolError: %v", err)
	}
	for _, in := range []string{"", "\n\n", "Error: terraform crashed\n", "[1,2]\n"} {
		if _, err := DecodeResult[r]([]byte(in)); !errors.Is(err, ErrNoResult) {
			t.Errorf("%q: %v, want ErrNoResult", in, err)
		}
	}
}

func TestWriteErrorIsOneScrubbedLine(t *testing.T) {
	err := fmt.Errorf("terraform plan: %w", errors.Join(
		errors.New("Error: Unauthorized\n\n  Authorization: Bearer abc.def-123"),
		errors.New("token=s3cr3t"),
		errors.New("header eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"),
	))
	var buf bytes.Buffer
	if err := WriteError(&buf, err); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("not one line: %q", out)
	}
	for _, secret := range []string{"abc.def-123", "s3cr3t", "eyJhbGciOiJSUzI1NiJ9"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q leaked: %s", secret, out)
		}
	}
	_, derr := DecodeResult[PlanResult](buf.Bytes())
	var te *ToolError
	if !errors.As(derr, &te) || !strings.HasPrefix(te.Message, "terraform plan: Error: Unauthorized; ") {
		t.Errorf("decoded: %v", derr)
	}
	if ErrorLine(nil) != "" {
		t.Error("ErrorLine(nil)")
	}
}

// FuzzDecodeResult: the MCP server decodes a sandbox's output, which the sandboxed tool controls.
func FuzzDecodeResult(f *testing.F) {
	f.Add([]byte("{\"plan_id\":\"x\",\"changes\":[{\"replace_paths\":[[\"spec\",0]]}]}\n"))
	f.Add([]byte("noise\n{\"error\":\"e\"}\n"))
	f.Add([]byte("{\"error\":null}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := DecodeResult[PlanResult](data)
		var te *ToolError
		if errors.As(err, &te) && te.Message == "" {
			t.Fatal("empty tool error")
		}
	})
}
