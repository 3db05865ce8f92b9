package cel

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names the fixtures share with the settings.
const (
	testRuntimeClass  = "gvisor"
	testCredVolume    = "agent-sandbox-credentials"
	testTokenVolume   = "agent-sandbox-vault-token"
	testVaultAudience = "vault"
	testAgentName     = "cred-agent"
	testNodeLabel     = "agent-sandbox.io/sandbox"
	testMaxDeadline   = int64(1800)
)

// testSettings returns the policy settings the fixtures are built to satisfy, shaped as
// internal/policy builds them: every toleration field spelt out, empty ones included.
func testSettings() map[string]any {
	return map[string]any{
		"runtimeClassName":         testRuntimeClass,
		"maxDeadlineSeconds":       testMaxDeadline,
		"runAsUser":                int64(65532),
		"vaultAudience":            testVaultAudience,
		"credentialVolume":         testCredVolume,
		"vaultTokenVolume":         testTokenVolume,
		"credentialAgentContainer": testAgentName,
		"nodeSelector":             map[string]any{testNodeLabel: "true"},
		"tolerations": []any{
			map[string]any{"key": testNodeLabel, "operator": "Exists", "value": "", "effect": "NoSchedule"},
		},
	}
}

// hardened is the security context every fixture container carries.
func hardened() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: new(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		Privileged:               new(false),
		ReadOnlyRootFilesystem:   new(true),
		RunAsNonRoot:             new(true),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func limits(cpu, memory string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(cpu),
			corev1.ResourceMemory: resource.MustParse(memory),
		},
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
	}
}

// goodPodSpec is a sandbox pod spec as it leaves the mutating webhook: the tool container,
// the credential agent as a native sidecar, the in-memory credential volume and the
// projected Vault token, with every hardening set.
func goodPodSpec() corev1.PodSpec {
	return corev1.PodSpec{
		RuntimeClassName:             new(testRuntimeClass),
		RestartPolicy:                corev1.RestartPolicyNever,
		ServiceAccountName:           "tool-kubectl-get",
		AutomountServiceAccountToken: new(false),
		EnableServiceLinks:           new(false),
		DNSPolicy:                    corev1.DNSClusterFirst,
		NodeSelector:                 map[string]string{testNodeLabel: "true"},
		Tolerations: []corev1.Toleration{{
			Key: testNodeLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
		}},
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   new(true),
			RunAsUser:      new(int64(65532)),
			RunAsGroup:     new(int64(65532)),
			FSGroup:        new(int64(65532)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		InitContainers: []corev1.Container{{
			Name:          testAgentName,
			Image:         "ghcr.io/agent-sandbox/agent-sandbox:v0.1.0",
			Args:          []string{"cred-agent", "--scope=read-only", "--namespace=demo"},
			RestartPolicy: new(corev1.ContainerRestartPolicyAlways),
			Env: []corev1.EnvVar{
				{Name: "VAULT_ADDR", Value: "http://vault.vault.svc:8200"},
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			},
			Resources:       limits("100m", "64Mi"),
			SecurityContext: hardened(),
			VolumeMounts: []corev1.VolumeMount{
				{Name: testCredVolume, MountPath: "/var/run/agent-sandbox/credentials"},
				{Name: testTokenVolume, MountPath: "/var/run/secrets/vault", ReadOnly: true},
			},
		}},
		Containers: []corev1.Container{{
			Name:    "tool",
			Image:   "ghcr.io/agent-sandbox/agent-sandbox:v0.1.0",
			Command: []string{"/agent-sandbox", "run", "kubectl-get"},
			Args:    []string{"--namespace=demo", "--resource=pods"},
			Env: []corev1.EnvVar{
				{Name: "KUBECONFIG", Value: "/var/run/agent-sandbox/credentials/kubeconfig"},
				{Name: "HOME", Value: "/tmp"},
			},
			Resources:       limits("500m", "256Mi"),
			SecurityContext: hardened(),
			VolumeMounts: []corev1.VolumeMount{
				{Name: testCredVolume, MountPath: "/var/run/agent-sandbox/credentials", ReadOnly: true},
				{Name: "tmp", MountPath: "/tmp"},
				{Name: "params", MountPath: "/etc/agent-sandbox/params", ReadOnly: true},
			},
		}},
		Volumes: []corev1.Volume{
			{Name: testCredVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				Medium: corev1.StorageMediumMemory, SizeLimit: new(resource.MustParse("1Mi")),
			}}},
			{Name: testTokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: testVaultAudience, ExpirationSeconds: new(int64(600)), Path: "token",
				}}},
			}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "params", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "req-0123-params"},
			}}},
		},
	}
}

// goodJob is a sandbox Job that satisfies every default rule.
func goodJob() *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "kubectl-get-0123",
			Namespace: "agent-sandbox",
			Labels:    map[string]string{"agent-sandbox.io/tool": "kubectl_get"},
		},
		Spec: batchv1.JobSpec{
			ActiveDeadlineSeconds:   new(int64(600)),
			BackoffLimit:            new(int32(0)),
			TTLSecondsAfterFinished: new(int32(300)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"agent-sandbox.io/tool": "kubectl_get"}},
				Spec:       goodPodSpec(),
			},
		},
	}
}

// goodPod is the Pod the job controller creates from goodJob.
func goodPod() *corev1.Pod {
	j := goodJob()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      j.Name + "-x7k2p",
			Namespace: j.Namespace,
			Labels:    j.Spec.Template.Labels,
		},
		Spec: j.Spec.Template.Spec,
	}
}
