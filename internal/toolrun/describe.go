package toolrun

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The kinds `run describe` reads. Secrets are not among them, and no code path here reads one: a
// container's environment shows a Secret's name and key, never a value.
const (
	KindDeployment  = "deployment"
	KindStatefulSet = "statefulset"
	KindService     = "service"
	KindIngress     = "ingress"
	KindConfigMap   = "configmap"
)

// DescribeKinds lists the kinds `run describe` reads.
var DescribeKinds = []string{KindDeployment, KindStatefulSet, KindService, KindIngress, KindConfigMap}

// Bounds of `run describe`.
const (
	// MaxDescribeItems is the most objects one call describes.
	MaxDescribeItems = 50
	// MaxConfigValueBytes bounds one ConfigMap value; MaxConfigBytes all of a ConfigMap's values.
	MaxConfigValueBytes = 4096
	MaxConfigBytes      = 32 << 10
	// maxEnvValueBytes bounds a literal environment value.
	maxEnvValueBytes = 256
)

// DescribeOptions are the inputs of Describe.
type DescribeOptions struct {
	Namespace string
	// Kind is one of DescribeKinds.
	Kind string
	// Name, when set, describes one object; otherwise every object of the kind (at most MaxDescribeItems).
	Name string
	Now  func() time.Time
}

// DescribeResult is what `run describe` writes.
type DescribeResult struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name,omitempty"`
	// Items are sorted by name.
	Items     []Described `json:"items"`
	Total     int         `json:"total"`
	Truncated bool        `json:"truncated"`
}

// Described is one object: its metadata and the part of its spec and status that kind has.
type Described struct {
	Name    string            `json:"name"`
	Created string            `json:"created"`
	Labels  map[string]string `json:"labels"`
	Age
	Workload  *Workload      `json:"workload,omitempty"`
	Service   *ServiceInfo   `json:"service,omitempty"`
	Ingress   *IngressInfo   `json:"ingress,omitempty"`
	ConfigMap *ConfigMapInfo `json:"config_map,omitempty"`
}

// Workload is a Deployment or a StatefulSet.
type Workload struct {
	Replicas          int32       `json:"replicas"`
	ReadyReplicas     int32       `json:"ready_replicas"`
	UpdatedReplicas   int32       `json:"updated_replicas"`
	AvailableReplicas int32       `json:"available_replicas"`
	Strategy          string      `json:"strategy"`
	Selector          string      `json:"selector"`
	Paused            bool        `json:"paused"`
	Conditions        []Condition `json:"conditions"`
	Containers        []Container `json:"containers"`
}

// Container is one container of a workload's pod template.
type Container struct {
	Name  string `json:"name"`
	Image string `json:"image"`
	// Ports are "name:port/protocol".
	Ports []string `json:"ports"`
	// Env is "NAME=value" for a literal value (cut, and scrubbed of anything shaped like a secret), or
	// "NAME from secret s key k" (never the value), "NAME from configmap c key k", "NAME from field f".
	Env      []string          `json:"env"`
	Requests map[string]string `json:"requests"`
	Limits   map[string]string `json:"limits"`
}

// ServiceInfo is a Service.
type ServiceInfo struct {
	// Type is ClusterIP, NodePort, LoadBalancer or ExternalName.
	Type         string            `json:"type"`
	ClusterIP    string            `json:"cluster_ip"`
	ExternalName string            `json:"external_name,omitempty"`
	ExternalIPs  []string          `json:"external_ips"`
	Selector     map[string]string `json:"selector"`
	Ports        []ServicePort     `json:"ports"`
	LoadBalancer []string          `json:"load_balancer"`
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name       string `json:"name,omitempty"`
	Protocol   string `json:"protocol"`
	Port       int32  `json:"port"`
	TargetPort string `json:"target_port"`
	NodePort   int32  `json:"node_port,omitempty"`
}

