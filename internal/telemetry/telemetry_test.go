package telemetry_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/telemetry"
	"github.com/agent-sandbox/agent-sandbox/internal/telemetry/telemetrytest"
)

func TestTraceIDFor(t *testing.T) {
	a, b := telemetry.TraceIDFor("req-1"), telemetry.TraceIDFor("req-1")
	if a != b {
		t.Fatalf("not deterministic: %s, %s", a, b)
	}
	if a == telemetry.TraceIDFor("req-2") {
		t.Fatal("two request IDs share a trace ID")
	}
	sum := sha256.Sum256([]byte("agent-sandbox/req-1"))
	if want := hex.EncodeToString(sum[:16]); a.String() != want {
		t.Fatalf("TraceIDFor(req-1) = %s, want the first 16 bytes of SHA-256(\"agent-sandbox/req-1\") %s", a, want)
	}
}

func TestResolveEndpoint(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name    string
		o       telemetry.Options
		want    string
		wantErr string
	}{
		{name: "off", o: telemetry.Options{Getenv: env(nil)}},
		{name: "flag base URL", o: telemetry.Options{Endpoint: "http://127.0.0.1:4318", Getenv: env(nil)}, want: "http://127.0.0.1:4318/v1/traces"},
		{name: "flag full URL", o: telemetry.Options{Endpoint: "https://otel.example/custom/traces"}, want: "https://otel.example/custom/traces"},
		{name: "flag wins over env", o: telemetry.Options{Endpoint: "http://a:4318/", Getenv: env(map[string]string{telemetry.EnvEndpoint: "http://b:4318"})}, want: "http://a:4318/v1/traces"},
		{name: "base env", o: telemetry.Options{Getenv: env(map[string]string{telemetry.EnvEndpoint: "http://b:4318"})}, want: "http://b:4318/v1/traces"},
		{name: "traces env is the full URL", o: telemetry.Options{Getenv: env(map[string]string{telemetry.EnvTracesEndpoint: "http://c:4318", telemetry.EnvEndpoint: "http://b:4318"})}, want: "http://c:4318"},
		{name: "no scheme", o: telemetry.Options{Endpoint: "127.0.0.1:4318"}, wantErr: "--otlp-endpoint"},
		{name: "grpc scheme", o: telemetry.Options{Endpoint: "grpc://collector:4317"}, wantErr: "http:// or https://"},
		{name: "no host", o: telemetry.Options{Endpoint: "http:///v1/traces"}, wantErr: "http:// or https://"},
		{name: "bad env", o: telemetry.Options{Getenv: env(map[string]string{telemetry.EnvEndpoint: "collector"})}, wantErr: "$" + telemetry.EnvEndpoint},
		{name: "credentials in URL", o: telemetry.Options{Endpoint: "http://user:secret@c:4318"}, wantErr: "must not carry credentials"},
		{name: "credentials in a bad URL", o: telemetry.Options{Endpoint: "ftp://user:secret@c:4318"}, wantErr: "must not carry credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.o.ResolveEndpoint()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("the error repeats the URL's password: %v", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestOffIsNil(t *testing.T) {
	tr, shutdown, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: func(string) string { return "" }})
	if err != nil || tr != nil {
		t.Fatalf("Setup without endpoint = %v, %v; want a nil tracer", tr, err)
	}
	// Every method of the disabled tracer does nothing.
	c := tr.StartCall(context.Background(), "req-1", "k8s_get_pod_status", time.Now())
	c.Set(map[string]any{"tier": "read"})
	c.Event(telemetry.Event{Name: "x", Time: time.Now()})
	c.Phase("run", time.Now(), time.Now(), nil)
	c.End("ok", "", time.Now())
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestCallSpans(t *testing.T) {
	tr, rec := telemetrytest.New(t)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := tr.StartCall(context.Background(), "req-abc", "k8s_get_pod_status", t0)
	c.Set(map[string]any{"namespace": "demo-app", "warm": false, "exit_code": int32(0), "ignored": []string{"x"}})
	c.Phase("admission", t0, t0.Add(time.Second), nil)
	c.Phase("credential", t0.Add(2*time.Second), t0.Add(4*time.Second), nil,
		telemetry.Event{Name: "credential.issued", Time: t0.Add(2 * time.Second), Attrs: map[string]any{"scope": "pod-reader"}})
	c.Phase("backwards", t0.Add(5*time.Second), t0.Add(4*time.Second), nil)
	c.End("failed", "the tool failed", t0.Add(6*time.Second))

	spans := rec.Spans()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4: %+v", len(spans), spans)
	}
	root := spans[3]
	want := telemetry.TraceIDFor("req-abc").String()
	if root.Name != "tools/call k8s_get_pod_status" || root.ParentID != "" || root.TraceID != want {
		t.Fatalf("root = %s parent %q trace %s; want tools/call k8s_get_pod_status, no parent, trace %s", root.Name, root.ParentID, root.TraceID, want)
	}
	if !root.Start.Equal(t0) || !root.End.Equal(t0.Add(6*time.Second)) || !root.Error || root.ErrorText != "the tool failed" {
		t.Fatalf("root times or status wrong: %+v", root)
	}
	for k, v := range map[string]string{"agent_sandbox.request_id": "req-abc", "agent_sandbox.tool": "k8s_get_pod_status",
		"agent_sandbox.namespace": "demo-app", "agent_sandbox.warm": "false", "agent_sandbox.exit_code": "0", "agent_sandbox.outcome": "failed"} {
		if root.Attrs[k] != v {
			t.Errorf("root %s = %q, want %q", k, root.Attrs[k], v)
		}
	}
	if _, ok := root.Attrs["agent_sandbox.ignored"]; ok {
		t.Error("a value of unknown type became an attribute")
	}
	for i, name := range []string{"admission", "credential", "backwards"} {
		s := spans[i]
		if s.Name != name || s.ParentID != root.SpanID || s.TraceID != want || s.Attrs["agent_sandbox.request_id"] != "req-abc" {
			t.Errorf("span %d = %s parent %s trace %s attrs %v; want %s, child of the root, same trace, with the request ID", i, s.Name, s.ParentID, s.TraceID, s.Attrs, name)
		}
		if s.End.Before(s.Start) {
			t.Errorf("span %s ends before it starts", s.Name)
		}
	}
	if ev := spans[1].Events; len(ev) != 1 || ev[0].Name != "credential.issued" || ev[0].Attrs["agent_sandbox.scope"] != "pod-reader" {
		t.Errorf("credential events = %+v", ev)
	}
}

