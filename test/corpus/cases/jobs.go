package cases

import (
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// Jobs are the unsafe Jobs: isolation, then exactness, then job-shape cases.
func Jobs() []Job {
	var out []Job
	out = append(out, isolation()...)
	out = append(out, exactness()...)
	return append(out, jobShape()...)
}

// isolation breaks invariant 2, one rule of the policy at a time, in the tool container, the sidecar and
// at pod level, including everything Pod Security "restricted" refuses. The API server accepts each Job
// as it stands (it refuses, say, privileged with allowPrivilegeEscalation false before any webhook).
func isolation() []Job {
	c := func(name, rule string, base Base, m func(*batchv1.Job)) Job {
		return Job{Class: "isolation", Name: name, Rule: rule, Base: base, Mutate: m}
	}
	return []Job{
		c("runc runtime class", "runtime-class", Submitted, func(j *batchv1.Job) { spec(j).RuntimeClassName = ptr.To("runc") }),
		c("no runtime class", "runtime-class", Submitted, func(j *batchv1.Job) { spec(j).RuntimeClassName = nil }),
		c("host network", "no-host-namespaces", Submitted, func(j *batchv1.Job) { spec(j).HostNetwork = true }),
		c("host PID", "no-host-namespaces", Submitted, func(j *batchv1.Job) { spec(j).HostPID = true }),
		c("host IPC", "no-host-namespaces", Submitted, func(j *batchv1.Job) { spec(j).HostIPC = true }),
		// hostPath is also not an allowed volume type.
		c("hostPath volume", "no-host-path,allowed-volume-types", Submitted, func(j *batchv1.Job) {
			spec(j).Volumes = append(spec(j).Volumes, corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}),
		c("secret volume", "allowed-volume-types", Submitted, func(j *batchv1.Job) {
			spec(j).Volumes = append(spec(j).Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "admin"}}})
		}),
		c("persistent volume claim", "allowed-volume-types", Submitted, func(j *batchv1.Job) {
			spec(j).Volumes = append(spec(j).Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
		}),
		c("credential volume on disk", "allowed-volume-types", Injected, func(j *batchv1.Job) {
			volume(j, contract.CredentialVolume).EmptyDir.Medium = ""
		}),
		c("credential volume a ConfigMap, not an emptyDir", "allowed-volume-types", Injected, func(j *batchv1.Job) {
			volume(j, contract.CredentialVolume).VolumeSource = corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "innocent"}}}
		}),
		c("host port", "no-host-ports", Submitted, func(j *batchv1.Job) { tool(j).Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}} }),
		c("host port on the sidecar", "no-host-ports", Injected, func(j *batchv1.Job) {
			sidecar(j).Ports = []corev1.ContainerPort{{ContainerPort: 8200, HostPort: 8200}}
		}),
		c("privileged tool", "not-privileged,no-privilege-escalation", Submitted, func(j *batchv1.Job) {
			tool(j).SecurityContext.Privileged, tool(j).SecurityContext.AllowPrivilegeEscalation = ptr.To(true), ptr.To(true)
		}),
		c("privileged sidecar (init container)", "not-privileged,no-privilege-escalation", Injected, func(j *batchv1.Job) {
			sidecar(j).SecurityContext.Privileged, sidecar(j).SecurityContext.AllowPrivilegeEscalation = ptr.To(true), ptr.To(true)
		}),
		c("privilege escalation", "no-privilege-escalation", Submitted, func(j *batchv1.Job) { tool(j).SecurityContext.AllowPrivilegeEscalation = ptr.To(true) }),
		c("privilege escalation unset on the sidecar", "no-privilege-escalation", Injected, func(j *batchv1.Job) {
			sidecar(j).SecurityContext.AllowPrivilegeEscalation = nil
		}),
		c("capabilities not dropped", "drop-all-capabilities", Submitted, func(j *batchv1.Job) { tool(j).SecurityContext.Capabilities.Drop = nil }),
		c("only NET_RAW dropped", "drop-all-capabilities", Submitted, func(j *batchv1.Job) {
			tool(j).SecurityContext.Capabilities.Drop = []corev1.Capability{"NET_RAW"}
		}),
		c("sidecar without capabilities", "drop-all-capabilities", Injected, func(j *batchv1.Job) { sidecar(j).SecurityContext.Capabilities = nil }),
		c("added capability", "no-added-capabilities", Submitted, func(j *batchv1.Job) {
			tool(j).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}),
		// Pod Security "restricted" allows NET_BIND_SERVICE; the policy allows none.
		c("added NET_BIND_SERVICE", "no-added-capabilities", Submitted, func(j *batchv1.Job) {
			tool(j).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
		}),
		c("SYS_ADMIN added to the sidecar", "no-added-capabilities", Injected, func(j *batchv1.Job) {
			sidecar(j).SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		}),
		c("runs as root", "run-as-non-root", Submitted, func(j *batchv1.Job) {
			podSC(j).RunAsUser, podSC(j).RunAsNonRoot, tool(j).SecurityContext.RunAsNonRoot = ptr.To(int64(0)), ptr.To(false), ptr.To(false)
		}),
		c("pod-level runAsNonRoot false, containers true", "run-as-non-root", Submitted, func(j *batchv1.Job) { podSC(j).RunAsNonRoot = ptr.To(false) }),
		c("tool overrides runAsNonRoot to false", "run-as-non-root", Submitted, func(j *batchv1.Job) {
			tool(j).SecurityContext.RunAsNonRoot = ptr.To(false)
		}),
		c("pod runAsUser 0", "run-as-non-root", Submitted, func(j *batchv1.Job) { podSC(j).RunAsUser = ptr.To(int64(0)) }),
		c("sidecar runAsUser 0", "run-as-non-root", Injected, func(j *batchv1.Job) { sidecar(j).SecurityContext.RunAsUser = ptr.To(int64(0)) }),
		c("runAsNonRoot nowhere", "run-as-non-root", Injected, func(j *batchv1.Job) {
			podSC(j).RunAsNonRoot, tool(j).SecurityContext.RunAsNonRoot, sidecar(j).SecurityContext.RunAsNonRoot = nil, nil, nil
		}),
		c("seccomp unconfined", "seccomp-runtime-default", Submitted, func(j *batchv1.Job) {
			podSC(j).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}),
		c("Localhost seccomp profile on the sidecar", "seccomp-runtime-default", Injected, func(j *batchv1.Job) {
			sidecar(j).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}
		}),
		c("no seccomp profile for the tool", "seccomp-runtime-default", Injected, func(j *batchv1.Job) {
			podSC(j).SeccompProfile, tool(j).SecurityContext.SeccompProfile = nil, nil
		}),
		c("writable root file system", "read-only-root-filesystem", Submitted, func(j *batchv1.Job) { tool(j).SecurityContext.ReadOnlyRootFilesystem = ptr.To(false) }),
		c("writable root file system on the sidecar", "read-only-root-filesystem", Injected, func(j *batchv1.Job) {
			sidecar(j).SecurityContext.ReadOnlyRootFilesystem = ptr.To(false)
		}),
		c("root file system unset on the tool", "read-only-root-filesystem", Injected, func(j *batchv1.Job) {
			tool(j).SecurityContext.ReadOnlyRootFilesystem = nil
		}),
		c("no resource limits", "resource-limits", Submitted, func(j *batchv1.Job) { tool(j).Resources = corev1.ResourceRequirements{} }),
		c("tool limits removed, requests kept", "resource-limits", Submitted, func(j *batchv1.Job) { tool(j).Resources.Limits = nil }),
		c("tool limits only memory", "resource-limits", Submitted, func(j *batchv1.Job) {
			tool(j).Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: tool(j).Resources.Limits[corev1.ResourceMemory].DeepCopy()}
		}),
		c("sidecar without limits (init container)", "resource-limits", Injected, func(j *batchv1.Job) { sidecar(j).Resources = corev1.ResourceRequirements{} }),
		c("sidecar without a CPU limit", "resource-limits", Injected, func(j *batchv1.Job) { delete(sidecar(j).Resources.Limits, corev1.ResourceCPU) }),
		c("no deadline", "deadline", Submitted, func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = nil }),
		c("zero deadline", "deadline", Submitted, func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To(int64(0)) }),
		c("deadline above the policy", "deadline", Submitted, func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To(int64(86400)) }),
		c("pod deadline above the policy", "deadline", Submitted, func(j *batchv1.Job) { spec(j).ActiveDeadlineSeconds = ptr.To(int64(86400)) }),
		c("sysctls", "no-sysctls", Submitted, func(j *batchv1.Job) {
			podSC(j).Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}
		}),
		// The API server allows an unmasked /proc only in a user namespace.
		c("unmasked procMount", "default-proc-mount", Submitted, func(j *batchv1.Job) {
			spec(j).HostUsers = ptr.To(false)
			tool(j).SecurityContext.ProcMount = ptr.To(corev1.UnmaskedProcMount)
		}),
		c("credential in an env var", "no-credentials-in-env", Submitted, func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "KUBE_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "admin-token"}, Key: "token"}}})
		}),
		c("Secret as the sidecar's envFrom", "no-credentials-in-env", Injected, func(j *batchv1.Job) {
			sidecar(j).EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "vault"}}}}
		}),
		c("literal VAULT_TOKEN on the sidecar", "no-credentials-in-env", Injected, func(j *batchv1.Job) {
			sidecar(j).Env = append(sidecar(j).Env, corev1.EnvVar{Name: "VAULT_TOKEN", Value: "hvs.CAESIJ"})
		}),
		c("literal API key in the tool's env", "no-credentials-in-env", Submitted, func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "OpenAI_ApiKey", Value: "sk-x"})
		}),
		c("literal password in the tool's env", "no-credentials-in-env", Submitted, func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "db_password", Value: "hunter2"})
		}),
		c("extra projected service-account token", "service-account-token", Submitted, func(j *batchv1.Job) {
			spec(j).Volumes = append(spec(j).Volumes, corev1.Volume{Name: "api-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3600))}}}}}})
		}),
		c("second Vault-audience token", "service-account-token", Injected, func(j *batchv1.Job) {
			aud := vaultToken(j).Audience
			spec(j).Volumes = append(spec(j).Volumes, corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: aud, Path: "token"}}}}}})
		}),
		c("Vault token with the API server's audience", "service-account-token", Injected, func(j *batchv1.Job) { vaultToken(j).Audience = "" }),
		c("Secret projected beside the Vault token", "service-account-token", Injected, func(j *batchv1.Job) {
			v := volume(j, contract.VaultTokenVolume)
			v.Projected.Sources = append(v.Projected.Sources, corev1.VolumeProjection{
				Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "admin"}}})
		}),
		c("automounted API token", "service-account-token", Submitted, func(j *batchv1.Job) { spec(j).AutomountServiceAccountToken = ptr.To(true) }),
		// Unset, the API server's ServiceAccount admission would mount the API token into the Pod.
		c("automountServiceAccountToken unset", "service-account-token", Injected, func(j *batchv1.Job) { spec(j).AutomountServiceAccountToken = nil }),
		c("Vault token mounted in the tool", "vault-token-sidecar-only", Injected, func(j *batchv1.Job) {
			tool(j).VolumeMounts = append(tool(j).VolumeMounts, corev1.VolumeMount{Name: contract.VaultTokenVolume, MountPath: "/vault"})
		}),
		c("shared process namespace", "no-shared-process-namespace", Submitted, func(j *batchv1.Job) { spec(j).ShareProcessNamespace = ptr.To(true) }),
		c("hostAliases for the Vault name", "no-dns-overrides", Submitted, func(j *batchv1.Job) {
			spec(j).HostAliases = []corev1.HostAlias{{IP: "10.0.0.66", Hostnames: []string{"vault"}}}
		}),
		c("custom nameserver", "no-dns-overrides", Submitted, func(j *batchv1.Job) {
			spec(j).DNSPolicy = corev1.DNSNone
			spec(j).DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.66"}}
		}),
		c("AppArmor unconfined", "apparmor", Submitted, func(j *batchv1.Job) {
			tool(j).SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}),
		c("AppArmor unconfined by annotation", "apparmor", Submitted, func(j *batchv1.Job) {
			if j.Spec.Template.Annotations == nil {
				j.Spec.Template.Annotations = map[string]string{}
			}
			j.Spec.Template.Annotations["container.apparmor.security.beta.kubernetes.io/tool"] = "unconfined"
		}),
		c("SELinux spc_t", "selinux", Submitted, func(j *batchv1.Job) { podSC(j).SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} }),
		c("SELinux user", "selinux", Submitted, func(j *batchv1.Job) {
			tool(j).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"}
		}),
		c("SELinux user on the sidecar", "selinux", Injected, func(j *batchv1.Job) {
			sidecar(j).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"}
		}),
		// The API server allows a Windows hostProcess Pod only in the host network.
		c("Windows hostProcess", "no-host-namespaces,no-host-process", Submitted, func(j *batchv1.Job) {
			podSC(j).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
			spec(j).HostNetwork = true
		}),
		c("probe aimed at another host", "no-host-in-probes-and-hooks", Submitted, func(j *batchv1.Job) {
			tool(j).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Port: intstr.FromInt32(80)}}}
		}),
		c("readiness probe aimed at another host", "no-host-in-probes-and-hooks", Submitted, func(j *batchv1.Job) {
			tool(j).ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "10.0.0.1", Port: intstr.FromInt32(80)}}}
		}),
		c("preStop hook aimed at another host", "no-host-in-probes-and-hooks", Submitted, func(j *batchv1.Job) {
			tool(j).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Host: "evil", Port: intstr.FromInt32(80)}}}
		}),
	}
}

