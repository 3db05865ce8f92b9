package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// CheckTokenRequest decides on a TokenRequest (serviceaccounts/token) in a sandbox namespace. A token for
// a tool's ServiceAccount is the key to that tool's Vault role, so only the kubelet may have one, for a
// sandbox Pod of that tool that runs on its node, addressed to Vault. No other ServiceAccount of the
// namespace gets a Vault-audience token at all.
func (c *Checker) CheckTokenRequest(ctx context.Context, req Request, obj object) (*Decision, error) {
	p, err := c.loaded()
	if err != nil {
		return nil, err
	}
	spec, _ := obj["spec"].(map[string]any)
	audiences := stringList(spec["audiences"])
	vault := p.Spec.Sandbox.CredentialAgent.VaultAudience
	toolName := ""
	for _, t := range p.Spec.Tools {
		if t.ServiceAccount == req.Name {
			toolName = t.Name
			break
		}
	}
	if toolName == "" {
		if contains(audiences, vault) {
			return nil, deny(rules.TokenRequest, "ServiceAccount %s is not a tool's: it gets no token for the Vault audience %q", req.Name, vault)
		}
		if c.Identities.MCPUser == "system:serviceaccount:"+req.Namespace+":"+req.Name {
			return c.checkMCPToken(req, spec)
		}
		return &Decision{}, nil
	}
	node, isNode := strings.CutPrefix(req.User, "system:node:")
	if !isNode || !contains(req.Groups, "system:nodes") {
		return nil, deny(rules.TokenRequest, "a token for tool ServiceAccount %s is issued only to the kubelet for a sandbox Pod of that tool, not to %s", req.Name, req.User)
	}
	if len(audiences) != 1 || audiences[0] != vault {
		return nil, deny(rules.TokenRequest, "a tool ServiceAccount's token is for the Vault audience %q only, not %q", vault, audiences)
	}
	if exp, ok := number(spec["expirationSeconds"]); ok && exp > 3600 {
		return nil, deny(rules.TokenRequest, "a tool ServiceAccount's token lives at most an hour, not %v seconds", exp)
	}
	ref, _ := spec["boundObjectRef"].(map[string]any)
	kind, _ := ref["kind"].(string)
	podName, _ := ref["name"].(string)
	podUID, _ := ref["uid"].(string)
	if kind != "Pod" || podName == "" || podUID == "" {
		return nil, deny(rules.TokenRequest, "a tool ServiceAccount's token must be bound to its sandbox Pod")
	}
	if c.Cluster == nil {
		return nil, deny(rules.TokenRequest, "the webhook cannot read Pods to check the token's Pod")
	}
	pod, err := c.Cluster.GetPod(ctx, req.Namespace, podName)
	if err != nil {
		return nil, deny(rules.TokenRequest, "cannot read Pod %s: %v", podName, err)
	}
	switch {
	case string(pod.UID) != podUID:
		return nil, deny(rules.TokenRequest, "Pod %s has another UID than the token names", podName)
	case pod.Spec.ServiceAccountName != req.Name:
		return nil, deny(rules.TokenRequest, "Pod %s runs as %s, not %s", podName, pod.Spec.ServiceAccountName, req.Name)
	case pod.Labels[contract.LabelTool] != toolName || pod.Annotations[contract.AnnotationInjected] != "true":
		return nil, deny(rules.TokenRequest, "Pod %s is not a sandbox Pod of tool %s", podName, toolName)
	case pod.Spec.NodeName != node:
		return nil, deny(rules.TokenRequest, "Pod %s does not run on node %s", podName, node)
	case pod.DeletionTimestamp != nil:
		return nil, deny(rules.TokenRequest, "Pod %s is being deleted", podName)
	}
	if err := c.admittedPod(ctx, p, toolName, pod); err != nil {
		return nil, err
	}
	return &Decision{Tool: toolName}, nil
}

