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

{{- define "stormwatch.image" -}}
{{- $repo := .Values.image.repository -}}
{{- if .Values.image.registry -}}{{- $repo = printf "%s/%s" .Values.image.registry $repo -}}{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag | toString) -}}
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
