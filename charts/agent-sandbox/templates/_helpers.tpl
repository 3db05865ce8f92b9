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