// admittedPod checks that pod, as the API server has it now, is a sandbox Pod of tool that the webhook
// admitted, not one that only carries such a Pod's label, annotation and ServiceAccount (one created while
// no webhook was registered: during an install the ServiceAccounts exist before the webhook
// configurations, and an edit user may create Pods between an uninstall and a reinstall). Its controlling
// owner is a Job that exists with that UID, of tool, which the policy in force renders (a call's Job or a
// warm Job), and the Pod is exactly what CheckPod admits for that Job — the comparison warm claims make
// (stillRendered), on the Pod as admitted (asAdmitted).
func (c *Checker) admittedPod(ctx context.Context, p *policy.Compiled, tool string, pod *corev1.Pod) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		return deny(rules.TokenRequest, "cannot read Pod %s: %v", pod.Name, err)
	}
	obj := object(u)
	obj["apiVersion"], obj["kind"] = "v1", "Pod"
	owner, ownerUID, ok := controllerJob(obj)
	if !ok {
		return deny(rules.TokenRequest, "Pod %s has no controlling Job: it is not a sandbox Pod the webhook admitted", pod.Name)
	}
	job, err := c.Cluster.GetJob(ctx, pod.Namespace, owner)
	if err != nil {
		return deny(rules.TokenRequest, "cannot read Job %s, the owner of Pod %s: %v", owner, pod.Name, err)
	}
	if string(job.UID) != ownerUID {
		return deny(rules.TokenRequest, "Pod %s names Job %s with UID %s as its owner, but that Job has UID %s", pod.Name, owner, ownerUID, job.UID)
	}
	if job.Labels[contract.LabelTool] != tool {
		return deny(rules.TokenRequest, "Job %s, the owner of Pod %s, is not a Job of tool %s", owner, pod.Name, tool)
	}
	want, jobTool, err := expectedOwner(p, job, c.claimKeys())
	if err == nil && (jobTool != tool || want.Name != job.Name) {
		err = deny(rules.OwnerJob, "Job %s is not a Job the policy renders for tool %s", job.Name, tool)
	}
	if err == nil {
		err = exactPod(asAdmitted(obj), want, job)
	}
	if err != nil {
		reason := err.Error()
		var d *Denial
		if errors.As(err, &d) {
			reason = d.Rule + ": " + d.Reason
		}
		return deny(rules.TokenRequest, "Pod %s is not a sandbox Pod the webhook admitted for Job %s (%s)", pod.Name, job.Name, reason)
	}
	return c.podAdmitted(ctx, job)
}

// podAdmitted checks that the webhook admitted a Pod of job: its Pod ledger holds the Job's UID. A Job made
// while no webhook was registered (an install's gap, a namespace label removed and put back) can be the exact
// rendering of a call — an approved apply with an approval nobody signed — and its Pod, made by the Job
// controller, that Job's exact Pod: only the ledger tells it from an admitted one.
func (c *Checker) podAdmitted(ctx context.Context, job *batchv1.Job) error {
	if c.Pods == nil {
		return deny(rules.TokenRequest, "the webhook has no Pod ledger, so it cannot tell whether it admitted the Pod of Job %s", job.Name)
	}
	ok, err := c.Pods.PodRecorded(ctx, job.UID)
	switch {
	case err != nil:
		return deny(rules.TokenRequest, "cannot look up the Pod of Job %s in the Pod ledger: %v", job.Name, err)
	case !ok:
		return deny(rules.TokenRequest, "the webhook never admitted a Pod of Job %s (its Pod ledger has no entry): the Job ran without the webhook", job.Name)
	}
	return nil
}

// MaxMCPTokenSeconds is the longest life of an MCP server's token: `agent-sandbox kubeconfig refresh` asks
// for 24 hours.
const MaxMCPTokenSeconds = 24 * 3600

// checkMCPToken decides on a token for the MCP server's ServiceAccount: whoever holds one submits sandbox
// Jobs, so it is minted only through the product's refresh path (`agent-sandbox kubeconfig refresh`, run
// with the chart's identity) and lives a day at most. A namespace `edit` user may not mint one.
func (c *Checker) checkMCPToken(req Request, spec map[string]any) (*Decision, error) {
	if !c.isAdmin(req) {
		return nil, deny(rules.MCPToken, "a token for the MCP server's ServiceAccount %s is minted by `agent-sandbox kubeconfig refresh` with the chart's identity, not by %s", req.Name, req.User)
	}
	if exp, ok := number(spec["expirationSeconds"]); ok && exp > MaxMCPTokenSeconds {
		return nil, deny(rules.MCPToken, "a token for the MCP server's ServiceAccount lives at most %d seconds (24 h), not %.0f", MaxMCPTokenSeconds, exp)
	}
	return &Decision{}, nil
}

// Labels and annotations of the sandbox namespace that put it under the webhook and Pod Security, or
// steer where its Pods run.
var protectedNamespaceKeyPrefixes = []string{"pod-security.kubernetes.io/", "agent-sandbox.dev/"}
var protectedNamespaceKeys = []string{"scheduler.alpha.kubernetes.io/node-selector", "scheduler.alpha.kubernetes.io/defaultTolerations"}

func protectedNamespaceKey(k string) bool {
	for _, p := range protectedNamespaceKeyPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return contains(protectedNamespaceKeys, k)
}

