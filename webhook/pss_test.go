package webhook

import (
	"context"
	"math/rand/v2"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
)

// pssMutations each make a sandbox pod template break (or, for a few, stay within) one check of the Pod
// Security Standards, in the tool container, the injected sidecar or the pod-level settings.
var pssMutations = map[string]func(j *batchv1.Job){
	"hostNetwork":          func(j *batchv1.Job) { j.Spec.Template.Spec.HostNetwork = true },
	"hostPID":              func(j *batchv1.Job) { j.Spec.Template.Spec.HostPID = true },
	"hostIPC":              func(j *batchv1.Job) { j.Spec.Template.Spec.HostIPC = true },
	"privileged tool":      func(j *batchv1.Job) { tc(j).SecurityContext.Privileged = ptr.To(true) },
	"privileged sidecar":   func(j *batchv1.Job) { sc(j).SecurityContext.Privileged = ptr.To(true) },
	"add SYS_ADMIN":        func(j *batchv1.Job) { tc(j).SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"} },
	"add NET_BIND_SERVICE": func(j *batchv1.Job) { tc(j).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"} },
	"drop nothing":         func(j *batchv1.Job) { sc(j).SecurityContext.Capabilities.Drop = nil },
	"hostPath": func(j *batchv1.Job) {
		ps(j).Volumes = append(ps(j).Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
	},
	"nfs volume": func(j *batchv1.Job) {
		ps(j).Volumes = append(ps(j).Volumes, corev1.Volume{Name: "n", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "x", Path: "/"}}})
	},
	"secret volume": func(j *batchv1.Job) {
		ps(j).Volumes = append(ps(j).Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "x"}}})
	},
	"hostPort": func(j *batchv1.Job) { tc(j).Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}} },
	"apparmor pod unconfined": func(j *batchv1.Job) {
		pod(j).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	},
	"apparmor tool unconfined": func(j *batchv1.Job) {
		tc(j).SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	},
	"apparmor annotation": func(j *batchv1.Job) {
		j.Spec.Template.Annotations["container.apparmor.security.beta.kubernetes.io/tool"] = "unconfined"
	},
	"apparmor annotation local": func(j *batchv1.Job) {
		j.Spec.Template.Annotations["container.apparmor.security.beta.kubernetes.io/tool"] = "localhost/x"
	},
	"selinux pod type spc_t": func(j *batchv1.Job) { pod(j).SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} },
	"selinux tool user":      func(j *batchv1.Job) { tc(j).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"} },
	"selinux sidecar role":   func(j *batchv1.Job) { sc(j).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Role: "sysadm_r"} },
	"selinux container_t": func(j *batchv1.Job) {
		tc(j).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t"}
	},
	"procMount unmasked": func(j *batchv1.Job) {
		ps(j).HostUsers = ptr.To(false)
		tc(j).SecurityContext.ProcMount = ptr.To(corev1.UnmaskedProcMount)
	},
	"seccomp pod unconfined": func(j *batchv1.Job) {
		pod(j).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	},
	"seccomp tool unconfined": func(j *batchv1.Job) {
		tc(j).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	},
	"seccomp nowhere": func(j *batchv1.Job) {
		pod(j).SeccompProfile = nil
		tc(j).SecurityContext.SeccompProfile = nil
		sc(j).SecurityContext.SeccompProfile = nil
	},
	"seccomp localhost": func(j *batchv1.Job) {
		pod(j).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("x")}
	},
	"unsafe sysctl": func(j *batchv1.Job) { pod(j).Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "1"}} },
	"safe sysctl": func(j *batchv1.Job) {
		pod(j).Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ping_group_range", Value: "0 0"}}
	},
	"hostProcess pod": func(j *batchv1.Job) {
		pod(j).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
	},
	"hostProcess tool": func(j *batchv1.Job) {
		tc(j).SecurityContext.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
	},
	"privilege escalation":       func(j *batchv1.Job) { tc(j).SecurityContext.AllowPrivilegeEscalation = ptr.To(true) },
	"privilege escalation unset": func(j *batchv1.Job) { sc(j).SecurityContext.AllowPrivilegeEscalation = nil },
	"runAsNonRoot pod false":     func(j *batchv1.Job) { pod(j).RunAsNonRoot = ptr.To(false) },
	"runAsNonRoot tool false":    func(j *batchv1.Job) { tc(j).SecurityContext.RunAsNonRoot = ptr.To(false) },
	"runAsNonRoot nowhere": func(j *batchv1.Job) {
		pod(j).RunAsNonRoot = nil
		tc(j).SecurityContext.RunAsNonRoot = nil
		sc(j).SecurityContext.RunAsNonRoot = nil
	},
	"runAsUser pod 0":     func(j *batchv1.Job) { pod(j).RunAsUser = ptr.To(int64(0)) },
	"runAsUser sidecar 0": func(j *batchv1.Job) { sc(j).SecurityContext.RunAsUser = ptr.To(int64(0)) },
	"probe on another host": func(j *batchv1.Job) {
		tc(j).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "10.0.0.1", Port: intstr.FromInt32(80)}}}
	},
	"postStart tcp to another host": func(j *batchv1.Job) {
		if sc(j).Lifecycle == nil {
			sc(j).Lifecycle = &corev1.Lifecycle{}
		}
		sc(j).Lifecycle.PostStart = &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Host: "10.0.0.1", Port: intstr.FromInt32(80)}}
	},
	"preStop http to another host": func(j *batchv1.Job) {
		tc(j).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "evil", Port: intstr.FromInt32(80)}}}
	},
}

