package corpus

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

func spec(j *batchv1.Job) *corev1.PodSpec      { return &j.Spec.Template.Spec }
func tool(j *batchv1.Job) *corev1.Container    { return &j.Spec.Template.Spec.Containers[0] }
func sidecar(j *batchv1.Job) *corev1.Container { return &j.Spec.Template.Spec.InitContainers[0] }

// lifecycle is c's lifecycle, made if it has none.
func lifecycle(c *corev1.Container) *corev1.Lifecycle {
	if c.Lifecycle == nil {
		c.Lifecycle = &corev1.Lifecycle{}
	}
	return c.Lifecycle
}
func podSC(j *batchv1.Job) *corev1.PodSecurityContext { return j.Spec.Template.Spec.SecurityContext }

func setParams(j *batchv1.Job, p string) {
	j.Annotations[contract.AnnotationParams] = p
	j.Spec.Template.Annotations[contract.AnnotationParams] = p
}

// isolationCases break invariant 2, one CEL rule at a time, in the tool container, the sidecar and at
// pod level, including everything Pod Security "restricted" refuses.
func (e *Env) isolationCases() []Case {
	pod := func() *batchv1.Job { return e.Job("k8s_get_pod_status", PodParams(), "") }
	injected := func() *batchv1.Job { return e.Injected("k8s_get_pod_status", PodParams()) }
	c := func(name, rule string, m func(*batchv1.Job), base func() *batchv1.Job) Case {
		return e.jobCase("isolation", name, rule, m, base)
	}
	return []Case{
		c("runc runtime class", "runtime-class", func(j *batchv1.Job) { spec(j).RuntimeClassName = ptr.To("runc") }, pod),
		c("no runtime class", "runtime-class", func(j *batchv1.Job) { spec(j).RuntimeClassName = nil }, pod),
		c("host network", "no-host-namespaces", func(j *batchv1.Job) { spec(j).HostNetwork = true }, pod),
		c("host PID", "no-host-namespaces", func(j *batchv1.Job) { spec(j).HostPID = true }, pod),
		c("host IPC", "no-host-namespaces", func(j *batchv1.Job) { spec(j).HostIPC = true }, pod),
		c("hostPath volume", "no-host-path", func(j *batchv1.Job) {
			spec(j).Volumes = append(spec(j).Volumes, corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}, pod),
		c("secret volume", "allowed-volume-types", func(j *batchv1.Job) {
			spec(j).Volumes = append(spec(j).Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "admin"}}})
		}, pod),
		c("host port", "no-host-ports", func(j *batchv1.Job) { tool(j).Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}} }, pod),
		// The API server itself refuses privileged together with allowPrivilegeEscalation: false.
		c("privileged tool", "not-privileged", func(j *batchv1.Job) {
			tool(j).SecurityContext.Privileged, tool(j).SecurityContext.AllowPrivilegeEscalation = ptr.To(true), ptr.To(true)
		}, pod),
		c("privileged sidecar (init container)", "not-privileged", func(j *batchv1.Job) {
			sidecar(j).SecurityContext.Privileged, sidecar(j).SecurityContext.AllowPrivilegeEscalation = ptr.To(true), ptr.To(true)
		}, injected),
		c("privilege escalation", "no-privilege-escalation", func(j *batchv1.Job) { tool(j).SecurityContext.AllowPrivilegeEscalation = ptr.To(true) }, pod),
		c("capabilities not dropped", "drop-all-capabilities", func(j *batchv1.Job) { tool(j).SecurityContext.Capabilities.Drop = nil }, pod),
		c("added capability", "no-added-capabilities", func(j *batchv1.Job) {
			tool(j).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, pod),
		c("runs as root", "run-as-non-root", func(j *batchv1.Job) {
			podSC(j).RunAsUser, podSC(j).RunAsNonRoot, tool(j).SecurityContext.RunAsNonRoot = ptr.To(int64(0)), ptr.To(false), ptr.To(false)
		}, pod),
		c("pod-level runAsNonRoot false, containers true", "run-as-non-root", func(j *batchv1.Job) { podSC(j).RunAsNonRoot = ptr.To(false) }, pod),
		c("sidecar runAsUser 0", "run-as-non-root", func(j *batchv1.Job) { sidecar(j).SecurityContext.RunAsUser = ptr.To(int64(0)) }, injected),
		c("seccomp unconfined", "seccomp-runtime-default", func(j *batchv1.Job) {
			podSC(j).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, pod),
		c("writable root file system", "read-only-root-filesystem", func(j *batchv1.Job) { tool(j).SecurityContext.ReadOnlyRootFilesystem = ptr.To(false) }, pod),
		c("no resource limits", "resource-limits", func(j *batchv1.Job) { tool(j).Resources = corev1.ResourceRequirements{} }, pod),
		c("sidecar without limits (init container)", "resource-limits", func(j *batchv1.Job) { sidecar(j).Resources = corev1.ResourceRequirements{} }, injected),
		c("no deadline", "deadline", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = nil }, pod),
		c("deadline above the policy", "deadline", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To(int64(86400)) }, pod),
		c("sysctls", "no-sysctls", func(j *batchv1.Job) {
			podSC(j).Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}
		}, pod),
		// The API server allows an unmasked /proc only in a user namespace.
		c("unmasked procMount", "default-proc-mount", func(j *batchv1.Job) {
			spec(j).HostUsers = ptr.To(false)
			tool(j).SecurityContext.ProcMount = ptr.To(corev1.UnmaskedProcMount)
		}, pod),
		c("credential in an env var", "no-credentials-in-env", func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "KUBE_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "admin-token"}, Key: "token"}}})
		}, pod),
		c("extra projected service-account token", "service-account-token", func(j *batchv1.Job) {
			spec(j).Volumes = append(spec(j).Volumes, corev1.Volume{Name: "api-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3600))}}}}}})
		}, pod),
		c("automounted API token", "service-account-token", func(j *batchv1.Job) { spec(j).AutomountServiceAccountToken = ptr.To(true) }, pod),
		c("Vault token mounted in the tool", "vault-token-sidecar-only", func(j *batchv1.Job) {
			tool(j).VolumeMounts = append(tool(j).VolumeMounts, corev1.VolumeMount{Name: contract.VaultTokenVolume, MountPath: "/vault"})
		}, injected),
		c("shared process namespace", "no-shared-process-namespace", func(j *batchv1.Job) { spec(j).ShareProcessNamespace = ptr.To(true) }, pod),
		c("hostAliases for the Vault name", "no-dns-overrides", func(j *batchv1.Job) {
			spec(j).HostAliases = []corev1.HostAlias{{IP: "10.0.0.66", Hostnames: []string{"vault"}}}
		}, pod),
		c("AppArmor unconfined", "apparmor", func(j *batchv1.Job) {
			tool(j).SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}, pod),
		c("AppArmor unconfined by annotation", "apparmor", func(j *batchv1.Job) {
			j.Spec.Template.Annotations["container.apparmor.security.beta.kubernetes.io/tool"] = "unconfined"
		}, pod),
		c("SELinux spc_t", "selinux", func(j *batchv1.Job) { podSC(j).SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} }, pod),
		c("SELinux user", "selinux", func(j *batchv1.Job) {
			tool(j).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"}
		}, pod),
		c("Windows hostProcess", "no-host-process", func(j *batchv1.Job) {
			podSC(j).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
			spec(j).HostNetwork = true
		}, pod),
		c("probe aimed at another host", "no-host-in-probes-and-hooks", func(j *batchv1.Job) {
			tool(j).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Port: intstr.FromInt32(80)}}}
		}, pod),
	}
}

