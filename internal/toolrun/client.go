package toolrun

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// userAgent identifies the runner in the API server's audit log.
const userAgent = "agent-sandbox-runner"

// NewClient builds a clientset from the per-action kubeconfig file.
func NewClient(kubeconfig string) (kubernetes.Interface, error) {
	if err := checkKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load the kubeconfig file %s (%w)", kubeconfig, err)
	}
	cfg.UserAgent = userAgent
	cfg.Dial = retryingDial
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, nil
}

// dialAttempts and dialTimeout bound connecting to the API server: a connection whose SYN goes unanswered
// is abandoned after dialTimeout and tried again from a new source port. (On the local cluster a SYN from a
// sandbox to the API server is, rarely, never answered; a fresh connection is.) Nothing has been sent on a
// connection that was not established, so retrying is safe for every request.
const (
	dialAttempts = 4
	dialTimeout  = 5 * time.Second
)

func retryingDial(ctx context.Context, network, addr string) (net.Conn, error) {
	var err error
	for i := 0; i < dialAttempts; i++ {
		var c net.Conn
		d := net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
		if c, err = d.DialContext(ctx, network, addr); err == nil {
			return c, nil
		}
		var ne net.Error
		if ctx.Err() != nil || !errors.As(err, &ne) || !ne.Timeout() {
			return nil, err
		}
	}
	return nil, err
}

// checkKubeconfig says clearly when the credential is missing. Its wording keeps the path away from a
// following ':' so that secret scrubbing, which redacts "...kubeconfig: value", leaves the message readable.
func checkKubeconfig(path string) error {
	if path == "" {
		return errors.New("no kubeconfig file given (set KUBECONFIG)")
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("no kubeconfig file at %s (the credential agent writes it)", path)
	case err != nil:
		return fmt.Errorf("kubeconfig file %s unreadable (%w)", path, err)
	case fi.IsDir():
		return fmt.Errorf("kubeconfig file %s is a directory", path)
	}
	return nil
}

// KubeconfigScrubber returns a Scrubber for the secrets in the per-action kubeconfig (tokens and
// passwords; client keys are PEM blocks, which the patterns cover), so that Terraform's output is
// scrubbed by the exact value issued (invariant 6). A secret that cannot be scrubbed by value is an
// error: Terraform does not run with a credential whose value could leak unrecognised.
func KubeconfigScrubber(path string) (*scrub.Scrubber, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the kubeconfig file %s to scrub by its credential (%w)", path, err)
	}
	var secrets [][]byte
	for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
		ai := cfg.AuthInfos[name]
		for _, v := range []string{ai.Token, ai.Password} {
			if v != "" {
				secrets = append(secrets, []byte(v))
			}
		}
	}
	sc, err := scrub.New(secrets...)
	if err != nil {
		return nil, fmt.Errorf("the credential in the kubeconfig file %s cannot be scrubbed by value (%w)", path, err)
	}
	return sc, nil
}
