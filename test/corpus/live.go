package corpus

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
)

// LoadApprover reads an approver key the corpus signs with (Env.Approver, Env.Second) from the key file
// `agent-sandbox keygen` wrote and the file holding its passphrase; white space around the passphrase is
// not part of it.
func LoadApprover(keyFile, passphraseFile string) (*approval.PrivateKey, error) {
	pass, err := os.ReadFile(passphraseFile)
	if err != nil {
		return nil, err
	}
	return approval.LoadPrivateKey(keyFile, []byte(strings.TrimSpace(string(pass))))
}

// ClientConfig is the client configuration of kubeconfig as the corpus's runs against a live cluster use
// it (see tuned).
func ClientConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	tuned(cfg)
	return cfg, nil
}

// tuned silences the API server's warnings, which the corpus triggers on purpose (Pod Security's, for one:
// the refusals are what is checked), and raises the client's rate limit for the corpus's bursts of requests.
func tuned(cfg *rest.Config) {
	cfg.WarningHandler = rest.NoWarnings{}
	cfg.QPS, cfg.Burst = 50, 100
}
