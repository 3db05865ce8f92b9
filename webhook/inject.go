package webhook

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// credentialVolumeLimit bounds the memory-backed volume that holds the kubeconfig.
var credentialVolumeLimit = resource.MustParse("1Mi")

// vaultTokenSeconds is the lifetime of the projected Vault-audience token; Kubernetes' minimum.
const vaultTokenSeconds = int64(600)

// Inject adds the credential agent to a sandbox pod template: a native sidecar (an init container with
// restartPolicy Always, started after any check init container and ready before the tool), a memory-backed
// volume for the kubeconfig it writes (read-only in the tool container), a projected Vault-audience
// service-account token mounted only in the sidecar, the CA bundles, the tool's result volume (read-only:
// the agent reports the result on its own output stream), KUBECONFIG for the tool, and hardened
// security-context defaults.
//
// The sidecar's image and arguments, the scope and the target namespace come from the policy and the
// validated invocation, never from the object. Inject is pure and idempotent: a template that carries the
// injected marker is returned unchanged, and it reports whether it changed anything.
func Inject(meta *metav1.ObjectMeta, spec *corev1.PodSpec, p *policy.Compiled, inv *policy.Invocation) bool {
	agent := credentialAgent(p, inv.Tool, inv.TargetNamespace, "")
	if WaitsForCredential(inv.Argv) {
		agent.Lifecycle = nil
	}
	return inject(meta, spec, p, agent)
}

// WaitsForCredential reports whether a tool's argv is one of the project's own tool runners
// (`/agent-sandbox run <tool>`), which wait for the credential agent's kubeconfig themselves. Their sidecar
// gets no postStart gate: the kubelet then starts the tool container while the agent logs in to Vault,
// instead of after (the serial gate cost most of 2 s of a cold call: docs/design/measurements.md, "postStart
// gate"). Any other program keeps the gate, so it never
// starts before its credential is there. Either way the tool can use no credential before the agent
// wrote one: the file is its only source.
func WaitsForCredential(argv []string) bool {
	return len(argv) > 0 && argv[0] == contract.BinaryPath && contract.RunsTool(argv[1:])
}

// InjectWarm adds the credential agent to a warm Pod template of tool t: the same sidecar, volumes and
// hardening as Inject, except that the agent learns its target namespace from the Pod's claim (which the
// webhook validated) and does nothing before there is one, and that no postStart hook holds the tool
// container back: the warm entry point must be running, waiting for the claim.
//
// claimKeys (sandbox.FormatClaimKeys) are the public keys of the webhook's claim signatures: the agent and
// the warm entry point get them as --claim-keys and refuse any claim they do not verify. They are part of
// the warm rendering, so a Pod rendered with other keys is not what the policy in force renders (it is
// neither admitted nor claimed, and the pool replaces it).
func InjectWarm(meta *metav1.ObjectMeta, spec *corev1.PodSpec, p *policy.Compiled, t *policy.Tool, claimKeys string) bool {
	if meta.Annotations[contract.AnnotationInjected] == "true" {
		return false
	}
	for i := range spec.Containers {
		if c := &spec.Containers[i]; c.Name == contract.ToolContainer {
			c.Command = append(c.Command, "--claim-keys="+claimKeys)
		}
	}
	return inject(meta, spec, p, credentialAgent(p, t, "", claimKeys))
}

func inject(meta *metav1.ObjectMeta, spec *corev1.PodSpec, p *policy.Compiled, agent corev1.Container) bool {
	if meta.Annotations[contract.AnnotationInjected] == "true" {
		return false
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[contract.AnnotationInjected] = "true"

	ca := &p.Spec.Sandbox.CredentialAgent
	spec.Volumes = append(spec.Volumes, injectedVolumes(ca)...)
	spec.InitContainers = append(spec.InitContainers, agent)
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.Name != contract.ToolContainer {
			continue
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: "KUBECONFIG", Value: contract.KubeconfigPath})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: contract.CredentialVolume, MountPath: contract.CredentialDir, ReadOnly: true})
	}
	harden(spec, p.Spec.Sandbox.RunAsUser)
	return true
}

func injectedVolumes(ca *policy.CredentialAgent) []corev1.Volume {
	v := []corev1.Volume{
		{Name: contract.CredentialVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: &credentialVolumeLimit}}},
		{Name: contract.VaultTokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To(int32(0o400)),
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: ca.VaultAudience, ExpirationSeconds: ptr.To(vaultTokenSeconds), Path: "token"}}},
		}}},
		{Name: contract.APIServerCAVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: ca.APIServerCACertConfigMap}, DefaultMode: ptr.To(int32(0o444))}}},
	}
	if ca.VaultCACertConfigMap != "" {
		v = append(v, corev1.Volume{Name: contract.VaultCAVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: ca.VaultCACertConfigMap}, DefaultMode: ptr.To(int32(0o444))}}})
	}
	return v
}