// exactnessCases break invariant 3: fields the policy never renders, each admitted before exactness was
// total, and tampering with what it does render.
func (e *Env) exactnessCases() []Case {
	pod := func() *batchv1.Job { return e.Job("k8s_get_pod_status", PodParams(), "") }
	injected := func() *batchv1.Job { return e.Injected("k8s_get_pod_status", PodParams()) }
	c := func(name, rule string, m func(*batchv1.Job), base func() *batchv1.Job) Case {
		return e.jobCase("exactness", name, rule, m, base)
	}
	exec := func(cmd ...string) *corev1.ExecAction { return &corev1.ExecAction{Command: cmd} }
	return []Case{
		c("wrong image", "exact-image", func(j *batchv1.Job) { tool(j).Image = "localhost/busybox:agent-sandbox" }, pod),
		c("extra argument", "exact-command", func(j *batchv1.Job) { tool(j).Command = append(tool(j).Command, "--all-namespaces") }, pod),
		c("other command", "exact-command", func(j *batchv1.Job) {
			tool(j).Command = []string{"/bin/sh", "-c", "cat /var/run/agent-sandbox/credentials/kubeconfig"}
		}, pod),
		c("args appended", "exact-command", func(j *batchv1.Job) { tool(j).Args = []string{"--all-namespaces"} }, pod),
		c("shell-injected parameter", "invalid-parameters", func(j *batchv1.Job) { setParams(j, `{"namespace":"demo-app; rm -rf /"}`) }, pod),
		c("sidecar scope tampered", "exact-command", func(j *batchv1.Job) {
			for i, a := range sidecar(j).Command {
				if strings.HasPrefix(a, "--secrets-role=") {
					sidecar(j).Command[i] = "--secrets-role=agent-sandbox-terraform-apply"
				}
			}
		}, injected),
		c("sidecar image swapped", "exact-image", func(j *batchv1.Job) { sidecar(j).Image = "localhost/busybox:agent-sandbox" }, injected),
		c("wrong service account", "service-account", func(j *batchv1.Job) { spec(j).ServiceAccountName = "default" }, pod),
		c("target namespace kube-system", "namespace-not-allowed", func(j *batchv1.Job) {
			setParams(j, `{"namespace":"kube-system"}`)
			tool(j).Command[3] = "--namespace=kube-system"
		}, pod),
		c("unknown tool label", "unknown-tool", func(j *batchv1.Job) {
			j.Labels[contract.LabelTool], j.Spec.Template.Labels[contract.LabelTool] = "kubectl_exec", "kubectl_exec"
		}, pod),
		c("no tool label", "no-tool-label", func(j *batchv1.Job) {
			delete(j.Labels, contract.LabelTool)
			delete(j.Spec.Template.Labels, contract.LabelTool)
		}, pod),
		c("Job name not derived from its request", "exact-metadata", func(j *batchv1.Job) { j.Name = "as-k8s-get-pod-status-mine" }, pod),
		c("extra pod label (a Service could select it)", "exact-metadata", func(j *batchv1.Job) { j.Spec.Template.Labels["app"] = "web" }, pod),
		c("extra Job annotation", "exact-metadata", func(j *batchv1.Job) { j.Annotations["example.com/note"] = "x" }, pod),
		c("no audit chain head (the call would leave no anchor)", "exact-metadata", func(j *batchv1.Job) { delete(j.Annotations, contract.AnnotationAuditHead) }, pod),
		c("audit chain head that is not a hash", "exact-metadata", func(j *batchv1.Job) { j.Annotations[contract.AnnotationAuditHead] = "HEAD" }, pod),
		c("audit chain head on the pod template too", "exact-metadata", func(j *batchv1.Job) {
			j.Spec.Template.Annotations[contract.AnnotationAuditHead] = j.Annotations[contract.AnnotationAuditHead]
		}, pod),
		c("finalizer on the Job", "exact-metadata", func(j *batchv1.Job) { j.Finalizers = []string{"example.com/keep"} }, pod),
		c("extra environment variable", "exact-pod-spec", func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "HTTPS_PROXY", Value: "http://10.0.0.66:3128"})
		}, pod),
		c("bigger memory limit", "exact-pod-spec", func(j *batchv1.Job) {
			tool(j).Resources.Limits[corev1.ResourceMemory] = resource.MustParse("3Gi")
			tool(j).Resources.Requests[corev1.ResourceMemory] = resource.MustParse("3Gi")
		}, pod),
		// The policy's CPU request is smaller than its limit (cpuRequest): a submitter that reserves the whole
		// limit (a node's CPU held idle) or less than the policy asks (more sandboxes packed) is refused alike.
		c("CPU request raised to the limit", "exact-pod-spec", func(j *batchv1.Job) {
			tool(j).Resources.Requests[corev1.ResourceCPU] = tool(j).Resources.Limits[corev1.ResourceCPU].DeepCopy()
		}, pod),
		c("CPU request lowered to 1m", "exact-pod-spec", func(j *batchv1.Job) {
			tool(j).Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1m")
		}, pod),
		c("priorityClassName system-node-critical", "exact-pod-spec", func(j *batchv1.Job) { spec(j).PriorityClassName = "system-node-critical" }, pod),
		c("terminationGracePeriodSeconds 86400", "exact-pod-spec", func(j *batchv1.Job) { spec(j).TerminationGracePeriodSeconds = ptr.To(int64(86400)) }, pod),
		c("runAsGroup 0", "exact-pod-spec", func(j *batchv1.Job) { podSC(j).RunAsGroup = ptr.To(int64(0)) }, pod),
		c("supplementalGroups 0", "exact-pod-spec", func(j *batchv1.Job) { podSC(j).SupplementalGroups = []int64{0} }, pod),
		c("fsGroup 0", "exact-pod-spec", func(j *batchv1.Job) { podSC(j).FSGroup = ptr.To(int64(0)) }, pod),
		c("dnsPolicy Default", "exact-pod-spec", func(j *batchv1.Job) { spec(j).DNSPolicy = corev1.DNSDefault }, pod),
		c("hostname", "exact-pod-spec", func(j *batchv1.Job) { spec(j).Hostname = "vault" }, pod),
		c("imagePullPolicy Always", "exact-pod-spec", func(j *batchv1.Job) { tool(j).ImagePullPolicy = corev1.PullAlways }, pod),
		c("terminationMessagePath onto the credential", "exact-pod-spec", func(j *batchv1.Job) {
			tool(j).TerminationMessagePath = "/var/run/agent-sandbox/credentials/kubeconfig"
		}, pod),
		c("exec liveness probe", "exact-pod-spec", func(j *batchv1.Job) {
			tool(j).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: exec("sh", "-c", "cat /var/run/agent-sandbox/credentials/kubeconfig")}}
		}, pod),
		c("exec readiness probe", "exact-pod-spec", func(j *batchv1.Job) {
			tool(j).ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: exec("true")}}
		}, pod),
		c("exec startup probe on the sidecar", "exact-pod-spec", func(j *batchv1.Job) {
			sidecar(j).StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: exec("true")}}
		}, injected),
		c("postStart hook on the tool", "exact-pod-spec", func(j *batchv1.Job) {
			tool(j).Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: exec("sh", "-c", "cat /var/run/agent-sandbox/credentials/kubeconfig")}}
		}, pod),
		c("preStop hook on the sidecar", "exact-pod-spec", func(j *batchv1.Job) {
			lifecycle(sidecar(j)).PreStop = &corev1.LifecycleHandler{Exec: exec("true")}
		}, injected),
		// The project's runners wait for the credential themselves, so their sidecar has no postStart gate:
		// a hook there would run a command in the container that holds the Vault token.
		c("postStart hook on the sidecar copying the Vault token", "exact-pod-spec", func(j *batchv1.Job) {
			lifecycle(sidecar(j)).PostStart = &corev1.LifecycleHandler{Exec: exec("sh", "-c", "cat /var/run/agent-sandbox/vault/token > /var/run/agent-sandbox/credentials/t")}
		}, injected),
		c("stdin", "exact-pod-spec", func(j *batchv1.Job) { tool(j).Stdin = true }, pod),
		c("tty", "exact-pod-spec", func(j *batchv1.Job) { tool(j).TTY = true }, pod),
		c("workingDir", "exact-pod-spec", func(j *batchv1.Job) { tool(j).WorkingDir = "/tmp" }, pod),
		c("container port", "exact-pod-spec", func(j *batchv1.Job) { tool(j).Ports = []corev1.ContainerPort{{ContainerPort: 8080}} }, pod),
		c("nodeName pinned", "exact-pod-spec", func(j *batchv1.Job) { spec(j).NodeName = "control-plane" }, pod),
		c("node affinity", "exact-pod-spec", func(j *batchv1.Job) {
			spec(j).Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpExists}}}}}}}
		}, pod),
		c("another scheduler", "exact-pod-spec", func(j *batchv1.Job) { spec(j).SchedulerName = "my-scheduler" }, pod),
		c("service links", "exact-pod-spec", func(j *batchv1.Job) { spec(j).EnableServiceLinks = ptr.To(true) }, pod),
		c("image pull secret", "exact-pod-spec", func(j *batchv1.Job) { spec(j).ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}} }, pod),
		c("writable credential mount", "exact-pod-spec", func(j *batchv1.Job) {
			for i := range tool(j).VolumeMounts {
				if tool(j).VolumeMounts[i].Name == contract.CredentialVolume {
					tool(j).VolumeMounts[i].ReadOnly = false
				}
			}
		}, injected),
		c("sidecar removed, marker kept", "exact-pod-spec", func(j *batchv1.Job) { spec(j).InitContainers = nil }, injected),
	}
}

