package cel

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/util/intstr"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// compileDefault compiles DefaultRules or stops the test.
func compileDefault(tb testing.TB) *Program {
	tb.Helper()
	p, err := Compile(DefaultRules(), "default")
	if err != nil {
		tb.Fatalf("Compile(DefaultRules()):\n%v", err)
	}
	return p
}

// ruleNames returns the sorted names of the violated rules.
func ruleNames(vs []Violation) []string {
	names := make([]string, 0, len(vs))
	for _, v := range vs {
		names = append(names, v.Rule)
	}
	slices.Sort(names)
	return names
}

func TestDefaultRulesShape(t *testing.T) {
	rules := DefaultRules()
	if len(rules) < 20 {
		t.Fatalf("DefaultRules() has %d rules, want at least 20", len(rules))
	}
	for i, r := range rules {
		if want := fmt.Sprintf("spec.admissionRules[%d]", i); r.Path != want {
			t.Errorf("rule %d: Path = %q, want %q", i, r.Path, want)
		}
		if r.Name == "" || strings.ToLower(r.Name) != r.Name || strings.ContainsAny(r.Name, " _") {
			t.Errorf("%s: name %q is not kebab-case", r.Path, r.Name)
		}
		if r.Message == "" || strings.ContainsAny(r.Message, "\n\r") {
			t.Errorf("%s (%s): message must be one non-empty line, got %q", r.Path, r.Name, r.Message)
		}
	}
	if compileDefault(t).all == nil {
		t.Error("the default rules compiled without the conjunction fast path")
	}
}

// mutation breaks (or, with want empty, harmlessly changes) the good Job.
type mutation struct {
	name   string
	mutate func(*batchv1.Job)
	want   []string
}

// podSpec, tool and agent address the parts of the Job that mutations change.
func podSpec(j *batchv1.Job) *corev1.PodSpec { return &j.Spec.Template.Spec }
func tool(j *batchv1.Job) *corev1.Container  { return &j.Spec.Template.Spec.Containers[0] }
func agent(j *batchv1.Job) *corev1.Container { return &j.Spec.Template.Spec.InitContainers[0] }
func volume(j *batchv1.Job, name string) *corev1.Volume {
	for i := range podSpec(j).Volumes {
		if podSpec(j).Volumes[i].Name == name {
			return &podSpec(j).Volumes[i]
		}
	}
	panic("no volume " + name)
}

