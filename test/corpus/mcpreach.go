package corpus

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// MCPReach checks the reach of a client holding the MCP server's kubeconfig (as `agent-sandbox kubeconfig
// refresh` writes it): it may list Jobs in the sandbox namespace sandboxNS, and is forbidden the Secrets
// there and the Pods and Jobs of kube-system. It returns every way the client's reach differs.
func MCPReach(ctx context.Context, cs kubernetes.Interface, sandboxNS string) error {
	var errs []error
	if _, err := cs.BatchV1().Jobs(sandboxNS).List(ctx, metav1.ListOptions{}); err != nil {
		errs = append(errs, fmt.Errorf("list Jobs in %s with the MCP kubeconfig: %w", sandboxNS, err))
	}
	forbidden := func(what string, err error) {
		if !apierrors.IsForbidden(err) {
			errs = append(errs, fmt.Errorf("list %s: %v, want forbidden", what, err))
		}
	}
	_, err := cs.CoreV1().Secrets(sandboxNS).List(ctx, metav1.ListOptions{})
	forbidden("Secrets in "+sandboxNS, err)
	_, err = cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	forbidden("Pods in kube-system", err)
	_, err = cs.BatchV1().Jobs("kube-system").List(ctx, metav1.ListOptions{})
	forbidden("Jobs in kube-system", err)
	return errors.Join(errs...)
}