// PlacementCases move a sandbox Pod off the nodes the policy places it on (spec.sandbox.nodeSelector and
// tolerations: on GKE the gVisor node pool, labelled and tainted sandbox.gke.io/runtime=gvisor:NoSchedule),
// or let it onto more nodes. Such a Job is refused at admission, not left Pending behind a taint: the
// node-placement rule refuses one that lacks the policy's placement, exactness one that adds to it. Two
// cases hold under any policy; the others need a policy with a placement (make up PROFILE=gke, the
// integration suite's placed policy) and are left out without one.
func (e *Env) PlacementCases() []Case {
	pod := func() *batchv1.Job { return e.Job("k8s_get_pod_status", PodParams(), "") }
	c := func(name, rule string, m func(*batchv1.Job)) Case { return e.jobCase("placement", name, rule, m, pod) }
	sb := e.Policy.Spec.Sandbox
	cases := []Case{
		c("extra nodeSelector entry pinning a node", "exact-pod-spec", func(j *batchv1.Job) {
			if spec(j).NodeSelector == nil {
				spec(j).NodeSelector = map[string]string{}
			}
			spec(j).NodeSelector["kubernetes.io/hostname"] = "control-plane"
		}),
		c("extra toleration of every taint (operator Exists, no key)", "exact-pod-spec", func(j *batchv1.Job) {
			spec(j).Tolerations = append(spec(j).Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
		}),
	}
	if len(sb.NodeSelector) > 0 {
		key := slices.Sorted(maps.Keys(sb.NodeSelector))[0]
		cases = append(cases,
			c("without the policy's nodeSelector", "node-placement", func(j *batchv1.Job) { spec(j).NodeSelector = nil }),
			c("the policy's nodeSelector with another value", "node-placement", func(j *batchv1.Job) {
				spec(j).NodeSelector[key] = spec(j).NodeSelector[key] + "-not"
			}),
		)
	}
	if len(sb.Tolerations) > 0 {
		cases = append(cases,
			c("without the policy's tolerations", "node-placement", func(j *batchv1.Job) { spec(j).Tolerations = nil }),
			c("the policy's toleration swapped for one of every taint", "node-placement", func(j *batchv1.Job) {
				spec(j).Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
			}),
			c("the policy's toleration widened to any value of its key (operator Exists)", "node-placement", func(j *batchv1.Job) {
				t := &spec(j).Tolerations[0]
				t.Operator, t.Value = corev1.TolerationOpExists, ""
			}),
			c("the policy's toleration with another effect", "node-placement", func(j *batchv1.Job) {
				spec(j).Tolerations[0].Effect = corev1.TaintEffectNoExecute
			}),
		)
	}
	return cases
}

// jobShapeCases change Job-level fields: one admitted Job runs once, now and later.
func (e *Env) jobShapeCases() []Case {
	pod := func() *batchv1.Job { return e.Job("k8s_get_pod_status", PodParams(), "") }
	c := func(name string, m func(*batchv1.Job)) Case { return e.jobCase("job-shape", name, "job-shape", m, pod) }
	return []Case{
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
		c("completions 3", func(j *batchv1.Job) { j.Spec.Completions = ptr.To(int32(3)); j.Spec.Parallelism = ptr.To(int32(3)) }),
		c("backoffLimit 6", func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To(int32(6)) }),
		c("indexed completion", func(j *batchv1.Job) { j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion) }),
		c("podReplacementPolicy Failed", func(j *batchv1.Job) { j.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed) }),
		c("ttlSecondsAfterFinished of a year", func(j *batchv1.Job) { j.Spec.TTLSecondsAfterFinished = ptr.To(int32(31536000)) }),
		c("backoffLimitPerIndex", func(j *batchv1.Job) {
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
			j.Spec.BackoffLimit = nil
			j.Spec.BackoffLimitPerIndex = ptr.To(int32(2))
		}),
		c("deadline above the tool's", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To(int64(900)) }),
	}
}