func ps(j *batchv1.Job) *corev1.PodSpec             { return &j.Spec.Template.Spec }
func pod(j *batchv1.Job) *corev1.PodSecurityContext { return j.Spec.Template.Spec.SecurityContext }
func tc(j *batchv1.Job) *corev1.Container           { return &j.Spec.Template.Spec.Containers[0] }
func sc(j *batchv1.Job) *corev1.Container           { return &j.Spec.Template.Spec.InitContainers[0] }

// TestIsolationRulesCoverPodSecurityRestricted checks, against the Pod Security admission library of the
// Kubernetes version the product runs on (1.35), that every pod template the "restricted" profile refuses
// is refused by the policy's own CEL isolation rules at the Job, before any Pod exists: one check at a
// time, then random combinations. Namespace Pod Security is the second layer, not the first.
func TestIsolationRulesCoverPodSecurityRestricted(t *testing.T) {
	f := newFixture(t)
	eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.MajorMinorVersion(1, 35)}
	forbidden := func(j *batchv1.Job) (bool, string) {
		r := psapolicy.AggregateCheckResults(eval.EvaluatePod(restricted, &j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec))
		return !r.Allowed, r.ForbiddenReason()
	}
	celDenies := func(j *batchv1.Job) error {
		return f.c.evaluate(context.Background(), f.p, obj(t, asServer(t, j)), "Job", "CREATE")
	}
	base := f.job(t, "k8s_get_pod_status", podParams(), "")
	if bad, why := forbidden(base); bad {
		t.Fatalf("the rendered sandbox Job itself violates restricted: %s", why)
	}
	if err := celDenies(base); err != nil {
		t.Fatalf("the rendered sandbox Job is denied by the rules: %v", err)
	}
	names := make([]string, 0, len(pssMutations))
	for name := range pssMutations {
		names = append(names, name)
	}
	checked := 0
	for _, name := range names {
		j := base.DeepCopy()
		pssMutations[name](j)
		bad, why := forbidden(j)
		if !bad {
			continue // within restricted; the rules may still refuse it (they are stricter)
		}
		checked++
		if celDenies(j) == nil {
			t.Errorf("%s: Pod Security restricted refuses it (%s) but the isolation rules admit it", name, why)
		}
	}
	if checked < 30 {
		t.Fatalf("only %d mutations violate restricted; the table is broken", checked)
	}
	rng := rand.New(rand.NewPCG(1, 35))
	for i := range 500 {
		j := base.DeepCopy()
		picked := []string{}
		for range 1 + rng.IntN(3) {
			n := names[rng.IntN(len(names))]
			picked = append(picked, n)
			pssMutations[n](j)
		}
		if bad, why := forbidden(j); bad && celDenies(j) == nil {
			t.Errorf("combination %d %q: restricted refuses it (%s) but the rules admit it", i, picked, why)
		}
	}
}
