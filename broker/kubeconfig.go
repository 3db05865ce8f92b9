package broker

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigMode is the mode of the written kubeconfig: readable by its owner only, and not writable, so
// a tool cannot swap it for another.
const KubeconfigMode os.FileMode = 0o400

// kubeconfigName names the cluster, user and context inside the kubeconfig.
const kubeconfigName = "agent-sandbox"

// RenderKubeconfig returns a kubeconfig that talks to server, trusts caPEM and authenticates with the
// credential's token; its context's namespace is the credential's namespace.
func RenderKubeconfig(server string, caPEM []byte, cred *Credential) ([]byte, error) {
	if server == "" {
		return nil, errors.New("render kubeconfig: no API server URL")
	}
	if len(caPEM) == 0 {
		return nil, errors.New("render kubeconfig: no API server CA")
	}
	if cred == nil || cred.Token == "" {
		return nil, errors.New("render kubeconfig: no token")
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[kubeconfigName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[kubeconfigName] = &clientcmdapi.AuthInfo{Token: cred.Token}
	cfg.Contexts[kubeconfigName] = &clientcmdapi.Context{
		Cluster:   kubeconfigName,
		AuthInfo:  kubeconfigName,
		Namespace: cred.Namespace,
	}
	cfg.CurrentContext = kubeconfigName
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		// clientcmd's errors do not contain the token, but scrubbing is cheap insurance for the caller.
		return nil, fmt.Errorf("render kubeconfig: %w", err)
	}
	return out, nil
}