// approvalCases break invariant 5 with terraform_apply, which always needs a signed approval.
func (e *Env) approvalCases() []Case {
	apply := func(token string) func() *batchv1.Job {
		return func() *batchv1.Job { return e.Job("terraform_apply", ApplyParams(), token) }
	}
	none := func(*batchv1.Job) {}
	good := func() string { return e.Token(e.Approver, "terraform_apply", ApplyParams(), nil) }
	forged := func() string {
		t := good()
		i := strings.LastIndex(t, ".")
		sig := []byte(t[i+1:])
		for k := range sig[:8] {
			sig[k] = 'A' + byte(k)
		}
		return t[:i+1] + string(sig)
	}
	otherParams := ApplyParams()
	otherParams["plan_id"] = strings.Repeat("cd", 32)
	c := func(name, rule string, m func(*batchv1.Job), base func() *batchv1.Job) Case {
		return e.jobCase("approval", name, rule, m, base)
	}
	cases := append([]Case{
		// A plan whose approvers' tools found it needs two approvers (approvals_required 2).
		c("apply with one approval where the plan needs two approvers", "approval: 1 of 2 approvals: this plan needs 2 distinct approvers", none,
			apply(contract.JoinApprovalTokens(e.approvalsOf(newID(), 2, e.Approver)))),
		c("apply with the same approver's approval twice where the plan needs two", "approval: 1 of 2 approvals: this plan needs 2 distinct approvers; the same approver twice counts once", none,
			apply(contract.JoinApprovalTokens(e.approvalsOf(newID(), 2, e.Approver, e.Approver)))),
		// The check container counts the approvers the Job's argv names ({{approvers}}): a Job that names more
		// than its tokens are signed by is not its rendering.
		c("apply whose check names an approver its tokens do not", "exact-command", func(j *batchv1.Job) {
			check := &j.Spec.Template.Spec.InitContainers[0]
			for i, a := range check.Command {
				if strings.HasPrefix(a, "--approvers=") {
					check.Command[i] = a + ",someone-else"
				}
			}
		}, apply(good())),
		c("apply whose check leaves out its approvers", "exact-command", func(j *batchv1.Job) {
			check := &j.Spec.Template.Spec.InitContainers[0]
			check.Command = slices.DeleteFunc(check.Command, func(a string) bool { return strings.HasPrefix(a, "--approvers=") })
		}, apply(good())),
		c("apply with two approvals, one of them for another request", "approval: the approvals are for different requests", none,
			apply(contract.JoinApprovalTokens(append(e.approvalsOf(newID(), 2, e.Approver), e.approvalsOf(newID(), 2, e.Approver)...)))),
	}, e.twoApproverReplayCases()...)
	return append(cases, []Case{
		c("apply without a token", "approval-required", none, apply("")),
		c("apply with a forged token", "approval", none, apply(forged())),
		c("apply with a token from another key", "approval", none, apply(e.Token(e.Other, "terraform_apply", ApplyParams(), nil))),
		c("apply with an expired token", "approval", none, apply(e.Token(e.Approver, "terraform_apply", ApplyParams(), func(c *approval.Claims) {
			c.IssuedAt, c.NotBefore, c.Expiry = c.IssuedAt.Add(-2*time.Hour), c.NotBefore.Add(-2*time.Hour), c.IssuedAt.Add(-90*time.Minute)
		}))),
		c("apply with a token for other parameters", "approval", none, apply(e.Token(e.Approver, "terraform_apply", otherParams, nil))),
		c("apply with a token for another tool", "approval", none, apply(e.Token(e.Approver, "terraform_apply", ApplyParams(), func(c *approval.Claims) {
			c.Tool = "terraform_plan"
		}))),
		c("apply with a token for another cluster", "approval", none, apply(e.Token(e.Approver, "terraform_apply", ApplyParams(), func(c *approval.Claims) {
			c.Audience = "some-other-cluster"
		}))),
		c("approval Job under a name not derived from its token", "exact-metadata", func(j *batchv1.Job) {
			j.Name = sandbox.JobName("terraform_apply", j.Labels[contract.LabelRequestID])
		}, apply(good())),
		c("approval token on a read tool", "exact-metadata", func(j *batchv1.Job) {
			j.Annotations[contract.AnnotationApprovalToken] = good()
			j.Spec.Template.Annotations[contract.AnnotationApprovalToken] = j.Annotations[contract.AnnotationApprovalToken]
		}, func() *batchv1.Job { return e.Job("k8s_get_pod_status", PodParams(), "") }),
		{Class: "approval", Name: "apply replaying a used token", Rule: "approval", Submit: func(ctx context.Context) error {
			tok := good()
			if _, err := e.CreateJob(ctx, apply(tok)(), false); err != nil {
				return fmt.Errorf("setup: the first use of a good token was refused: %w", err)
			}
			// The replay comes with a fresh request ID, as a second call would.
			_, err := e.CreateJob(ctx, apply(tok)(), false)
			return err
		}},
	}...)
}

