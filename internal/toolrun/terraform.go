package toolrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// ErrStalePlan means Terraform refused a saved plan because the state changed after the plan was made
// (another apply ran in between). The plan can never be applied; plan again.
var ErrStalePlan = errors.New("terraform refused the saved plan: the state changed after it was made (stale plan); plan again")

// interruptGrace is how long Terraform gets, after an interrupt, to stop cleanly (write state, release the
// lock) before it is killed. The kubelet's default termination grace period is 30 s.
const interruptGrace = 20 * time.Second

// TerraformError is a Terraform command that exited unsuccessfully.
type TerraformError struct {
	// Command is the Terraform subcommand, e.g. "plan".
	Command string
	// Diagnostics are Terraform's "Error: ..." summary lines, in order.
	Diagnostics []string
	Err         error
}

func (e *TerraformError) Error() string {
	if len(e.Diagnostics) == 0 {
		return fmt.Sprintf("terraform %s: %v", e.Command, e.Err)
	}
	return fmt.Sprintf("terraform %s: %s (%v)", e.Command, strings.Join(e.Diagnostics, "; "), e.Err)
}

func (e *TerraformError) Unwrap() error { return e.Err }

// terraform runs one Terraform binary in one working directory.
type terraform struct {
	bin    string
	dir    string
	env    []string
	stderr io.Writer
	// scrub removes secrets from Terraform's human output, by the per-action token's exact value as
	// well as by pattern (nil: by pattern only).
	scrub *scrub.Scrubber
}

// scrubText scrubs text that Terraform wrote to a captured stdout and that is shown to someone (the
// human text of a saved plan).
func (tf *terraform) scrubText(b []byte) string { return tf.scrub.String(string(b)) }

// run runs `terraform args...` with an explicit argv (no shell). Terraform's human output is scrubbed
// line by line (by the token's value and by pattern) and then goes to the stderr writer as it comes and
// is also returned; with captureStdout, stdout is returned separately as Terraform wrote it (machine
// output such as `show -json`; use scrubText before showing it). When ctx ends, Terraform gets an interrupt first so that
// it can release the state lock, and is killed interruptGrace later.
//
// The output pipes are the runner's own, so that once Terraform has exited, the processes it left behind
// (which may hold the pipes open) are swept before the output is read to its end.
func (tf *terraform) run(ctx context.Context, captureStdout bool, args ...string) (stdout []byte, output string, err error) {
	cmd := exec.CommandContext(ctx, tf.bin, args...)
	cmd.Dir = tf.dir
	cmd.Env = tf.env
	cmd.Stdin = nil
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = interruptGrace

	var out, so bytes.Buffer
	human := tf.scrub.Writer(io.MultiWriter(tf.stderr, &out))
	var readers []*os.File
	var copied []chan struct{}
	pipe := func(dst io.Writer) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("terraform %s: %w", args[0], err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = io.Copy(dst, r)
		}()
		readers, copied = append(readers, r), append(copied, done)
		return w, nil
	}
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()
	hw, err := pipe(human)
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr, cmd.Stdout = hw, hw
	writers := []*os.File{hw}
	if captureStdout {
		sw, err := pipe(&so)
		if err != nil {
			hw.Close()
			return nil, "", err
		}
		cmd.Stdout = sw
		writers = append(writers, sw)
	}
	err = cmd.Start()
	for _, w := range writers {
		w.Close()
	}
	if err == nil {
		err = cmd.Wait()
	}
	serr := sweepStrays()
	drained := time.After(interruptGrace)
	for _, done := range copied {
		select {
		case <-done:
		case <-drained:
			// A process outside the runner's reach still holds the pipe: stop reading.
			for _, r := range readers {
				r.Close()
			}
			<-done
		}
	}
	// Flush the last line if it had no newline. It cannot fail: the stderr writer's errors were
	// already ignored by the copy, and out is a buffer.
	_ = human.Close()
	if serr != nil {
		return nil, out.String(), fmt.Errorf("terraform %s: %w", args[0], serr)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		text := out.String()
		terr := &TerraformError{Command: args[0], Diagnostics: diagnostics(text), Err: err}
		if strings.Contains(text, "Saved plan is stale") {
			return nil, text, fmt.Errorf("%w: %w", ErrStalePlan, terr)
		}
		return nil, text, terr
	}
	return so.Bytes(), out.String(), nil
}

// diagnostics picks Terraform's error summaries ("Error: Saved plan is stale") out of its -no-color output.
func diagnostics(output string) []string {
	var ds []string
	for _, line := range strings.Split(output, "\n") {
		line = strings.TrimSpace(strings.TrimLeft(line, "│╷╵ "))
		if strings.HasPrefix(line, "Error: ") && len(ds) < 5 {
			ds = append(ds, line)
		}
	}
	return ds
}

// TerraformEnv returns the environment Terraform runs with: base without anything that could change what
// Terraform does behind the runner's back, plus the runner's settings. Removed: every TF_* variable except
// TF_CLI_CONFIG_FILE and TF_PLUGIN_CACHE_DIR (TF_CLI_ARGS* would add flags, TF_WORKSPACE would switch the
// state, TF_VAR_* would change inputs, TF_LOG* would dump API traffic, credentials included, to the log)
// and every KUBE_* variable and KUBECONFIG (KUBE_TOKEN or KUBE_HOST would take precedence over the
// per-action kubeconfig). Added: KUBECONFIG and KUBE_CONFIG_PATH pointing at kubeconfig (provider v1.13.4
// reads KUBECONFIG or KUBE_CONFIG, v2 and later read KUBE_CONFIG_PATH), TF_IN_AUTOMATION, TF_INPUT=0,
// CHECKPOINT_DISABLE.
func TerraformEnv(base []string, kubeconfig string) []string {
	env := make([]string, 0, len(base)+5)
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "TF_CLI_CONFIG_FILE", name == "TF_PLUGIN_CACHE_DIR":
		case strings.HasPrefix(name, "TF_"), strings.HasPrefix(name, "KUBE_"), name == "KUBECONFIG", name == "CHECKPOINT_DISABLE":
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"KUBECONFIG="+kubeconfig,
		"KUBE_CONFIG_PATH="+kubeconfig,
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
		"CHECKPOINT_DISABLE=1",
	)
}
