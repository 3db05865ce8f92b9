package preflight

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"
)

// The probe is the half of preflight that runs inside the cluster, in the image the sandboxes will use:
// `agent-sandbox preflight probe kernel|connect|serve|webhook`. It prints one JSON line on stdout, which the
// orchestrator reads from the Pod's log. It needs no privilege, no service-account token and no writable
// root filesystem, so its Pods pass the restricted Pod Security level like a sandbox's.

// KernelReport is what `probe kernel` prints.
type KernelReport struct {
	// Version is /proc/version as the Pod sees it.
	Version string `json:"version"`
	// GVisor is true when the kernel the Pod talks to says it is gVisor's Sentry: its boot log (read with
	// syslog(2), which gVisor emulates) starts with "Starting gVisor...", or its version names gVisor.
	GVisor bool `json:"gvisor"`
	// Log is the first lines of that boot log, for the report.
	Log string `json:"log,omitempty"`
}

// ConnectReport is what `probe connect` prints: one outcome per target.
type ConnectReport struct {
	Targets []ConnectOutcome `json:"targets"`
}

// ConnectOutcome is one TCP (or DNS) attempt from inside the Pod.
type ConnectOutcome struct {
	Target string `json:"target"`
	// Connected is true when the TCP handshake completed (for dns: targets, when the name resolved).
	Connected bool   `json:"connected"`
	Error     string `json:"error,omitempty"`
	Millis    int64  `json:"ms"`
}

// Kernel reports the kernel the probe runs on.
func Kernel() KernelReport {
	var r KernelReport
	if b, err := os.ReadFile("/proc/version"); err == nil {
		r.Version = strings.TrimSpace(string(b))
	}
	buf := make([]byte, 64<<10)
	// SYSLOG_ACTION_READ_ALL = 3. gVisor answers it with its own boot messages; a host kernel usually
	// refuses it to an unprivileged user (kernel.dmesg_restrict), which is fine: then it is not gVisor.
	if n, err := syscall.Klogctl(3, buf); err == nil && n > 0 {
		lines := strings.SplitN(string(buf[:n]), "\n", 4)
		if len(lines) > 3 {
			lines = lines[:3]
		}
		r.Log = strings.Join(lines, "\n")
	}
	r.GVisor = strings.Contains(r.Log, "Starting gVisor") || strings.Contains(strings.ToLower(r.Version), "gvisor")
	return r
}

// Connect tries each target once, in order, with a per-target timeout. A target is host:port (TCP), or
// dns:name (resolve the name with the Pod's resolver).
func Connect(ctx context.Context, targets []string, timeout time.Duration) ConnectReport {
	var r ConnectReport
	for _, t := range targets {
		start := time.Now()
		o := ConnectOutcome{Target: t}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		var err error
		if name, ok := strings.CutPrefix(t, "dns:"); ok {
			_, err = net.DefaultResolver.LookupHost(cctx, name)
		} else {
			var c net.Conn
			c, err = (&net.Dialer{}).DialContext(cctx, "tcp", t)
			if err == nil {
				_ = c.Close()
			}
		}
		cancel()
		o.Millis = time.Since(start).Milliseconds()
		if err != nil {
			o.Error = err.Error()
		} else {
			o.Connected = true
		}
		r.Targets = append(r.Targets, o)
	}
	return r
}

// ServeMarker is what `probe serve` answers every request with.
const ServeMarker = "agent-sandbox-preflight"

// Serve answers every TCP connection on addr with ServeMarker until ctx ends: the target that the network
// check's client must reach without a NetworkPolicy and must not reach under one.
func Serve(ctx context.Context, addr string) error {
	srv := &http.Server{Addr: addr, ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, ServeMarker) })}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// WebhookDenial is the message the probe webhook denies with; seeing it in the API server's answer proves
// that the API server reached a Pod's port, which is what the real webhook needs.
const WebhookDenial = "agent-sandbox preflight: the API server reached the probe webhook"

// ServeWebhook serves a validating admission webhook on addr over TLS (certificate and key PEM files) that
// denies every request with WebhookDenial.
func ServeWebhook(ctx context.Context, addr, certFile, keyFile string) error {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("load the probe's certificate: %w", err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Request    struct {
				UID string `json:"uid"`
			} `json:"request"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&review); err != nil {
			http.Error(w, "bad admission review", http.StatusBadRequest)
			return
		}
		out := map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
			"response": map[string]any{"uid": review.Request.UID, "allowed": false,
				"status": map[string]any{"code": 403, "message": WebhookDenial}}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServeTLS("", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// decodeReport reads the last JSON line of a probe Pod's log into v.
func decodeReport(log []byte, v any) error {
	lines := bytes.Split(bytes.TrimSpace(log), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); len(l) > 0 && l[0] == '{' {
			return json.Unmarshal(l, v)
		}
	}
	return fmt.Errorf("the probe printed no report (log: %q)", truncate(string(log), 200))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