func newID() string {
	id, err := approval.NewRequestID()
	if err != nil {
		panic(err)
	}
	return id
}

// approvalsOf signs, with each key, an approval of the one request id for terraform_apply with ApplyParams,
// asking for need approvers.
func (e *Env) approvalsOf(id string, need int, keys ...*approval.PrivateKey) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, e.Token(k, "terraform_apply", ApplyParams(), func(c *approval.Claims) { c.Subject, c.ApprovalsRequired = id, need }))
	}
	return out
}

// twoApproverReplayCases get a Job admitted with two distinct approvers' tokens (the setup fails the case if
// it is refused) and then replay either token, with a fresh token of the other approver for the same request:
// refused, whichever. They need Env.Second; without it there are none.
func (e *Env) twoApproverReplayCases() []Case {
	if e.Second == nil {
		return nil
	}
	replay := func(name string, used int) Case {
		return Case{Class: "approval", Name: name, Rule: "approval: this approval was already used", Submit: func(ctx context.Context) error {
			id := newID()
			pair := e.approvalsOf(id, 2, e.Approver, e.Second)
			if _, err := e.CreateJob(ctx, e.Job("terraform_apply", ApplyParams(), contract.JoinApprovalTokens(pair)), false); err != nil {
				return fmt.Errorf("setup: two distinct approvers' tokens were refused: %w", err)
			}
			again := e.approvalsOf(id, 2, e.Approver, e.Second)
			again[used] = pair[used]
			_, err := e.CreateJob(ctx, e.Job("terraform_apply", ApplyParams(), contract.JoinApprovalTokens(again)), false)
			return err
		}}
	}
	return []Case{
		replay("apply with two approvers, then the first approver's used token again", 0),
		replay("apply with two approvers, then the second approver's used token again", 1),
	}
}