// TestExportOTLPHTTP sends a call's trace through the exporter Setup builds to a real OTLP/HTTP receiver,
// which decodes the protobuf request as a collector does.
func TestExportOTLPHTTP(t *testing.T) {
	recv := telemetrytest.NewReceiver(t)
	ctx := context.Background()
	tr, shutdown, err := telemetry.Setup(ctx, telemetry.Options{Endpoint: recv.URL, Version: "v-test", Getenv: func(string) string { return "" }})
	if err != nil || tr == nil {
		t.Fatalf("Setup = %v, %v", tr, err)
	}
	t0 := time.Now()
	c := tr.StartCall(ctx, "req-otlp", "k8s_get_pod_status", t0)
	c.Phase("admission", t0, t0.Add(time.Millisecond), nil)
	c.Phase("run", t0.Add(time.Millisecond), t0.Add(2*time.Millisecond), nil)
	c.End("ok", "", t0.Add(3*time.Millisecond))
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown (flush): %v", err)
	}

	wantTrace := telemetry.TraceIDFor("req-otlp").String()
	names := map[string]bool{}
	for _, s := range recv.Spans() {
		if s.TraceID != wantTrace {
			t.Errorf("span %s has trace ID %s, want %s", s.Name, s.TraceID, wantTrace)
		}
		if s.Attrs[telemetry.AttrRequestID] != "req-otlp" {
			t.Errorf("span %s has request ID %q", s.Name, s.Attrs[telemetry.AttrRequestID])
		}
		names[s.Name] = true
	}
	if sv := recv.Services(); len(sv) == 0 || sv[0] != telemetry.ServiceName {
		t.Errorf("service.name = %v, want %q", sv, telemetry.ServiceName)
	}
	for _, n := range []string{"tools/call k8s_get_pod_status", "admission", "run"} {
		if !names[n] {
			t.Errorf("the receiver got no span %q (got %v)", n, names)
		}
	}
}

// TestNoSecretInSpans feeds attributes and events that carry a token, under a secret's key and in a
// secret's shape, and a failure message with a token: none of it reaches a span.
func TestNoSecretInSpans(t *testing.T) {
	const token = "hvs.CAESIJlWh0J7kFzEXAMPLETOKENvalue0123456789"
	const jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlc2lnbmF0dXJl"
	tr, rec := telemetrytest.New(t)
	t0 := time.Now()
	c := tr.StartCall(context.Background(), "req-s", "k8s_get_pod_status", t0)
	c.Set(map[string]any{"token": token, "note": "Authorization: Bearer " + jwt})
	c.Phase("credential", t0, t0.Add(time.Second), map[string]any{"vault_token": token},
		telemetry.Event{Name: "credential.issued", Time: t0, Attrs: map[string]any{"token": token, "service_account": "v-token-x", "scope": jwt}})
	c.End("failed", "login failed with "+token, t0.Add(2*time.Second))
	all := rec.String()
	for _, secret := range []string{token, jwt} {
		if strings.Contains(all, secret) {
			t.Fatalf("a span carries a secret: %s", all)
		}
	}
	if !strings.Contains(all, "v-token-x") {
		t.Fatalf("the service account's name (not a secret) is missing: %s", all)
	}
}