// jobMutations lists variations of the good Job: each rule broken at least once, in the
// tool container and in the sidecar init container, plus changes that must stay allowed.
func jobMutations() []mutation {
	return []mutation{
		// Allowed variations: no rule may fire.
		{"explicit false host namespaces", func(j *batchv1.Job) {
			podSpec(j).HostNetwork, podSpec(j).HostPID, podSpec(j).HostIPC = false, false, false
		}, nil},
		{"runAsNonRoot only per container", func(j *batchv1.Job) { podSpec(j).SecurityContext.RunAsNonRoot = nil }, nil},
		{"runAsNonRoot only at pod level", func(j *batchv1.Job) {
			tool(j).SecurityContext.RunAsNonRoot, agent(j).SecurityContext.RunAsNonRoot = nil, nil
		}, nil},
		{"seccomp only per container", func(j *batchv1.Job) { podSpec(j).SecurityContext.SeccompProfile = nil }, nil},
		{"seccomp only at pod level", func(j *batchv1.Job) {
			tool(j).SecurityContext.SeccompProfile, agent(j).SecurityContext.SeccompProfile = nil, nil
		}, nil},
		{"no pod security context but hardened containers", func(j *batchv1.Job) { podSpec(j).SecurityContext = nil }, nil},
		{"deadline at the maximum", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = new(testMaxDeadline) }, nil},
		{"pod deadline within the maximum", func(j *batchv1.Job) { podSpec(j).ActiveDeadlineSeconds = new(int64(60)) }, nil},
		{"token-like name from fieldRef", func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "TOKEN_AUDIENCE_FIELD", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}})
		}, nil},
		{"token-like name with empty value", func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "GITHUB_TOKEN"})
		}, nil},
		{"configMap and downwardAPI projections", func(j *batchv1.Job) {
			v := volume(j, testTokenVolume)
			v.Projected.Sources = append(v.Projected.Sources,
				corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}}},
				corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{}})
		}, nil},
		{"dnsPolicy Default", func(j *batchv1.Job) { podSpec(j).DNSPolicy = corev1.DNSDefault }, nil},
		{"extra node selector", func(j *batchv1.Job) { podSpec(j).NodeSelector["zone"] = "a" }, nil},

		// 1 runtime-class
		{"runc", func(j *batchv1.Job) { podSpec(j).RuntimeClassName = new("runc") }, []string{"runtime-class"}},
		{"missing runtime class", func(j *batchv1.Job) { podSpec(j).RuntimeClassName = nil }, []string{"runtime-class"}},
		// 2 no-host-namespaces
		{"hostNetwork", func(j *batchv1.Job) { podSpec(j).HostNetwork = true }, []string{"no-host-namespaces"}},
		{"hostPID", func(j *batchv1.Job) { podSpec(j).HostPID = true }, []string{"no-host-namespaces"}},
		{"hostIPC", func(j *batchv1.Job) { podSpec(j).HostIPC = true }, []string{"no-host-namespaces"}},
		// 3 no-host-path (also not an allowed volume type)
		{"hostPath volume", func(j *batchv1.Job) {
			podSpec(j).Volumes = append(podSpec(j).Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/var/run/containerd"}}})
		}, []string{"allowed-volume-types", "no-host-path"}},
		// 4 allowed-volume-types
		{"secret volume", func(j *batchv1.Job) {
			podSpec(j).Volumes = append(podSpec(j).Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: "admin-kubeconfig"}}})
		}, []string{"allowed-volume-types"}},
		{"persistent volume claim", func(j *batchv1.Job) {
			podSpec(j).Volumes = append(podSpec(j).Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
		}, []string{"allowed-volume-types"}},
		{"credential volume on disk", func(j *batchv1.Job) { volume(j, testCredVolume).EmptyDir.Medium = "" }, []string{"allowed-volume-types"}},
		{"credential volume not an emptyDir", func(j *batchv1.Job) {
			volume(j, testCredVolume).VolumeSource = corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}
		}, []string{"allowed-volume-types"}},
		// 5 service-account-token
		{"automount unset", func(j *batchv1.Job) { podSpec(j).AutomountServiceAccountToken = nil }, []string{"service-account-token"}},
		{"automount true", func(j *batchv1.Job) { podSpec(j).AutomountServiceAccountToken = new(true) }, []string{"service-account-token"}},
		{"vault token with apiserver audience", func(j *batchv1.Job) {
			volume(j, testTokenVolume).Projected.Sources[0].ServiceAccountToken.Audience = ""
		}, []string{"service-account-token"}},
		{"second projected token", func(j *batchv1.Job) {
			podSpec(j).Volumes = append(podSpec(j).Volumes, corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{
				Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
					ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: testVaultAudience, Path: "token"}}}}}})
		}, []string{"service-account-token"}},
		{"projected secret", func(j *batchv1.Job) {
			v := volume(j, testTokenVolume)
			v.Projected.Sources = append(v.Projected.Sources, corev1.VolumeProjection{
				Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "admin"}}})
		}, []string{"service-account-token"}},
		// vault-token-sidecar-only
		{"tool mounts the vault token", func(j *batchv1.Job) {
			tool(j).VolumeMounts = append(tool(j).VolumeMounts, corev1.VolumeMount{Name: testTokenVolume, MountPath: "/vault"})
		}, []string{"vault-token-sidecar-only"}},
		// 6 no-host-ports
		{"hostPort in tool", func(j *batchv1.Job) {
			tool(j).Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080}}
		}, []string{"no-host-ports"}},
		{"hostPort in sidecar", func(j *batchv1.Job) {
			agent(j).Ports = []corev1.ContainerPort{{ContainerPort: 8200, HostPort: 8200}}
		}, []string{"no-host-ports"}},
		// 7 not-privileged
		{"privileged tool", func(j *batchv1.Job) { tool(j).SecurityContext.Privileged = new(true) }, []string{"not-privileged"}},
		{"privileged sidecar", func(j *batchv1.Job) { agent(j).SecurityContext.Privileged = new(true) }, []string{"not-privileged"}},
		// 8 no-privilege-escalation
		{"escalation unset in sidecar", func(j *batchv1.Job) { agent(j).SecurityContext.AllowPrivilegeEscalation = nil }, []string{"no-privilege-escalation"}},
		{"escalation true in tool", func(j *batchv1.Job) { tool(j).SecurityContext.AllowPrivilegeEscalation = new(true) }, []string{"no-privilege-escalation"}},
		// 9 drop-all-capabilities
		{"drop only NET_RAW", func(j *batchv1.Job) {
			tool(j).SecurityContext.Capabilities.Drop = []corev1.Capability{"NET_RAW"}
		}, []string{"drop-all-capabilities"}},
		{"no capabilities in sidecar", func(j *batchv1.Job) { agent(j).SecurityContext.Capabilities = nil }, []string{"drop-all-capabilities"}},
		// 10 no-added-capabilities
		{"add SYS_ADMIN in sidecar", func(j *batchv1.Job) {
			agent(j).SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		}, []string{"no-added-capabilities"}},
		{"add NET_BIND_SERVICE in tool", func(j *batchv1.Job) {
			tool(j).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
		}, []string{"no-added-capabilities"}},
		// 11 run-as-non-root
		{"runAsNonRoot nowhere", func(j *batchv1.Job) {
			podSpec(j).SecurityContext.RunAsNonRoot = nil
			tool(j).SecurityContext.RunAsNonRoot, agent(j).SecurityContext.RunAsNonRoot = nil, nil
		}, []string{"run-as-non-root"}},
		{"container overrides runAsNonRoot", func(j *batchv1.Job) { tool(j).SecurityContext.RunAsNonRoot = new(false) }, []string{"run-as-non-root"}},
		{"sidecar runs as uid 0", func(j *batchv1.Job) { agent(j).SecurityContext.RunAsUser = new(int64(0)) }, []string{"run-as-non-root"}},
		{"pod runs as uid 0", func(j *batchv1.Job) { podSpec(j).SecurityContext.RunAsUser = new(int64(0)) }, []string{"run-as-non-root"}},
		// 12 seccomp-runtime-default
		{"pod seccomp Unconfined", func(j *batchv1.Job) {
			podSpec(j).SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
		}, []string{"seccomp-runtime-default"}},
		{"sidecar seccomp Localhost", func(j *batchv1.Job) {
			agent(j).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: new("p.json")}
		}, []string{"seccomp-runtime-default"}},
		{"seccomp nowhere for the tool", func(j *batchv1.Job) {
			podSpec(j).SecurityContext.SeccompProfile, tool(j).SecurityContext.SeccompProfile = nil, nil
		}, []string{"seccomp-runtime-default"}},
		// 13 read-only-root-filesystem
		{"writable root in sidecar", func(j *batchv1.Job) { agent(j).SecurityContext.ReadOnlyRootFilesystem = new(false) }, []string{"read-only-root-filesystem"}},
		{"root filesystem unset in tool", func(j *batchv1.Job) { tool(j).SecurityContext.ReadOnlyRootFilesystem = nil }, []string{"read-only-root-filesystem"}},
		// 14 resource-limits
		{"sidecar without cpu limit", func(j *batchv1.Job) { delete(agent(j).Resources.Limits, corev1.ResourceCPU) }, []string{"resource-limits"}},
		{"tool without limits", func(j *batchv1.Job) { tool(j).Resources.Limits = nil }, []string{"resource-limits"}},
		{"tool limits only memory", func(j *batchv1.Job) {
			tool(j).Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}, []string{"resource-limits"}},
		// 15 deadline
		{"no job deadline", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = nil }, []string{"deadline"}},
		{"zero job deadline", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = new(int64(0)) }, []string{"deadline"}},
		{"job deadline above maximum", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = new(testMaxDeadline + 1) }, []string{"deadline"}},
		{"pod deadline above maximum", func(j *batchv1.Job) { podSpec(j).ActiveDeadlineSeconds = new(int64(86400)) }, []string{"deadline"}},
		// 16 no-sysctls
		{"sysctl", func(j *batchv1.Job) {
			podSpec(j).SecurityContext.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}
		}, []string{"no-sysctls"}},
		// 17 default-proc-mount
		{"unmasked proc in tool", func(j *batchv1.Job) {
			tool(j).SecurityContext.ProcMount = new(corev1.UnmaskedProcMount)
		}, []string{"default-proc-mount"}},
		{"explicit default proc mount", func(j *batchv1.Job) {
			agent(j).SecurityContext.ProcMount = new(corev1.DefaultProcMount)
		}, nil},
		// 18 no-credentials-in-env
		{"secretKeyRef in tool", func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "KUBE_CA", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "admin"}, Key: "ca"}}})
		}, []string{"no-credentials-in-env"}},
		{"envFrom secret in sidecar", func(j *batchv1.Job) {
			agent(j).EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "vault"}}}}
		}, []string{"no-credentials-in-env"}},
		{"literal VAULT_TOKEN in sidecar", func(j *batchv1.Job) {
			agent(j).Env = append(agent(j).Env, corev1.EnvVar{Name: "VAULT_TOKEN", Value: "hvs.CAESIJ"})
		}, []string{"no-credentials-in-env"}},
		{"literal api key in tool", func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "OpenAI_ApiKey", Value: "sk-x"})
		}, []string{"no-credentials-in-env"}},
		{"literal password in tool", func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "db_password", Value: "hunter2"})
		}, []string{"no-credentials-in-env"}},
		// 19 no-ephemeral-containers
		{"hardened ephemeral container", func(j *batchv1.Job) {
			podSpec(j).EphemeralContainers = []corev1.EphemeralContainer{{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon(*tool(j).DeepCopy()),
			}}
			podSpec(j).EphemeralContainers[0].Name = "debugger"
			podSpec(j).EphemeralContainers[0].VolumeMounts = nil
		}, []string{"no-ephemeral-containers"}},
		{"bare ephemeral container", func(j *batchv1.Job) {
			podSpec(j).EphemeralContainers = []corev1.EphemeralContainer{{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"},
			}}
		}, []string{
			"drop-all-capabilities", "no-ephemeral-containers", "no-privilege-escalation",
			"read-only-root-filesystem", "resource-limits", // seccomp and non-root come from the pod
		}},
		// 20 node-placement
		{"no node selector", func(j *batchv1.Job) { podSpec(j).NodeSelector = nil }, []string{"node-placement"}},
		{"other node pool", func(j *batchv1.Job) { podSpec(j).NodeSelector[testNodeLabel] = "false" }, []string{"node-placement"}},
		{"no tolerations", func(j *batchv1.Job) { podSpec(j).Tolerations = nil }, []string{"node-placement"}},
		{"toleration operator Equal instead of Exists", func(j *batchv1.Job) {
			podSpec(j).Tolerations[0].Operator = corev1.TolerationOpEqual
		}, []string{"node-placement"}},
		{"extra toleration with seconds", func(j *batchv1.Job) {
			podSpec(j).Tolerations = append(podSpec(j).Tolerations, corev1.Toleration{
				Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(30))})
		}, nil},
		// 21 no-shared-process-namespace
		{"shared process namespace", func(j *batchv1.Job) { podSpec(j).ShareProcessNamespace = new(true) }, []string{"no-shared-process-namespace"}},
		// Pod Security restricted parity (webhook/pss_test.go checks these against the Pod Security library).
		{"pod-level runAsNonRoot false overridden per container", func(j *batchv1.Job) {
			podSpec(j).SecurityContext.RunAsNonRoot = new(false)
		}, []string{"run-as-non-root"}},
		{"hostProcess pod", func(j *batchv1.Job) {
			podSpec(j).SecurityContext.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: new(true)}
		}, []string{"no-host-process"}},
		{"hostProcess sidecar", func(j *batchv1.Job) {
			agent(j).SecurityContext.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: new(true)}
		}, []string{"no-host-process"}},
		{"apparmor unconfined tool", func(j *batchv1.Job) {
			tool(j).SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}, []string{"apparmor"}},
		{"apparmor unconfined annotation", func(j *batchv1.Job) {
			if j.Spec.Template.Annotations == nil {
				j.Spec.Template.Annotations = map[string]string{}
			}
			j.Spec.Template.Annotations["container.apparmor.security.beta.kubernetes.io/tool"] = "unconfined"
		}, []string{"apparmor"}},
		{"apparmor localhost allowed", func(j *batchv1.Job) {
			podSpec(j).SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: new("p")}
		}, nil},
		{"selinux type spc_t", func(j *batchv1.Job) {
			podSpec(j).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		}, []string{"selinux"}},
		{"selinux user in sidecar", func(j *batchv1.Job) {
			agent(j).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"}
		}, []string{"selinux"}},
		{"selinux container_t allowed", func(j *batchv1.Job) {
			tool(j).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t"}
		}, nil},
		{"probe to another host", func(j *batchv1.Job) {
			tool(j).ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "10.0.0.1", Port: intstr.FromInt32(80)}}}
		}, []string{"no-host-in-probes-and-hooks"}},
		{"preStop to another host", func(j *batchv1.Job) {
			tool(j).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Host: "evil", Port: intstr.FromInt32(80)}}}
		}, []string{"no-host-in-probes-and-hooks"}},
		{"local probe allowed", func(j *batchv1.Job) {
			tool(j).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}}}
		}, nil},
		// 22 no-dns-overrides
		{"host alias for vault", func(j *batchv1.Job) {
			podSpec(j).HostAliases = []corev1.HostAlias{{IP: "10.0.0.66", Hostnames: []string{"vault.vault.svc"}}}
		}, []string{"no-dns-overrides"}},
		{"custom nameserver", func(j *batchv1.Job) {
			podSpec(j).DNSPolicy = corev1.DNSNone
			podSpec(j).DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.66"}}
		}, []string{"no-dns-overrides"}},
	}
}

