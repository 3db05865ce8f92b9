package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// apiWrites counts the API server's write requests by resource ("pods", "pods/status", "configmaps", ...),
// from its apiserver_request_total counter. Unlike CPU-seconds, the count does not depend on how fast the
// machine is at the moment, so it shows a lever that removes API objects even when the CPU figures of two
// runs differ by more than the lever saves.
type apiWrites map[string]float64

// writeVerbs are the request verbs that change stored objects (the metric's verb label).
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// readAPIWrites reads the API server's metrics with the admin client.
func readAPIWrites(ctx context.Context, admin kubernetes.Interface) (apiWrites, error) {
	rc, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API server's metrics: %w", err)
	}
	defer rc.Close()
	return parseAPIWrites(rc)
}

// parseAPIWrites sums apiserver_request_total over the write verbs, by resource and subresource.
func parseAPIWrites(r io.Reader) (apiWrites, error) {
	out := apiWrites{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labelText, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		labels := promLabels(labelText)
		if !writeVerbs[labels["verb"]] || labels["resource"] == "" {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("apiserver_request_total value %q: %w", value, err)
		}
		key := labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out[key] += n
	}
	return out, sc.Err()
}

// promLabels parses `a="x",b="y"`. Label values of this metric hold no quotes or commas.
func promLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// writesWindow is what changed between two readings, over the window's length.
type writesWindow struct {
	d     time.Duration
	delta apiWrites
}

func writesBetween(a, b apiWrites, d time.Duration) writesWindow {
	w := writesWindow{d: d, delta: apiWrites{}}
	for k, v := range b {
		if dv := v - a[k]; dv > 0 {
			w.delta[k] = dv
		}
	}
	return w
}

// perCall is the window's writes less the idle rate over its length, per call, by resource.
func (w writesWindow) perCall(idle writesWindow, calls int) apiWrites {
	out := apiWrites{}
	for k, v := range w.delta {
		rate := 0.0
		if idle.d > 0 {
			rate = idle.delta[k] / idle.d.Seconds()
		}
		if n := (v - rate*w.d.Seconds()) / float64(calls); n >= 0.05 {
			out[k] = n
		}
	}
	return out
}

// String is "N in all: resource n, ..." with the largest first.
func (a apiWrites) String() string {
	keys := slices.Collect(maps.Keys(a))
	slices.SortFunc(keys, func(x, y string) int {
		if a[x] != a[y] {
			if a[x] > a[y] {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	})
	total := 0.0
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		total += a[k]
		parts = append(parts, fmt.Sprintf("%s %.1f", k, a[k]))
	}
	return fmt.Sprintf("%.1f in all: %s", total, strings.Join(parts, ", "))
}