// exactness breaks invariant 3: fields the policy never renders, each admitted before exactness was total,
// and tampering with what it does render.
func exactness() []Job {
	c := func(name, rule string, base Base, m func(*batchv1.Job)) Job {
		return Job{Class: "exactness", Name: name, Rule: rule, Base: base, Mutate: m}
	}
	return []Job{
		c("wrong image", "exact-image", Submitted, func(j *batchv1.Job) { tool(j).Image = "localhost/busybox:agent-sandbox" }),
		c("extra argument", "exact-command", Submitted, func(j *batchv1.Job) { tool(j).Command = append(tool(j).Command, "--all-namespaces") }),
		c("other command", "exact-command", Submitted, func(j *batchv1.Job) {
			tool(j).Command = []string{"/bin/sh", "-c", "cat /var/run/agent-sandbox/credentials/kubeconfig"}
		}),
		c("args appended", "exact-command", Submitted, func(j *batchv1.Job) { tool(j).Args = []string{"--all-namespaces"} }),
		c("shell-injected parameter", "invalid-parameters", Submitted, func(j *batchv1.Job) { setParams(j, `{"namespace":"demo-app; rm -rf /"}`) }),
		c("sidecar scope tampered", "exact-command", Injected, func(j *batchv1.Job) {
			for i, a := range sidecar(j).Command {
				if strings.HasPrefix(a, "--secrets-role=") {
					sidecar(j).Command[i] = "--secrets-role=agent-sandbox-terraform-apply"
				}
			}
		}),
		c("sidecar target namespace tampered", "exact-command", Injected, func(j *batchv1.Job) {
			for i, a := range sidecar(j).Command {
				if strings.HasPrefix(a, "--namespace=") {
					sidecar(j).Command[i] = "--namespace=kube-system"
				}
			}
		}),
		c("sidecar image swapped", "exact-image", Injected, func(j *batchv1.Job) { sidecar(j).Image = "localhost/busybox:agent-sandbox" }),
		c("wrong service account", "service-account", Submitted, func(j *batchv1.Job) { spec(j).ServiceAccountName = "default" }),
		// The command agrees with the tampered parameters: the refusal is the policy's namespace list.
		c("target namespace kube-system", "namespace-not-allowed", Submitted, func(j *batchv1.Job) {
			setParams(j, `{"namespace":"kube-system"}`)
			tool(j).Command[3] = "--namespace=kube-system"
		}),
		c("unknown tool label", "unknown-tool", Submitted, func(j *batchv1.Job) {
			j.Labels[contract.LabelTool], j.Spec.Template.Labels[contract.LabelTool] = "kubectl_exec", "kubectl_exec"
		}),
		c("no tool label", "no-tool-label", Submitted, func(j *batchv1.Job) {
			delete(j.Labels, contract.LabelTool)
			delete(j.Spec.Template.Labels, contract.LabelTool)
		}),
		c("pod template's tool label differs from the Job's", "exact-metadata", Submitted, func(j *batchv1.Job) {
			j.Spec.Template.Labels[contract.LabelTool] = "terraform_plan"
		}),
		c("request ID label that is not one", "exact-metadata", Submitted, func(j *batchv1.Job) {
			j.Labels[contract.LabelRequestID], j.Spec.Template.Labels[contract.LabelRequestID] = "x", "x"
		}),
		c("Job name not derived from its request", "exact-metadata", Submitted, func(j *batchv1.Job) { j.Name = "as-k8s-get-pod-status-mine" }),
		c("extra pod label (a Service could select it)", "exact-metadata", Submitted, func(j *batchv1.Job) { j.Spec.Template.Labels["app"] = "web" }),
		c("extra Job annotation", "exact-metadata", Submitted, func(j *batchv1.Job) { j.Annotations["example.com/note"] = "x" }),
		c("no audit chain head (the call would leave no anchor)", "exact-metadata", Submitted, func(j *batchv1.Job) { delete(j.Annotations, contract.AnnotationAuditHead) }),
		c("empty audit chain head", "exact-metadata", Submitted, func(j *batchv1.Job) { j.Annotations[contract.AnnotationAuditHead] = "" }),
		c("audit chain head that is not a hash", "exact-metadata", Submitted, func(j *batchv1.Job) { j.Annotations[contract.AnnotationAuditHead] = "HEAD" }),
		c("audit chain head in upper case", "exact-metadata", Submitted, func(j *batchv1.Job) {
			j.Annotations[contract.AnnotationAuditHead] = strings.ToUpper(j.Annotations[contract.AnnotationAuditHead])
		}),
		c("audit chain head one digit short", "exact-metadata", Submitted, func(j *batchv1.Job) {
			j.Annotations[contract.AnnotationAuditHead] = j.Annotations[contract.AnnotationAuditHead][1:]
		}),
		c("audit chain head with a trailing newline", "exact-metadata", Submitted, func(j *batchv1.Job) {
			j.Annotations[contract.AnnotationAuditHead] += "\n"
		}),
		c("audit chain head on the pod template too", "exact-metadata", Submitted, func(j *batchv1.Job) {
			j.Spec.Template.Annotations[contract.AnnotationAuditHead] = j.Annotations[contract.AnnotationAuditHead]
		}),
		// The webhook refuses any token on a tool that takes none before it reads the token, so a real
		// approval and a token-shaped string meet the same refusal.
		c("approval token on a read tool", "exact-metadata", Submitted, func(j *batchv1.Job) {
			j.Annotations[contract.AnnotationApprovalToken] = "x.y.z"
			j.Spec.Template.Annotations[contract.AnnotationApprovalToken] = "x.y.z"
		}),
		c("finalizer on the Job", "exact-metadata", Submitted, func(j *batchv1.Job) { j.Finalizers = []string{"example.com/keep"} }),
		c("owner reference on the Job", "exact-metadata", Submitted, func(j *batchv1.Job) {
			j.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "00000000-0000-4000-8000-000000000000"}}
		}),
		c("extra environment variable", "exact-pod-spec", Submitted, func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "HTTPS_PROXY", Value: "http://10.0.0.66:3128"})
		}),
		c("bigger memory limit", "exact-pod-spec", Submitted, func(j *batchv1.Job) {
			tool(j).Resources.Limits[corev1.ResourceMemory] = resource.MustParse("3Gi")
			tool(j).Resources.Requests[corev1.ResourceMemory] = resource.MustParse("3Gi")
		}),
		// The policy's CPU request is smaller than its limit (cpuRequest): a submitter that reserves the whole
		// limit (a node's CPU held idle) or less than the policy asks (more sandboxes packed) is refused alike.
		c("CPU request raised to the limit", "exact-pod-spec", Submitted, func(j *batchv1.Job) {
			tool(j).Resources.Requests[corev1.ResourceCPU] = tool(j).Resources.Limits[corev1.ResourceCPU].DeepCopy()
		}),
		c("CPU request lowered to 1m", "exact-pod-spec", Submitted, func(j *batchv1.Job) {
			tool(j).Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1m")
		}),
		c("priorityClassName system-node-critical", "exact-pod-spec", Submitted, func(j *batchv1.Job) { spec(j).PriorityClassName = "system-node-critical" }),
		c("terminationGracePeriodSeconds 86400", "exact-pod-spec", Submitted, func(j *batchv1.Job) { spec(j).TerminationGracePeriodSeconds = ptr.To(int64(86400)) }),
		c("runAsGroup 0", "exact-pod-spec", Submitted, func(j *batchv1.Job) { podSC(j).RunAsGroup = ptr.To(int64(0)) }),
		c("supplementalGroups 0", "exact-pod-spec", Submitted, func(j *batchv1.Job) { podSC(j).SupplementalGroups = []int64{0} }),
		c("fsGroup 0", "exact-pod-spec", Submitted, func(j *batchv1.Job) { podSC(j).FSGroup = ptr.To(int64(0)) }),
		c("dnsPolicy Default", "exact-pod-spec", Submitted, func(j *batchv1.Job) { spec(j).DNSPolicy = corev1.DNSDefault }),
		c("hostname", "exact-pod-spec", Submitted, func(j *batchv1.Job) { spec(j).Hostname = "vault" }),
		c("pod OS", "exact-pod-spec", Submitted, func(j *batchv1.Job) { spec(j).OS = &corev1.PodOS{Name: corev1.Linux} }),
		c("imagePullPolicy Always", "exact-pod-spec", Submitted, func(j *batchv1.Job) { tool(j).ImagePullPolicy = corev1.PullAlways }),
		c("terminationMessagePath onto the credential", "exact-pod-spec", Submitted, func(j *batchv1.Job) {
			tool(j).TerminationMessagePath = "/var/run/agent-sandbox/credentials/kubeconfig"
		}),
		c("exec liveness probe", "exact-pod-spec", Submitted, func(j *batchv1.Job) {
			tool(j).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: exec("sh", "-c", "cat /var/run/agent-sandbox/credentials/kubeconfig")}}
		}),
		c("exec readiness probe", "exact-pod-spec", Submitted, func(j *batchv1.Job) {
			tool(j).ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: exec("true")}}
		}),
		c("exec startup probe on the sidecar", "exact-pod-spec", Injected, func(j *batchv1.Job) {
			sidecar(j).StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: exec("true")}}
		}),
		c("postStart hook on the tool", "exact-pod-spec", Submitted, func(j *batchv1.Job) {
			tool(j).Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: exec("sh", "-c", "cat /var/run/agent-sandbox/credentials/kubeconfig")}}
		}),
		c("preStop hook on the sidecar", "exact-pod-spec", Injected, func(j *batchv1.Job) {
			lifecycle(sidecar(j)).PreStop = &corev1.LifecycleHandler{Exec: exec("true")}
		}),
		// The project's runners wait for the credential themselves, so their sidecar has no postStart gate:
		// a hook there would run a command in the container that holds the Vault token.
		c("postStart hook on the sidecar copying the Vault token", "exact-pod-spec", Injected, func(j *batchv1.Job) {
			lifecycle(sidecar(j)).PostStart = &corev1.LifecycleHandler{Exec: exec("sh", "-c", "cat /var/run/agent-sandbox/vault/token > /var/run/agent-sandbox/credentials/t")}
		}),
		c("stdin", "exact-pod-spec", Submitted, func(j *batchv1.Job) { tool(j).Stdin = true }),
		c("tty", "exact-pod-spec", Submitted, func(j *batchv1.Job) { tool(j).TTY = true }),
		c("workingDir", "exact-pod-spec", Submitted, func(j *batchv1.Job) { tool(j).WorkingDir = "/tmp" }),
		c("restartPolicy on the tool container", "exact-pod-spec", Submitted, func(j *batchv1.Job) {
			tool(j).RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		}),
		c("container port", "exact-pod-spec", Submitted, func(j *batchv1.Job) { tool(j).Ports = []corev1.ContainerPort{{ContainerPort: 8080}} }),
		c("nodeName pinned", "exact-pod-spec", Submitted, func(j *batchv1.Job) { spec(j).NodeName = "control-plane" }),
		c("node affinity", "exact-pod-spec", Submitted, func(j *batchv1.Job) {
			spec(j).Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpExists}}}}}}}
		}),
		c("node affinity to one node by name", "exact-pod-spec", Submitted, func(j *batchv1.Job) {
			spec(j).Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"control-plane"}}}}}}}}
		}),
		c("another scheduler", "exact-pod-spec", Submitted, func(j *batchv1.Job) { spec(j).SchedulerName = "my-scheduler" }),
		c("service links", "exact-pod-spec", Submitted, func(j *batchv1.Job) { spec(j).EnableServiceLinks = ptr.To(true) }),
		c("image pull secret", "exact-pod-spec", Submitted, func(j *batchv1.Job) { spec(j).ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}} }),
		c("ConfigMap volume mode 0777", "exact-pod-spec", Injected, func(j *batchv1.Job) {
			n := 0
			for i := range spec(j).Volumes {
				if cm := spec(j).Volumes[i].ConfigMap; cm != nil {
					cm.DefaultMode = ptr.To(int32(0o777))
					n++
				}
			}
			if n == 0 {
				panic("cases: the injected Job has no ConfigMap volume")
			}
		}),
		c("writable credential mount", "exact-pod-spec", Injected, func(j *batchv1.Job) {
			for i := range tool(j).VolumeMounts {
				if tool(j).VolumeMounts[i].Name == contract.CredentialVolume {
					tool(j).VolumeMounts[i].ReadOnly = false
				}
			}
		}),
		c("sidecar removed, marker kept", "exact-pod-spec", Injected, func(j *batchv1.Job) { spec(j).InitContainers = nil }),
	}
}