// CheckNamespace decides on an UPDATE or DELETE of the sandbox namespace itself: its selector label,
// Pod Security labels and scheduling annotations are changed only by the chart's own identity, because
// removing them switches the webhook or Pod Security off for everything in it.
func (c *Checker) CheckNamespace(ctx context.Context, req Request, obj, old object) (*Decision, error) {
	p, err := c.loaded()
	if err != nil {
		return nil, err
	}
	if req.Name != p.Spec.Sandbox.Namespace {
		return &Decision{}, nil
	}
	if req.SubResource != "" {
		return c.CheckSubresource(ctx, req, obj, old)
	}
	if c.isAdmin(req) {
		return &Decision{}, nil
	}
	if req.Operation == "DELETE" {
		return nil, deny(rules.SandboxNamespace, "the sandbox namespace %s is deleted only by the chart's identity, not by %s", req.Name, req.User)
	}
	for _, pair := range []struct {
		what     string
		new, old map[string]string
	}{{"label", obj.labels(), old.labels()}, {"annotation", obj.annotations(), old.annotations()}} {
		for k, v := range pair.old {
			if protectedNamespaceKey(k) && pair.new[k] != v {
				return nil, deny(rules.SandboxNamespace, "%s %s of the sandbox namespace cannot be changed or removed by %s", pair.what, k, req.User)
			}
		}
		for k := range pair.new {
			if _, had := pair.old[k]; protectedNamespaceKey(k) && !had {
				return nil, deny(rules.SandboxNamespace, "%s %s cannot be added to the sandbox namespace by %s", pair.what, k, req.User)
			}
		}
	}
	return &Decision{}, nil
}

// CheckProtected decides on the sandbox namespace's NetworkPolicies, ResourceQuotas, LimitRanges and
// ServiceAccounts: another NetworkPolicy would open egress that the chart's policies close, and a tool's
// ServiceAccount given imagePullSecrets passes them into every Pod the Job controller makes for it (which
// exactness then refuses, after the approval is spent), so only the chart's identity writes any of them.
func (c *Checker) CheckProtected(_ context.Context, req Request, obj object) (*Decision, error) {
	if c.isAdmin(req) || c.keepsServiceAccounts(req, obj) {
		return &Decision{}, nil
	}
	return nil, deny(rules.SandboxNamespace, "%s in the sandbox namespace are managed by the agent-sandbox chart only; %s may not %s them", req.Resource, req.User, strings.ToLower(req.Operation))
}

// CheckSecret refuses legacy service-account token Secrets in the sandbox namespace: the token
// controller would fill one with a non-expiring token of, say, a tool's ServiceAccount.
func (c *Checker) CheckSecret(_ context.Context, req Request, obj object) (*Decision, error) {
	if t, _ := obj["type"].(string); t == "kubernetes.io/service-account-token" {
		return nil, deny(rules.TokenRequest, "service-account token Secrets are not allowed in the sandbox namespace (%s)", req.Name)
	}
	return &Decision{}, nil
}

// CAWriterUsers may write the CA ConfigMaps the credential agent trusts: kube-controller-manager's
// root-CA publisher, with and without --use-service-account-credentials.
var CAWriterUsers = []string{"system:serviceaccount:kube-system:root-ca-cert-publisher", "system:kube-controller-manager"}