// credentialAgent renders the injected sidecar for tool t. Its arguments carry the scope and the target
// namespace that the policy derives; `agent-sandbox cred-agent` reads them as flags. An empty namespace
// renders a warm Pod's agent, which reads the namespace from the Pod's validated claim instead.
func credentialAgent(p *policy.Compiled, t *policy.Tool, namespace, claimKeys string) corev1.Container {
	ca := &p.Spec.Sandbox.CredentialAgent
	scope := p.Scope(t.Scope)
	warm := namespace == ""
	target := "--namespace=" + namespace
	if warm {
		target = "--claim-file=" + contract.ClaimPath
	}
	args := []string{
		"/agent-sandbox", "cred-agent",
		"--vault-addr=" + ca.VaultAddress,
		"--auth-mount=" + ca.VaultAuthMount,
		"--auth-role=" + t.VaultAuthRole(),
		"--secrets-mount=" + ca.VaultSecretsMount,
		"--secrets-role=" + scope.VaultSecretsRole(),
		"--scope=" + scope.Name,
		target,
		"--token-file=" + contract.VaultTokenPath,
		"--api-server=" + ca.APIServer,
		"--api-ca-file=" + contract.APIServerCADir + "/ca.crt",
		"--out=" + contract.KubeconfigPath,
		"--result-file=" + contract.ResultPath,
	}
	if warm {
		args = append(args, "--done-file="+contract.DonePath,
			"--claim-keys="+claimKeys, "--claim-spec="+t.ClaimSpec().String())
	}
	mounts := []corev1.VolumeMount{
		{Name: contract.CredentialVolume, MountPath: contract.CredentialDir},
		{Name: contract.VaultTokenVolume, MountPath: contract.VaultTokenDir, ReadOnly: true},
		{Name: contract.APIServerCAVolume, MountPath: contract.APIServerCADir, ReadOnly: true},
		// The tool's result, which the agent reports on its own output once the tool has exited.
		{Name: contract.ResultVolume, MountPath: contract.ResultDir, ReadOnly: true},
	}
	if ca.VaultNamespace != "" {
		// Only when set, so that a policy without one renders the same sidecar as before namespaces existed.
		args = append(args, "--vault-namespace="+ca.VaultNamespace)
	}
	if ca.VaultCACertConfigMap != "" {
		args = append(args, "--vault-ca-file="+contract.VaultCADir+"/ca.crt")
		mounts = append(mounts, corev1.VolumeMount{Name: contract.VaultCAVolume, MountPath: contract.VaultCADir, ReadOnly: true})
	}
	if warm {
		mounts = append(mounts, corev1.VolumeMount{Name: contract.ClaimVolume, MountPath: contract.ClaimDir, ReadOnly: true})
	}
	c := corev1.Container{
		Name:            contract.CredentialAgentContainer,
		Image:           ca.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         args,
		// restartPolicy Always makes this a native sidecar: it starts before the tool, and is stopped
		// (SIGTERM, then it revokes the credential) once the tool has exited, so the Job completes. The
		// kubelet starts the tool only after this postStart hook returns, which it does once the
		// kubeconfig exists; a hook that fails restarts the sidecar, so the tool never runs without its
		// credential. (A startup probe could hold the tool back too, but its one-second period would delay
		// every call; the hook returns the moment the file is there.) The project's own runners and warm
		// Pods go without it: they wait for the file themselves (Inject, WaitsForCredential).
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
			Command: []string{"/agent-sandbox", "cred-agent", "ready", "--file=" + contract.KubeconfigPath, "--wait=60s"}}}},
		Resources:                sandbox.Resources(ca.Resources),
		SecurityContext:          sandbox.HardenedContainerSecurityContext(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		VolumeMounts:             mounts,
	}
	if warm {
		c.Lifecycle = nil
	}
	return c
}

// harden fills security-context fields that are missing; it never loosens one that is set. Whatever it
// leaves unsafe is denied by the admission rules.
func harden(spec *corev1.PodSpec, uid int64) {
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	psc := spec.SecurityContext
	if psc.RunAsNonRoot == nil {
		psc.RunAsNonRoot = ptr.To(true)
	}
	if psc.RunAsUser == nil {
		psc.RunAsUser = ptr.To(uid)
	}
	if psc.SeccompProfile == nil {
		psc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	if spec.AutomountServiceAccountToken == nil {
		spec.AutomountServiceAccountToken = ptr.To(false)
	}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			hardenContainer(&list[i])
		}
	}
}

func hardenContainer(c *corev1.Container) {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	sc := c.SecurityContext
	if sc.AllowPrivilegeEscalation == nil {
		sc.AllowPrivilegeEscalation = ptr.To(false)
	}
	if sc.ReadOnlyRootFilesystem == nil {
		sc.ReadOnlyRootFilesystem = ptr.To(true)
	}
	if sc.Capabilities == nil {
		sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	}
}