// workloadCases make Pods in the sandbox namespace through other workload kinds.
func (e *Env) workloadCases() []Case {
	tmpl := func() corev1.PodTemplateSpec {
		j := e.Job("k8s_get_pod_status", PodParams(), "")
		t := j.Spec.Template
		t.Labels = map[string]string{"app": "sneaky"}
		t.Spec.RestartPolicy = corev1.RestartPolicyAlways
		return t
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sneaky"}}
	meta := func() metav1.ObjectMeta { return metav1.ObjectMeta{Name: "sneaky-" + e.Run} }
	c := func(name string, f func(ctx context.Context) error) Case {
		return Case{Class: "workload", Name: name, Rule: "jobs-only", Submit: f}
	}
	apps := func() appsInterface { return e.Attacker.AppsV1() }
	return []Case{
		c("Deployment in the sandbox namespace", func(ctx context.Context) error {
			_, err := apps().Deployments(e.Namespace()).Create(ctx, &appsv1.Deployment{ObjectMeta: meta(), Spec: appsv1.DeploymentSpec{Selector: sel, Template: tmpl()}}, metav1.CreateOptions{})
			return err
		}),
		c("ReplicaSet in the sandbox namespace", func(ctx context.Context) error {
			_, err := apps().ReplicaSets(e.Namespace()).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: meta(), Spec: appsv1.ReplicaSetSpec{Selector: sel, Template: tmpl()}}, metav1.CreateOptions{})
			return err
		}),
		c("StatefulSet in the sandbox namespace", func(ctx context.Context) error {
			_, err := apps().StatefulSets(e.Namespace()).Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta(), Spec: appsv1.StatefulSetSpec{Selector: sel, Template: tmpl()}}, metav1.CreateOptions{})
			return err
		}),
		c("DaemonSet in the sandbox namespace", func(ctx context.Context) error {
			_, err := apps().DaemonSets(e.Namespace()).Create(ctx, &appsv1.DaemonSet{ObjectMeta: meta(), Spec: appsv1.DaemonSetSpec{Selector: sel, Template: tmpl()}}, metav1.CreateOptions{})
			return err
		}),
		c("CronJob in the sandbox namespace", func(ctx context.Context) error {
			j := e.Job("k8s_get_pod_status", PodParams(), "")
			cj := &batchv1.CronJob{ObjectMeta: meta(), Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
				JobTemplate: batchv1.JobTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: j.Labels, Annotations: j.Annotations}, Spec: j.Spec}}}
			_, err := e.Attacker.BatchV1().CronJobs(e.Namespace()).Create(ctx, cj, metav1.CreateOptions{})
			return err
		}),
		c("ReplicationController in the sandbox namespace", func(ctx context.Context) error {
			t := tmpl()
			rc := &corev1.ReplicationController{ObjectMeta: meta(), Spec: corev1.ReplicationControllerSpec{Selector: map[string]string{"app": "sneaky"}, Template: &t}}
			_, err := e.Attacker.CoreV1().ReplicationControllers(e.Namespace()).Create(ctx, rc, metav1.CreateOptions{})
			return err
		}),
	}
}
