package toolrun

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// Bounds of `run pod-logs`.
const (
	// MaxTailLines is the most lines a caller may ask for.
	MaxTailLines = 1000
	// MaxLogBytes bounds the lines returned (the newest are kept).
	MaxLogBytes = 64 << 10
	// MaxLogLineBytes bounds one line; a longer one is cut.
	MaxLogLineBytes = 2048
	// maxLogRead bounds what is read from the API server before the newest lines are kept.
	maxLogRead = 4 << 20
	// defaultContainerAnnotation names a Pod's default container, as kubectl reads it.
	defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"
)

// PodLogsOptions are the inputs of PodLogs.
type PodLogsOptions struct {
	Namespace string
	Pod       string
	// Container is the container to read; "" picks the Pod's default container or its only one.
	Container string
	// TailLines is how many of the newest lines to read (1..MaxTailLines).
	TailLines int64
	// SinceSeconds, when positive, reads only lines newer than that.
	SinceSeconds int64
	// Previous reads the previous run of a restarted container.
	Previous bool
	// Scrubber removes secrets from each line (by the credential's exact values and by pattern); nil
	// applies the patterns only.
	Scrubber *scrub.Scrubber
}

// PodLogsResult is what `run pod-logs` writes.
type PodLogsResult struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// Containers are the Pod's containers (init containers first), for a caller that picks another.
	Containers []string `json:"containers"`
	Previous   bool     `json:"previous"`
	// Lines are the newest lines, oldest first, scrubbed of secrets.
	Lines []string `json:"lines"`
	// Truncated is true when older lines were left out, or a line was cut, to stay within the bounds.
	Truncated bool `json:"truncated"`
}

// Validate checks the options before anything is read.
func (o *PodLogsOptions) Validate() error {
	var errs []string
	if err := validateName("--namespace", o.Namespace, true); err != nil {
		errs = append(errs, err.Error())
	}
	if err := validateName("--pod", o.Pod, false); err != nil {
		errs = append(errs, err.Error())
	}
	if o.Container != "" {
		if err := validateName("--container", o.Container, true); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if o.TailLines < 1 || o.TailLines > MaxTailLines {
		errs = append(errs, fmt.Sprintf("--tail-lines %d: must be between 1 and %d", o.TailLines, MaxTailLines))
	}
	if o.SinceSeconds < 0 {
		errs = append(errs, "--since-seconds must not be negative")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// PodLogs reads the newest lines of one container of a Pod (needs get on pods and pods/log), bounded and
// scrubbed.
func PodLogs(ctx context.Context, client kubernetes.Interface, o PodLogsOptions) (PodLogsResult, error) {
	if err := o.Validate(); err != nil {
		return PodLogsResult{}, err
	}
	pod, err := client.CoreV1().Pods(o.Namespace).Get(ctx, o.Pod, metav1.GetOptions{})
	if err != nil {
		return PodLogsResult{}, fmt.Errorf("get pod %s/%s: %w", o.Namespace, o.Pod, err)
	}
	var names []string
	for _, c := range pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	container := o.Container
	switch {
	case container != "" && !slices.Contains(names, container):
		return PodLogsResult{}, fmt.Errorf("pod %s has no container %q (it has %s)", o.Pod, container, strings.Join(names, ", "))
	case container != "":
	case pod.Annotations[defaultContainerAnnotation] != "" && slices.Contains(names, pod.Annotations[defaultContainerAnnotation]):
		container = pod.Annotations[defaultContainerAnnotation]
	case len(pod.Spec.Containers) == 1:
		container = pod.Spec.Containers[0].Name
	default:
		return PodLogsResult{}, fmt.Errorf("pod %s has several containers (%s): name one", o.Pod, strings.Join(names, ", "))
	}
	opts := &corev1.PodLogOptions{Container: container, TailLines: &o.TailLines, Previous: o.Previous}
	if o.SinceSeconds > 0 {
		opts.SinceSeconds = &o.SinceSeconds
	}
	rc, err := client.CoreV1().Pods(o.Namespace).GetLogs(o.Pod, opts).Stream(ctx)
	if err != nil {
		return PodLogsResult{}, fmt.Errorf("read the logs of %s/%s: %w", o.Pod, container, err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxLogRead+1))
	if err != nil {
		return PodLogsResult{}, fmt.Errorf("read the logs of %s/%s: %w", o.Pod, container, err)
	}
	res := PodLogsResult{Namespace: o.Namespace, Pod: o.Pod, Container: container, Containers: names, Previous: o.Previous}
	res.Lines, res.Truncated = tailLines(raw, o.Scrubber)
	return res, nil
}

// tailLines splits a log into scrubbed lines, each at most MaxLogLineBytes, keeping the newest that fit in
// MaxLogBytes. It reports whether anything was left out or cut.
func tailLines(raw []byte, sc *scrub.Scrubber) ([]string, bool) {
	truncated := false
	if len(raw) > maxLogRead {
		// The oldest part is what gets lost: drop the (possibly partial) first line of the newest bytes.
		raw = raw[len(raw)-maxLogRead:]
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			raw = raw[i+1:]
		}
		truncated = true
	}
	parts := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(parts) == 1 && parts[0] == "" {
		return []string{}, truncated
	}
	lines := make([]string, 0, len(parts))
	total := 0
	for i := len(parts) - 1; i >= 0; i-- {
		line := sc.String(strings.TrimRight(parts[i], "\r"))
		if cut, ok := cutUTF8(line, MaxLogLineBytes); !ok {
			line, truncated = cut, true
		}
		if total+len(line)+1 > MaxLogBytes {
			truncated = true
			break
		}
		total += len(line) + 1
		lines = append(lines, line)
	}
	slices.Reverse(lines)
	return lines, truncated
}

// cutUTF8 returns s cut to at most n bytes on a character boundary, and whether it was already short
// enough.
func cutUTF8(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, true
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s, false
}
