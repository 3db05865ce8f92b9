{{/*
Names. The full name prefixes every namespaced object of the release namespace; with a release called
"agent-sandbox" it is "agent-sandbox" and the webhook's Service is "agent-sandbox-webhook" (the webhook's
flag defaults).
*/}}
{{- define "agent-sandbox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agent-sandbox.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "agent-sandbox.webhookName" -}}
{{- printf "%s-webhook" (include "agent-sandbox.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agent-sandbox.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "agent-sandbox.webhookName" .)) .Values.tls.secretName }}
{{- end }}

{{- /* The Secret with the webhook's warm-claim signing key; the webhook creates it on first start. */ -}}
{{- define "agent-sandbox.claimSigningSecretName" -}}
{{- printf "%s-claim-signing" (include "agent-sandbox.webhookName" .) }}
{{- end }}

{{- define "agent-sandbox.policyConfigMapName" -}}
{{- printf "%s-policy" (include "agent-sandbox.fullname" .) }}
{{- end }}

{{- define "agent-sandbox.approversConfigMapName" -}}
{{- default (printf "%s-approvers" (include "agent-sandbox.fullname" .)) .Values.approvers.existingConfigMap }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "agent-sandbox.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "agent-sandbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agent-sandbox
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of the webhook Pods. */}}
{{- define "agent-sandbox.webhookSelectorLabels" -}}
app.kubernetes.io/name: {{ include "agent-sandbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end }}

{{- define "agent-sandbox.webhookLabels" -}}
{{ include "agent-sandbox.labels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{/*
The webhook's image reference: repository[:tag][@digest]. With the default values it is the one image that
also runs the credential agent and every tool (see agent-sandbox.credentialAgentImage and
agent-sandbox.runnerImage).
*/}}
{{- define "agent-sandbox.image" -}}
{{- include "agent-sandbox.imageRef" (list . .Values.image) }}
{{- end }}

{{/* The credential agent's image: credentialAgent.image, or the webhook's image when its repository is empty. */}}
{{- define "agent-sandbox.credentialAgentImage" -}}
{{- if .Values.credentialAgent.image.repository }}
{{- include "agent-sandbox.imageRef" (list . .Values.credentialAgent.image) }}
{{- else }}
{{- include "agent-sandbox.image" . }}
{{- end }}
{{- end }}

{{/* The image of the shipped policy's Terraform tools: runner.image, or the webhook's image when its repository is empty. */}}
{{- define "agent-sandbox.runnerImage" -}}
{{- if .Values.runner.image.repository }}
{{- include "agent-sandbox.imageRef" (list . .Values.runner.image) }}
{{- else }}
{{- include "agent-sandbox.image" . }}
{{- end }}
{{- end }}

{{/* repository[:tag][@digest] of (list $ imageValues); an empty tag means the chart's appVersion. */}}
{{- define "agent-sandbox.imageRef" -}}
{{- $root := index . 0 }}
{{- $img := index . 1 }}
{{- $tag := default $root.Chart.AppVersion $img.tag }}
{{- $ref := $img.repository }}
{{- if $tag }}{{ $ref = printf "%s:%s" $ref $tag }}{{ end }}
{{- if $img.digest }}{{ $ref = printf "%s@%s" $ref $img.digest }}{{ end }}
{{- $ref }}
{{- end }}

{{/*
The effective policy, as YAML. Either values.policy, used as given, or files/policy.yaml (a symlink to the
repository's policy/policy.yaml) with the values' overrides set on it. Templates that need a field of the
policy read it with: include "agent-sandbox.policy" . | fromYaml
*/}}
{{- define "agent-sandbox.policy" -}}
{{- $p := dict }}
{{- if .Values.policy }}
{{- $p = deepCopy .Values.policy }}
{{- else }}
{{- $raw := .Files.Get "files/policy.yaml" }}
{{- if not $raw }}
{{- fail "files/policy.yaml is missing or empty: it should be a symlink to the repository's policy/policy.yaml (or set values.policy)" }}
{{- end }}
{{- $p = fromYaml $raw }}
{{- if hasKey $p "Error" }}
{{- fail (printf "files/policy.yaml is not valid YAML: %s" $p.Error) }}
{{- end }}
{{- $spec := required "files/policy.yaml has no spec" $p.spec }}
{{- $sandbox := required "files/policy.yaml has no spec.sandbox" $spec.sandbox }}
{{- $agent := required "files/policy.yaml has no spec.sandbox.credentialAgent" $sandbox.credentialAgent }}
{{- $_ := set $agent "image" (include "agent-sandbox.credentialAgentImage" .) }}
{{- $_ := set $agent "vaultAddress" .Values.vault.address }}
{{- with .Values.vault.namespace }}
{{- $_ := set $agent "vaultNamespace" . }}
{{- end }}
{{- $_ := set $agent "apiServer" .Values.apiServer.url }}
{{- /*
Tools with per-call Terraform inputs (a workspace or a saved plan) or a check run in the runner image, which
has Terraform; the others in the credential agent's image, which has agent-sandbox alone. The policy requires
the latter of warm tools (their entry point executes the claimed argv), and they need nothing more.
*/}}
{{- $runner := include "agent-sandbox.runnerImage" . }}
{{- $agentImage := include "agent-sandbox.credentialAgentImage" . }}
{{- range $spec.tools }}
{{- if or .workspace .plan .check }}
{{- $_ := set . "image" $runner }}
{{- else }}
{{- $_ := set . "image" $agentImage }}
{{- end }}
{{- end }}
{{- with .Values.sandbox.nodeSelector }}
{{- $_ := set $sandbox "nodeSelector" . }}
{{- end }}
{{- with .Values.sandbox.tolerations }}
{{- $_ := set $sandbox "tolerations" . }}
{{- end }}
{{- with .Values.clusterID }}
{{- $_ := set $spec "clusterID" . }}
{{- end }}
{{- end }}
{{- $ns := "" }}
{{- with $p.spec }}{{ with .sandbox }}{{ $ns = .namespace }}{{ end }}{{ end }}
{{- if not $ns }}
{{- fail "the policy has no spec.sandbox.namespace: the chart needs it to place the sandbox namespace's objects" }}
{{- end }}
{{- if eq $ns .Release.Namespace }}
{{- fail (printf "the release namespace %q is the policy's sandbox namespace: install the webhook into its own namespace (for example agent-sandbox-system), never into the namespace it guards" $ns) }}
{{- end }}
{{- toYaml $p }}
{{- end }}

{{/* The sandbox namespace: the effective policy's spec.sandbox.namespace. */}}
{{- define "agent-sandbox.sandboxNamespace" -}}
{{- (include "agent-sandbox.policy" . | fromYaml).spec.sandbox.namespace }}
{{- end }}

{{/*
The clientConfig of one webhook; the argument is (list $ "/path"). No caBundle: in tls.mode self the webhook
injects it at runtime, in tls.mode certManager cert-manager's CA injector does. Helm's three-way merge keeps
an injected caBundle across upgrades, because the chart never sets the field.
*/}}
{{- define "agent-sandbox.clientConfig" -}}
{{- $root := index . 0 -}}
service:
  namespace: {{ $root.Release.Namespace }}
  name: {{ include "agent-sandbox.webhookName" $root }}
  path: {{ index . 1 }}
  port: 443
{{- end }}

{{/* The cert-manager annotation that injects the Certificate's CA into a webhook configuration. */}}
{{- define "agent-sandbox.injectCA" -}}
{{- if eq .Values.tls.mode "certManager" -}}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "agent-sandbox.webhookName" .) }}
{{- end }}
{{- end }}

{{/*
"true" when the chart is rendered against a cluster (helm install, upgrade, or --dry-run=server), empty under
helm template and helm lint, where lookup returns nothing. Presence checks of other operators' APIs (cert-manager,
prometheus-operator) run only then: a template render cannot know what the target cluster serves.
*/}}
{{- define "agent-sandbox.connected" -}}
{{- if lookup "v1" "Namespace" "" "kube-system" }}true{{ end }}
{{- end }}

{{/*
The checks below repeat the schema's refusals of values that would silently weaken the sandbox (invariant 2:
egress only to DNS, the API server and Vault; the chart's trusted identities). values.schema.json refuses
them first, with the value's path; these fail the render too when the schema is skipped
(helm --skip-schema-validation), each with the value's name and the reason.
*/}}

{{/* agent-sandbox.checkCIDR (list NAME CIDR): an IPv4 CIDR no wider than /8, or an IPv6 one no wider than /32. */}}
{{- define "agent-sandbox.checkCIDR" -}}
{{- $name := index . 0 -}}
{{- $cidr := toString (index . 1) -}}
{{- $v4 := regexMatch "^[0-9]{1,3}(\\.[0-9]{1,3}){3}/[0-9]{1,2}$" $cidr -}}
{{- $v6 := regexMatch "^[0-9a-fA-F:]*:[0-9a-fA-F:]*/[0-9]{1,3}$" $cidr -}}
{{- if not (or $v4 $v6) -}}
{{- fail (printf "%s: %q is not an IPv4 or IPv6 CIDR (address/prefix)" $name $cidr) -}}
{{- end -}}
{{- $prefix := atoi (last (splitList "/" $cidr)) -}}
{{- if or (and $v4 (lt $prefix 8)) (and $v6 (lt $prefix 32)) -}}
{{- fail (printf "%s: %s is too wide (IPv4 needs /8 or narrower, IPv6 /32): it is not a destination but a large part of the internet (/0 is every address), and sandbox egress is an allowlist" $name $cidr) -}}
{{- end -}}
{{- end }}

{{/* agent-sandbox.checkPeer (list NAME PEER): a NetworkPolicy peer that names its destination. */}}
{{- define "agent-sandbox.checkPeer" -}}
{{- $name := index . 0 -}}
{{- $peer := index . 1 -}}
{{- if not (and (kindIs "map" $peer) $peer) -}}
{{- fail (printf "%s is an empty NetworkPolicy peer, which matches every address: name the destination (an ipBlock, or a namespaceSelector with labels)" $name) -}}
{{- end -}}
{{- if hasKey $peer "ipBlock" -}}
{{- $block := $peer.ipBlock -}}
{{- include "agent-sandbox.checkCIDR" (list (printf "%s.ipBlock.cidr" $name) (and (kindIs "map" $block) $block.cidr)) -}}
{{- else if hasKey $peer "namespaceSelector" -}}
{{- $sel := $peer.namespaceSelector -}}
{{- if not (and (kindIs "map" $sel) (or $sel.matchLabels $sel.matchExpressions)) -}}
{{- fail (printf "%s.namespaceSelector is empty, which selects every namespace: select the destination's namespace by its labels" $name) -}}
{{- end -}}
{{- else -}}
{{- $sel := $peer.podSelector -}}
{{- if not (and (kindIs "map" $sel) (or $sel.matchLabels $sel.matchExpressions)) -}}
{{- fail (printf "%s.podSelector is empty and alone, which selects every Pod of the sandbox namespace: select the destination by its labels" $name) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* agent-sandbox.checkEgressRule (list NAME RULE): an egress rule with destinations and ports, each named. */}}
{{- define "agent-sandbox.checkEgressRule" -}}
{{- $name := index . 0 -}}
{{- $rule := index . 1 -}}
{{- if not (and (kindIs "map" $rule) $rule.to) -}}
{{- fail (printf "%s has no destinations (to): an egress rule without them allows every address ({} allows all egress)" $name) -}}
{{- end -}}
{{- if not $rule.ports -}}
{{- fail (printf "%s has no ports: an egress rule without them allows every port" $name) -}}
{{- end -}}
{{- range $i, $peer := $rule.to -}}
{{- include "agent-sandbox.checkPeer" (list (printf "%s.to[%d]" $name $i) $peer) -}}
{{- end -}}
{{- range $i, $port := $rule.ports -}}
{{- if not (and (kindIs "map" $port) $port.port) -}}
{{- fail (printf "%s.ports[%d] has no port: a port entry without one allows every port of its protocol" $name $i) -}}
{{- end -}}
{{- if and (kindIs "map" $port) (hasKey $port "endPort") -}}
{{- fail (printf "%s.ports[%d] has an endPort: list the ports instead of a range" $name $i) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
agent-sandbox.checkIdentities: no list of trusted identities names everyone. system:authenticated,
system:unauthenticated, system:serviceaccounts[:<namespace>] and system:anonymous stand for every user,
request or ServiceAccount (of a namespace); trusting one would make every such caller the trusted identity.
*/}}
{{- define "agent-sandbox.checkIdentities" -}}
{{- $everyone := list "system:authenticated" "system:unauthenticated" "system:anonymous" "system:serviceaccounts" -}}
{{- $named := list -}}
{{- range $list := list "jobControllerUsers" "schedulerUsers" "adminUsers" "adminGroups" -}}
{{- range $i, $id := index $.Values.webhook $list -}}
{{- $named = append $named (list (printf "webhook.%s[%d]" $list $i) $id) -}}
{{- end -}}
{{- end -}}
{{- range $i, $s := .Values.webhook.metrics.readers -}}
{{- $named = append $named (list (printf "webhook.metrics.readers[%d].name" $i) $s.name) -}}
{{- end -}}
{{- range $i, $s := .Values.auditAnchors.reader.subjects -}}
{{- $named = append $named (list (printf "auditAnchors.reader.subjects[%d].name" $i) $s.name) -}}
{{- end -}}
{{- range $named -}}
{{- $id := toString (index . 1) -}}
{{- if or (has $id $everyone) (hasPrefix "system:serviceaccounts:" $id) -}}
{{- fail (printf "%s: %q stands for everyone (every user, request or ServiceAccount) and is never trusted: name the exact users or groups" (index . 0) $id) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The ValidatingAdmissionPolicy (and its binding) that keeps the webhook's ServiceAccount to injecting
caBundle with self-managed TLS (webhookconfigurations-guard.yaml); check-install checks it. */}}
{{- define "agent-sandbox.configurationsGuardName" -}}
{{- printf "%s.%s.webhook-configurations" (include "agent-sandbox.webhookName" .) .Release.Namespace }}
{{- end }}