func TestDefaultRulesGoodJob(t *testing.T) {
	p := compileDefault(t)
	in, err := NewInput(goodJob(), testSettings(), "CREATE")
	if err != nil {
		t.Fatal(err)
	}
	if vs := p.Evaluate(context.Background(), in); len(vs) != 0 {
		t.Fatalf("good Job: want no violations, got %+v", vs)
	}
}

func TestDefaultRulesMutations(t *testing.T) {
	p := compileDefault(t)
	covered := map[string]bool{}
	for _, tc := range jobMutations() {
		t.Run(tc.name, func(t *testing.T) {
			j := goodJob()
			tc.mutate(j)
			in, err := NewInput(j, testSettings(), "CREATE")
			if err != nil {
				t.Fatal(err)
			}
			vs := p.Evaluate(context.Background(), in)
			if got := ruleNames(vs); !slices.Equal(got, tc.want) {
				t.Fatalf("violated rules = %q, want %q\nviolations: %+v", got, tc.want, vs)
			}
			for _, v := range vs {
				covered[v.Rule] = true
				if strings.Contains(v.Message, "could not be evaluated") {
					t.Errorf("%s: want a decision, got an evaluation error: %s", v.Rule, v.Message)
				}
			}
		})
	}
	for _, r := range DefaultRules() {
		if !covered[r.Name] {
			t.Errorf("no mutation breaks rule %s", r.Name)
		}
	}
}

