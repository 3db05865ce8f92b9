package sandbox

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// LabelWorkspace marks the ConfigMaps that carry a Terraform workspace's files into sandboxes.
const LabelWorkspace = "agent-sandbox.dev/workspace"

// Workspaces publishes workspace files as immutable ConfigMaps in the sandbox namespace.
type Workspaces struct {
	Client    kubernetes.Interface
	Namespace string
}

// EnsureWorkspace creates the ConfigMap, or accepts an existing one of that name: names are
// content-addressed, so the same name means the same files.
func (w *Workspaces) EnsureWorkspace(ctx context.Context, name string, files map[string]string) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace, Labels: map[string]string{LabelWorkspace: "true"}},
		Data:       files,
		Immutable:  ptr.To(true),
	}
	_, err := w.Client.CoreV1().ConfigMaps(w.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ConfigMap %s: %w", name, classifyCreate(err))
	}
	return nil
}
