package webhook

import (
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The API server defaults fields of a Job before admission webhooks see it. The expectation the webhook
// compares a Job with must carry the same defaults, or every safe Job would differ from it. These
// functions mirror the defaulting of kube-apiserver (pkg/apis/batch/v1 and pkg/apis/core/v1 defaults.go)
// for the fields a sandbox Job uses, and nothing more: a field that the API server defaults and the policy
// does not render makes the comparison fail, which is the safe direction (the integration test
// TestExpectationMatchesAPIDefaults submits the rendering to a real kube-apiserver and compares, so a new
// default in a new Kubernetes version is noticed there, not in production).

const (
	defaultTerminationGracePeriod = int64(30)
	defaultTerminationMessagePath = "/dev/termination-log"
	defaultVolumeMode             = int32(0o644)
	defaultTokenExpiration        = int64(3600)
	defaultScheduler              = "default-scheduler"
)

func applyJobDefaults(j *batchv1.Job) {
	s := &j.Spec
	if s.Parallelism == nil {
		s.Parallelism = ptr.To(int32(1))
	}
	if s.Completions == nil && *s.Parallelism == 1 {
		s.Completions = ptr.To(int32(1))
	}
	if s.BackoffLimit == nil {
		s.BackoffLimit = ptr.To(int32(6))
	}
	if s.CompletionMode == nil {
		s.CompletionMode = ptr.To(batchv1.NonIndexedCompletion)
	}
	if s.Suspend == nil {
		s.Suspend = ptr.To(false)
	}
	if s.PodReplacementPolicy == nil {
		if s.PodFailurePolicy != nil {
			s.PodReplacementPolicy = ptr.To(batchv1.Failed)
		} else {
			s.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed)
		}
	}
	applyPodSpecDefaults(&s.Template.Spec)
}

func applyPodSpecDefaults(s *corev1.PodSpec) {
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr.To(defaultTerminationGracePeriod)
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	if s.SchedulerName == "" {
		s.SchedulerName = defaultScheduler
	}
	if s.EnableServiceLinks == nil {
		s.EnableServiceLinks = ptr.To(true)
	}
	// The v1 API carries the ServiceAccount name twice; the deprecated field mirrors the new one.
	if s.DeprecatedServiceAccount == "" {
		s.DeprecatedServiceAccount = s.ServiceAccountName
	}
	for i := range s.InitContainers {
		applyContainerDefaults(&s.InitContainers[i])
	}
	for i := range s.Containers {
		applyContainerDefaults(&s.Containers[i])
	}
	for i := range s.Volumes {
		applyVolumeDefaults(&s.Volumes[i])
	}
}

func applyContainerDefaults(c *corev1.Container) {
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = defaultTerminationMessagePath
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if f := c.Env[i].ValueFrom; f != nil && f.FieldRef != nil && f.FieldRef.APIVersion == "" {
			f.FieldRef.APIVersion = "v1"
		}
	}
	// Requests default to limits for every resource that has a limit and no request.
	for name, q := range c.Resources.Limits {
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		if _, ok := c.Resources.Requests[name]; !ok {
			c.Resources.Requests[name] = q.DeepCopy()
		}
	}
}

// defaultPullPolicy is Always for an image without a tag or with the tag latest, else IfNotPresent.
func defaultPullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image
	if i := strings.LastIndex(image, "/"); i >= 0 {
		name = image[i+1:]
	}
	tag := ""
	if i := strings.LastIndex(name, ":"); i >= 0 {
		tag = name[i+1:]
	}
	if tag == "" || tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

func applyVolumeDefaults(v *corev1.Volume) {
	switch {
	case v.ConfigMap != nil:
		if v.ConfigMap.DefaultMode == nil {
			v.ConfigMap.DefaultMode = ptr.To(defaultVolumeMode)
		}
	case v.Secret != nil:
		if v.Secret.DefaultMode == nil {
			v.Secret.DefaultMode = ptr.To(defaultVolumeMode)
		}
	case v.DownwardAPI != nil:
		if v.DownwardAPI.DefaultMode == nil {
			v.DownwardAPI.DefaultMode = ptr.To(defaultVolumeMode)
		}
		for i := range v.DownwardAPI.Items {
			if f := v.DownwardAPI.Items[i].FieldRef; f != nil && f.APIVersion == "" {
				f.APIVersion = "v1"
			}
		}
	case v.Projected != nil:
		if v.Projected.DefaultMode == nil {
			v.Projected.DefaultMode = ptr.To(defaultVolumeMode)
		}
		for i := range v.Projected.Sources {
			if t := v.Projected.Sources[i].ServiceAccountToken; t != nil && t.ExpirationSeconds == nil {
				t.ExpirationSeconds = ptr.To(defaultTokenExpiration)
			}
		}
	}
}