func TestDefaultRulesPod(t *testing.T) {
	p := compileDefault(t)
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		want   []string
	}{
		{"good", func(*corev1.Pod) {}, nil},
		{"pod deadline within maximum", func(pod *corev1.Pod) { pod.Spec.ActiveDeadlineSeconds = new(int64(600)) }, nil},
		{"pod deadline above maximum", func(pod *corev1.Pod) { pod.Spec.ActiveDeadlineSeconds = new(testMaxDeadline * 2) }, []string{"deadline"}},
		{"runc", func(pod *corev1.Pod) { pod.Spec.RuntimeClassName = new("runc") }, []string{"runtime-class"}},
		{"privileged sidecar", func(pod *corev1.Pod) { pod.Spec.InitContainers[0].SecurityContext.Privileged = new(true) }, []string{"not-privileged"}},
		{"ephemeral container added", func(pod *corev1.Pod) {
			pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox", SecurityContext: hardened()},
			}}
		}, []string{"no-ephemeral-containers", "resource-limits"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := goodPod()
			tc.mutate(pod)
			in, err := NewInput(pod, testSettings(), "CREATE")
			if err != nil {
				t.Fatal(err)
			}
			if got := ruleNames(p.Evaluate(context.Background(), in)); !slices.Equal(got, tc.want) {
				t.Fatalf("violated rules = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDefaultRulesSettingsShapes checks that settings decoded from JSON or YAML (float64
// numbers, []any and map[string]any) and empty placement settings work as well.
func TestDefaultRulesSettingsShapes(t *testing.T) {
	p := compileDefault(t)
	tests := []struct {
		name   string
		adjust func(map[string]any)
		want   []string
	}{
		{"typed Go values", func(map[string]any) {}, nil},
		{"JSON numbers and terse maps", func(s map[string]any) {
			s["maxDeadlineSeconds"] = float64(testMaxDeadline)
			s["nodeSelector"] = map[string]string{testNodeLabel: "true"}
			s["tolerations"] = []any{map[string]any{"key": testNodeLabel, "operator": "Exists", "effect": "NoSchedule"}}
		}, nil},
		{"Go int", func(s map[string]any) { s["maxDeadlineSeconds"] = int(testMaxDeadline) }, nil},
		{"empty placement", func(s map[string]any) {
			s["nodeSelector"] = map[string]string{}
			s["tolerations"] = []any{}
		}, nil},
		{"no placement keys", func(s map[string]any) {
			delete(s, "nodeSelector")
			delete(s, "tolerations")
		}, nil},
		{"no credential agent name", func(s map[string]any) { delete(s, "credentialAgentContainer") }, nil},
		{"stricter deadline", func(s map[string]any) { s["maxDeadlineSeconds"] = 300 }, []string{"deadline"}},
		{"other toleration required", func(s map[string]any) {
			s["tolerations"] = []any{map[string]any{"key": "gvisor", "operator": "Exists"}}
		}, []string{"node-placement"}},
		{"toleration with another effect required", func(s map[string]any) {
			s["tolerations"] = []any{map[string]any{"key": testNodeLabel, "operator": "Exists", "effect": "NoExecute"}}
		}, []string{"node-placement"}},
		{"toleration with a value required", func(s map[string]any) {
			s["tolerations"] = []any{map[string]any{"key": testNodeLabel, "operator": "", "value": "true", "effect": "NoSchedule"}}
		}, []string{"node-placement"}},
		{"runtime class setting missing fails closed", func(s map[string]any) { delete(s, "runtimeClassName") }, []string{"runtime-class"}},
		{"empty runtime class setting", func(s map[string]any) { s["runtimeClassName"] = "" }, []string{"runtime-class"}},
		{"empty vault audience setting", func(s map[string]any) { s["vaultAudience"] = "" }, []string{"service-account-token"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testSettings()
			tc.adjust(s)
			in, err := NewInput(goodJob(), s, "CREATE")
			if err != nil {
				t.Fatal(err)
			}
			if got := ruleNames(p.Evaluate(context.Background(), in)); !slices.Equal(got, tc.want) {
				t.Fatalf("violated rules = %q, want %q", got, tc.want)
			}
		})
	}
}
