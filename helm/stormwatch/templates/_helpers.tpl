{{/* Names and labels, following the conventions of kube-prometheus-stack and its node-exporter
chart: app.kubernetes.io/* labels, helm.sh/chart, selector labels that never change after install. */}}

{{- define "stormwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<name>, or <release> when it already contains the name; 63 chars (DNS label). */}}
{{- define "stormwatch.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "stormwatch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "stormwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stormwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "stormwatch.labels" -}}
helm.sh/chart: {{ include "stormwatch.chart" . }}
{{ include "stormwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: agent
app.kubernetes.io/part-of: stormwatch
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "stormwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "stormwatch.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* An image reference from {registry, repository, tag, digest}; `what` names the value in the
error. There is no default repository: the image must come from a registry the user controls. */}}
{{- define "stormwatch.imageRef" -}}
{{- $img := .image -}}
{{- $repo := required (printf "%s.repository is required: the image built from the repository's Dockerfile, pushed to your registry (e.g. --set %s.repository=registry.example.com/%s)" .what .what .name) $img.repository -}}
{{- if $img.registry -}}{{- $repo = printf "%s/%s" $img.registry $repo -}}{{- end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- $tag := default .tag $img.tag | toString -}}
{{- if not $tag -}}{{- fail (printf "%s.tag or %s.digest is required" .what .what) -}}{{- end -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{- define "stormwatch.image" -}}
{{- include "stormwatch.imageRef" (dict "image" .Values.image "what" "image" "name" "stormwatch" "tag" .Chart.AppVersion) -}}
{{- end -}}

{{/* The agent's metrics address: behind kube-rbac-proxy, loopback only. */}}
{{- define "stormwatch.metricsAddress" -}}
{{- if .Values.rbacProxy.enabled -}}
{{- printf "127.0.0.1:%d" (int .Values.rbacProxy.upstreamPort) -}}
{{- else -}}
{{- printf "0.0.0.0:%d" (int .Values.agent.metricsPort) -}}
{{- end -}}
{{- end -}}

{{/* Labels of the ServiceMonitor/PodMonitor/PrometheusRule: the chart's, prometheusLabels (what
the Prometheus selects by, e.g. release: kube-prometheus-stack), the object's additionalLabels. */}}
{{- define "stormwatch.monitoringLabels" -}}
{{ include "stormwatch.labels" .root }}
{{- with merge (deepCopy (.extra | default dict)) (deepCopy (.root.Values.prometheusLabels | default dict)) }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* sampleLimit: the value, or sized from the agent's client cap (values.yaml). */}}
{{- define "stormwatch.sampleLimit" -}}
{{- if kindIs "invalid" .limit -}}
{{- mul (add1 (int .root.Values.config.limits.max_clients)) 200 -}}
{{- else -}}
{{- int64 .limit -}}
{{- end -}}
{{- end -}}

{{/* Namespace of a monitoring object: its own override, else the release namespace. */}}
{{- define "stormwatch.monitorNamespace" -}}
{{- default .root.Release.Namespace .override -}}
{{- end -}}

{{/* The `node` label on every scraped series: the node the pod runs on (the dashboard's
$node variable), as node-exporter's chart sets instance/node from the pod's node name. */}}
{{- define "stormwatch.nodeRelabeling" -}}
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: node
  action: replace
{{- end -}}

{{/* How Prometheus authenticates to kube-rbac-proxy: its own service account token (a file in
the Prometheus pod) for a ServiceMonitor; PodMonitor endpoints cannot name a file, so a Secret. */}}
{{- define "stormwatch.rbacProxyScrapeAuth" -}}
{{- $p := .root.Values.rbacProxy -}}
{{- if eq .kind "serviceMonitor" -}}
bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
{{- else -}}
{{- $s := $p.bearerTokenSecret | default dict -}}
{{- if not (and $s.name $s.key) -}}
{{- fail "rbacProxy.enabled with podMonitor.enabled needs rbacProxy.bearerTokenSecret.{name,key}: a PodMonitor cannot use Prometheus's own token file" -}}
{{- end -}}
authorization:
  type: Bearer
  credentials:
    name: {{ $s.name }}
    key: {{ $s.key }}
{{- end }}
tlsConfig:
  {{- if $p.tlsSecret }}
  # The Secret's ca.crt signs its tls.crt, issued for this name.
  serverName: {{ include "stormwatch.fullname" .root }}.{{ .root.Release.Namespace }}.svc
  ca:
    secret:
      name: {{ $p.tlsSecret }}
      key: ca.crt
  {{- else }}
  # The proxy's certificate is self-signed at start (rbacProxy.tlsSecret unset).
  insecureSkipVerify: true
  {{- end }}
{{- end -}}