// jobShape changes Job-level fields: one admitted Job runs once, now and later. Where the API server
// accepts a field only with others (successPolicy only for an Indexed Job), the case sets those too.
func jobShape() []Job {
	c := func(name string, m func(*batchv1.Job)) Job {
		return Job{Class: "job-shape", Name: name, Rule: "job-shape", Base: Submitted, Mutate: m}
	}
	return []Job{
		// Issue 9's first finding: the Job controller made three Pods for one admitted Job.
		c("podFailurePolicy that ignores failures", func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0}}}}}
			j.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
		}),
		c("successPolicy", func(j *batchv1.Job) {
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To(int32(1))}}}
		}),
		c("managedBy another controller", func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To("example.com/my-controller") }),
		c("created suspended", func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(true) }),
		c("parallelism 3", func(j *batchv1.Job) { j.Spec.Parallelism = ptr.To(int32(3)) }),
		c("completions 3", func(j *batchv1.Job) { j.Spec.Completions = ptr.To(int32(3)) }),
		c("completions 3, parallelism 3", func(j *batchv1.Job) { j.Spec.Completions = ptr.To(int32(3)); j.Spec.Parallelism = ptr.To(int32(3)) }),
		c("backoffLimit 6", func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To(int32(6)) }),
		c("indexed completion", func(j *batchv1.Job) { j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion) }),
		c("podReplacementPolicy Failed", func(j *batchv1.Job) { j.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed) }),
		c("ttlSecondsAfterFinished of a year", func(j *batchv1.Job) { j.Spec.TTLSecondsAfterFinished = ptr.To(int32(31536000)) }),
		c("backoffLimitPerIndex", func(j *batchv1.Job) {
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
			j.Spec.BackoffLimit = nil
			j.Spec.BackoffLimitPerIndex = ptr.To(int32(2))
		}),
		c("maxFailedIndexes", func(j *batchv1.Job) {
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
			j.Spec.Completions = ptr.To(int32(1))
			j.Spec.BackoffLimit = nil
			j.Spec.BackoffLimitPerIndex = ptr.To(int32(0))
			j.Spec.MaxFailedIndexes = ptr.To(int32(1))
		}),
		// A selector of the submitter's choosing: with manualSelector the API server takes it as given.
		c("manual selector", func(j *batchv1.Job) {
			j.Spec.ManualSelector = ptr.To(true)
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{contract.LabelTool: j.Spec.Template.Labels[contract.LabelTool]}}
		}),
		c("deadline above the tool's", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To(int64(900)) }),
	}
}