// IngressInfo is an Ingress.
type IngressInfo struct {
	Class string `json:"class,omitempty"`
	// Rules are "host/path -> service:port" (host "*" for any).
	Rules        []string `json:"rules"`
	TLSHosts     []string `json:"tls_hosts"`
	LoadBalancer []string `json:"load_balancer"`
}

// ConfigMapInfo is a ConfigMap: its keys and values, each cut to MaxConfigValueBytes; binary values only by
// key.
type ConfigMapInfo struct {
	Data       map[string]string `json:"data"`
	BinaryKeys []string          `json:"binary_keys"`
	Immutable  bool              `json:"immutable"`
	// Truncated is true when a value was cut or left out to stay within the bounds.
	Truncated bool `json:"truncated"`
}

// Validate checks the options before anything is read.
func (o *DescribeOptions) Validate() error {
	var errs []string
	if err := validateName("--namespace", o.Namespace, true); err != nil {
		errs = append(errs, err.Error())
	}
	if !slices.Contains(DescribeKinds, o.Kind) {
		errs = append(errs, fmt.Sprintf("--kind %q: one of %s", o.Kind, strings.Join(DescribeKinds, ", ")))
	}
	if o.Name != "" {
		if err := validateName("--name", o.Name, false); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// Describe reads one object, or every object of a kind, in a namespace (needs get and list on that kind).
func Describe(ctx context.Context, client kubernetes.Interface, o DescribeOptions) (DescribeResult, error) {
	if err := o.Validate(); err != nil {
		return DescribeResult{}, err
	}
	now := nowOr(o.Now)
	var items []Described
	var err error
	switch o.Kind {
	case KindDeployment:
		items, err = describeEach(ctx, o, client.AppsV1().Deployments(o.Namespace).Get, func(ctx context.Context) ([]appsv1.Deployment, error) {
			l, err := client.AppsV1().Deployments(o.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		}, func(d *appsv1.Deployment) Described { return describeDeployment(d, now) })
	case KindStatefulSet:
		items, err = describeEach(ctx, o, client.AppsV1().StatefulSets(o.Namespace).Get, func(ctx context.Context) ([]appsv1.StatefulSet, error) {
			l, err := client.AppsV1().StatefulSets(o.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		}, func(s *appsv1.StatefulSet) Described { return describeStatefulSet(s, now) })
	case KindService:
		items, err = describeEach(ctx, o, client.CoreV1().Services(o.Namespace).Get, func(ctx context.Context) ([]corev1.Service, error) {
			l, err := client.CoreV1().Services(o.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		}, func(s *corev1.Service) Described { return describeService(s, now) })
	case KindIngress:
		items, err = describeEach(ctx, o, client.NetworkingV1().Ingresses(o.Namespace).Get, func(ctx context.Context) ([]networkingv1.Ingress, error) {
			l, err := client.NetworkingV1().Ingresses(o.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		}, func(i *networkingv1.Ingress) Described { return describeIngress(i, now) })
	case KindConfigMap:
		items, err = describeEach(ctx, o, client.CoreV1().ConfigMaps(o.Namespace).Get, func(ctx context.Context) ([]corev1.ConfigMap, error) {
			l, err := client.CoreV1().ConfigMaps(o.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		}, func(c *corev1.ConfigMap) Described { return describeConfigMap(c, now) })
	}
	if err != nil {
		return DescribeResult{}, err
	}
	res := DescribeResult{Namespace: o.Namespace, Kind: o.Kind, Name: o.Name, Total: len(items)}
	slices.SortFunc(items, func(a, b Described) int { return strings.Compare(a.Name, b.Name) })
	if len(items) > MaxDescribeItems {
		items, res.Truncated = items[:MaxDescribeItems], true
	}
	res.Items = items
	return res, nil
}

// describeEach gets the named object, or lists them all, and describes each.
func describeEach[T any](ctx context.Context, o DescribeOptions, get func(context.Context, string, metav1.GetOptions) (*T, error),
	list func(context.Context) ([]T, error), describe func(*T) Described) ([]Described, error) {
	if o.Name != "" {
		obj, err := get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get %s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
		}
		return []Described{describe(obj)}, nil
	}
	objs, err := list(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %ss in %s: %w", o.Kind, o.Namespace, err)
	}
	out := make([]Described, 0, len(objs))
	for i := range objs {
		out = append(out, describe(&objs[i]))
	}
	return out, nil
}

func describedMeta(m *metav1.ObjectMeta, now time.Time) Described {
	labels := map[string]string{}
	maps.Copy(labels, m.Labels)
	return Described{Name: m.Name, Created: timestamp(m.CreationTimestamp), Labels: labels, Age: ageOf(m.CreationTimestamp.Time, now)}
}

func describeDeployment(d *appsv1.Deployment, now time.Time) Described {
	out := describedMeta(&d.ObjectMeta, now)
	w := &Workload{
		Replicas: replicas(d.Spec.Replicas), ReadyReplicas: d.Status.ReadyReplicas, UpdatedReplicas: d.Status.UpdatedReplicas,
		AvailableReplicas: d.Status.AvailableReplicas, Strategy: string(d.Spec.Strategy.Type), Selector: selector(d.Spec.Selector),
		Paused: d.Spec.Paused, Conditions: []Condition{}, Containers: containers(&d.Spec.Template.Spec),
	}
	for _, c := range d.Status.Conditions {
		w.Conditions = append(w.Conditions, condition(string(c.Type), string(c.Status), c.Reason, c.Message))
	}
	out.Workload = w
	return out
}

func describeStatefulSet(s *appsv1.StatefulSet, now time.Time) Described {
	out := describedMeta(&s.ObjectMeta, now)
	w := &Workload{
		Replicas: replicas(s.Spec.Replicas), ReadyReplicas: s.Status.ReadyReplicas, UpdatedReplicas: s.Status.UpdatedReplicas,
		AvailableReplicas: s.Status.AvailableReplicas, Strategy: string(s.Spec.UpdateStrategy.Type), Selector: selector(s.Spec.Selector),
		Conditions: []Condition{}, Containers: containers(&s.Spec.Template.Spec),
	}
	for _, c := range s.Status.Conditions {
		w.Conditions = append(w.Conditions, condition(string(c.Type), string(c.Status), c.Reason, c.Message))
	}
	out.Workload = w
	return out
}

func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

func selector(s *metav1.LabelSelector) string {
	if s == nil {
		return ""
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return "<invalid>"
	}
	return sel.String()
}

func containers(spec *corev1.PodSpec) []Container {
	out := []Container{}
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		ct := Container{Name: c.Name, Image: c.Image, Ports: []string{}, Env: []string{}, Requests: map[string]string{}, Limits: map[string]string{}}
		for _, p := range c.Ports {
			ct.Ports = append(ct.Ports, fmt.Sprintf("%s:%d/%s", p.Name, p.ContainerPort, p.Protocol))
		}
		for _, e := range c.Env {
			ct.Env = append(ct.Env, envLine(e))
		}
		for k, v := range c.Resources.Requests {
			ct.Requests[string(k)] = v.String()
		}
		for k, v := range c.Resources.Limits {
			ct.Limits[string(k)] = v.String()
		}
		out = append(out, ct)
	}
	return out
}

// envLine describes one environment variable without ever resolving a Secret.
func envLine(e corev1.EnvVar) string {
	switch {
	case e.ValueFrom == nil:
		v, _ := cutUTF8(e.Value, maxEnvValueBytes)
		// "NAME=value" is the form the scrubber recognises for keys that name a secret (PASSWORD=...).
		return e.Name + "=" + v
	case e.ValueFrom.SecretKeyRef != nil:
		return fmt.Sprintf("%s from secret %s key %s", e.Name, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
	case e.ValueFrom.ConfigMapKeyRef != nil:
		return fmt.Sprintf("%s from configmap %s key %s", e.Name, e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Key)
	case e.ValueFrom.FieldRef != nil:
		return fmt.Sprintf("%s from field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
	case e.ValueFrom.ResourceFieldRef != nil:
		return fmt.Sprintf("%s from resource %s", e.Name, e.ValueFrom.ResourceFieldRef.Resource)
	}
	return e.Name + " from another source"
}

func describeService(s *corev1.Service, now time.Time) Described {
	out := describedMeta(&s.ObjectMeta, now)
	typ := s.Spec.Type
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	si := &ServiceInfo{Type: string(typ), ClusterIP: s.Spec.ClusterIP, ExternalName: s.Spec.ExternalName,
		ExternalIPs: append([]string{}, s.Spec.ExternalIPs...), Selector: map[string]string{}, Ports: []ServicePort{}, LoadBalancer: []string{}}
	maps.Copy(si.Selector, s.Spec.Selector)
	for _, p := range s.Spec.Ports {
		si.Ports = append(si.Ports, ServicePort{Name: p.Name, Protocol: string(p.Protocol), Port: p.Port, TargetPort: p.TargetPort.String(), NodePort: p.NodePort})
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		si.LoadBalancer = append(si.LoadBalancer, firstNonEmpty(in.IP, in.Hostname))
	}
	out.Service = si
	return out
}

func describeIngress(i *networkingv1.Ingress, now time.Time) Described {
	out := describedMeta(&i.ObjectMeta, now)
	ii := &IngressInfo{Rules: []string{}, TLSHosts: []string{}, LoadBalancer: []string{}}
	if i.Spec.IngressClassName != nil {
		ii.Class = *i.Spec.IngressClassName
	}
	backend := func(b networkingv1.IngressBackend) string {
		switch {
		case b.Service != nil && b.Service.Port.Name != "":
			return b.Service.Name + ":" + b.Service.Port.Name
		case b.Service != nil:
			return b.Service.Name + ":" + strconv.Itoa(int(b.Service.Port.Number))
		case b.Resource != nil:
			return b.Resource.Kind + "/" + b.Resource.Name
		}
		return "<none>"
	}
	if b := i.Spec.DefaultBackend; b != nil {
		ii.Rules = append(ii.Rules, "default -> "+backend(*b))
	}
	for _, r := range i.Spec.Rules {
		host := firstNonEmpty(r.Host, "*")
		if r.HTTP == nil {
			continue
		}
		for _, p := range r.HTTP.Paths {
			ii.Rules = append(ii.Rules, host+firstNonEmpty(p.Path, "/")+" -> "+backend(p.Backend))
		}
	}
	for _, t := range i.Spec.TLS {
		ii.TLSHosts = append(ii.TLSHosts, t.Hosts...)
	}
	for _, in := range i.Status.LoadBalancer.Ingress {
		ii.LoadBalancer = append(ii.LoadBalancer, firstNonEmpty(in.IP, in.Hostname))
	}
	out.Ingress = ii
	return out
}

func describeConfigMap(c *corev1.ConfigMap, now time.Time) Described {
	out := describedMeta(&c.ObjectMeta, now)
	ci := &ConfigMapInfo{Data: map[string]string{}, BinaryKeys: []string{}, Immutable: c.Immutable != nil && *c.Immutable}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(c.Data)) {
		v, whole := cutUTF8(c.Data[k], MaxConfigValueBytes)
		if !whole {
			ci.Truncated = true
		}
		if total+len(v) > MaxConfigBytes {
			ci.Truncated = true
			continue
		}
		total += len(v)
		ci.Data[k] = v
	}
	ci.BinaryKeys = slices.Sorted(maps.Keys(c.BinaryData))
	if ci.BinaryKeys == nil {
		ci.BinaryKeys = []string{}
	}
	out.ConfigMap = ci
	return out
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