// CheckConfigMap decides on ConfigMaps of the sandbox namespace. Workspace (tfws-…) and saved-plan
// (tfplan-…) ConfigMaps are immutable and named by the hash of their content, so a name means one content
// for ever; the MCP server creates nothing else and changes nothing. The CA bundles the credential agent
// trusts are written by the root-CA publisher or the chart's identity only.
func (c *Checker) CheckConfigMap(_ context.Context, req Request, obj object) (*Decision, error) {
	p, err := c.loaded()
	if err != nil {
		return nil, err
	}
	ca := &p.Spec.Sandbox.CredentialAgent
	if req.Name == ca.APIServerCACertConfigMap || (ca.VaultCACertConfigMap != "" && req.Name == ca.VaultCACertConfigMap) {
		if c.isAdmin(req) || contains(CAWriterUsers, req.User) {
			return &Decision{}, nil
		}
		return nil, deny(rules.SandboxNamespace, "ConfigMap %s holds a CA the credential agent trusts; %s may not %s it", req.Name, req.User, strings.ToLower(req.Operation))
	}
	isMCP := c.Identities.MCPUser != "" && req.User == c.Identities.MCPUser
	contentAddressed := strings.HasPrefix(req.Name, contract.WorkspaceConfigMapPrefix) || strings.HasPrefix(req.Name, contract.PlanConfigMapPrefix)
	switch {
	case req.Operation == "DELETE" && contentAddressed:
		// A pending approval needs its saved plan: the pruner deletes workspaces and plans when nothing
		// refers to them any more, the MCP server only the workspace of a call it cancelled (the apply
		// publishes its workspace again), the namespace controller when the namespace goes.
		if c.isAdmin(req) || contains(c.Identities.PoolUsers, req.User) || contains(orDefault(c.Identities.NamespaceControllerUsers, DefaultNamespaceControllerUsers), req.User) {
			return &Decision{}, nil
		}
		if isMCP && strings.HasPrefix(req.Name, contract.WorkspaceConfigMapPrefix) {
			return &Decision{}, nil // a workspace is published again by the call that needs it; a saved plan is not
		}
		return nil, deny(rules.ContentAddressed, "ConfigMap %s holds a call's workspace or saved plan; it is deleted by agent-sandbox's pruner, not by %s", req.Name, req.User)
	case req.Operation == "DELETE":
		return &Decision{}, nil
	case contentAddressed:
		if req.Operation != "CREATE" {
			return nil, deny(rules.ContentAddressed, "ConfigMap %s is content-addressed and cannot change", req.Name)
		}
		return &Decision{}, checkContentAddressed(req.Name, obj)
	case isMCP:
		return nil, deny(rules.ContentAddressed, "the MCP server creates only workspace (%s…) and saved-plan (%s…) ConfigMaps, not %s", contract.WorkspaceConfigMapPrefix, contract.PlanConfigMapPrefix, req.Name)
	}
	return &Decision{}, nil
}

func checkContentAddressed(name string, obj object) error {
	if imm, _ := obj["immutable"].(bool); !imm {
		return deny(rules.ContentAddressed, "ConfigMap %s must be immutable", name)
	}
	meta := obj.meta()
	for _, k := range []string{"ownerReferences", "finalizers"} {
		if !isEmpty(meta[k]) {
			return deny(rules.ContentAddressed, "ConfigMap %s must not carry %s", name, k)
		}
	}
	data, binary := stringMap(obj["data"]), obj["binaryData"]
	if raw, _ := obj["data"].(map[string]any); len(raw) != len(data) {
		return deny(rules.ContentAddressed, "ConfigMap %s holds a non-string value", name)
	}
	if strings.HasPrefix(name, contract.WorkspaceConfigMapPrefix) {
		if !isEmpty(binary) {
			return deny(rules.ContentAddressed, "workspace ConfigMap %s must hold text files only", name)
		}
		if want := sandbox.WorkspaceConfigMapName(data); name != want {
			return deny(rules.ContentAddressed, "workspace ConfigMap %s must be named %s after its content", name, want)
		}
		return nil
	}
	bm := stringMap(binary)
	if len(data) != 0 || len(bm) != 1 || bm[sandbox.PlanKey] == "" {
		return deny(rules.ContentAddressed, "saved-plan ConfigMap %s must hold exactly binaryData.%s", name, sandbox.PlanKey)
	}
	plan, err := base64.StdEncoding.DecodeString(bm[sandbox.PlanKey])
	if err != nil {
		return deny(rules.ContentAddressed, "saved-plan ConfigMap %s: %v", name, err)
	}
	sum := sha256.Sum256(plan)
	if want := contract.PlanConfigMapPrefix + hex.EncodeToString(sum[:]); name != want {
		return deny(rules.ContentAddressed, "saved-plan ConfigMap %s must be named %s after its content", name, want)
	}
	return nil
}

// keepsServiceAccounts reports whether req is a controller's own upkeep of the sandbox namespace's
// ServiceAccounts: the service-account controller creating the namespace's "default" one, bare (no
// imagePullSecrets, secrets or automount setting), or the namespace controller deleting them with the
// namespace (which only the chart's identity may delete).
func (c *Checker) keepsServiceAccounts(req Request, obj object) bool {
	if req.Resource != "serviceaccounts" {
		return false
	}
	switch req.Operation {
	case "CREATE":
		_, pulls := obj["imagePullSecrets"]
		_, secrets := obj["secrets"]
		_, automount := obj["automountServiceAccountToken"]
		return req.Name == "default" && !pulls && !secrets && !automount &&
			contains(orDefault(c.Identities.ServiceAccountControllerUsers, DefaultServiceAccountControllerUsers), req.User)
	case "DELETE":
		return contains(orDefault(c.Identities.NamespaceControllerUsers, DefaultNamespaceControllerUsers), req.User)
	}
	return false
}
