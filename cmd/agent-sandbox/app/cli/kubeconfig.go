package cli

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig loads the kubeconfig a person gave a command, the way kubectl finds it: the file kubeconfig
// (--kubeconfig), else $KUBECONFIG, else ~/.kube/config, at context (--context), else at the file's current
// context. It never prompts for anything missing. Callers say in their error which flag was wrong.
func RESTConfig(kubeconfig, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
}
