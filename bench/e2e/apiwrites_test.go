package main

import (
	"strings"
	"testing"
	"time"
)

// A few lines as kube-apiserver v1.37 prints them: reads and other metrics are left out, subresources are
// counted apart from their resource, and each write verb counts.
const metricsSample = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 30
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="DELETE",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 900
apiserver_request_total{code="0",component="apiserver",dry_run="",group="",resource="",scope="",subresource="",verb="GET",version=""} 5
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 12
`

func TestParseAPIWrites(t *testing.T) {
	got, err := parseAPIWrites(strings.NewReader(metricsSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["pods"] != 15 || got["pods/status"] != 30 {
		t.Errorf("writes = %v, want pods 15 (POST + DELETE), pods/status 30", got)
	}
}

func TestWritesPerCall(t *testing.T) {
	a := apiWrites{"pods": 10, "leases": 100}
	b := apiWrites{"pods": 30, "leases": 110, "configmaps": 8}
	w := writesBetween(a, b, 10*time.Second)
	// Idle: one lease write a second; the window's 10 lease writes are all idle.
	idle := writesWindow{d: 20 * time.Second, delta: apiWrites{"leases": 20}}
	got := w.perCall(idle, 4)
	if len(got) != 2 || got["pods"] != 5 || got["configmaps"] != 2 {
		t.Errorf("per call = %v, want pods 5, configmaps 2 (leases all idle)", got)
	}
	if s := got.String(); s != "7.0 in all: pods 5.0, configmaps 2.0" {
		t.Errorf("String() = %q", s)
	}
}
