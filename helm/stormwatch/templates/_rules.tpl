{{/* The alert rule groups, built from files/alerts.yaml (see its header) and values
prometheusRule. Output: a Prometheus rules document (`groups:`), used as the PrometheusRule's
spec and, rendered with default values, as deploy/prometheus/stormwatch-rules.yaml. */}}
{{- define "stormwatch.ruleGroups" -}}
{{- $cfg := .Values.prometheusRule -}}
{{- $catalog := .Files.Get "files/alerts.yaml" | fromYaml -}}
{{- if $catalog.Error }}{{ fail (printf "files/alerts.yaml: %s" $catalog.Error) }}{{ end -}}
{{- $base := trimSuffix "/" .Values.runbookBaseURL -}}
{{- /* object_namespace: the namespace of the storm's objects, once stormwatch_storm_active carries
it (the agent's Alertmanager push already sends it as `namespace`); absent labels aggregate away. */ -}}
{{- $by := concat (list "storm" "client" "group" "resource" "object_namespace") ($cfg.additionalAggregationLabels | default list) | uniq | join ", " -}}
{{- $groups := list -}}
{{- range $kind := list "storms" "agent" -}}
{{- $rules := list -}}
{{- range $a := index $catalog $kind -}}
{{- $o := index ($cfg.alerts | default dict) $a.alert | default dict -}}
{{- if or (not (hasKey $o "enabled")) $o.enabled -}}
{{- $expr := "" -}}
{{- if eq $kind "storms" -}}
{{- $expr = printf "max by (%s) (stormwatch_storm_active{storm=%q}) > 0" $by $a.storm -}}
{{- else -}}
{{- $expr = replace "JOB_REGEX" $cfg.jobRegex $a.expr -}}
{{- end -}}
{{- /* severity and namespace (Alertmanager routes and groups by them) win over additionalAlertLabels. */ -}}
{{- $ns := $.Release.Namespace -}}
{{- if eq $kind "storms" -}}
{{- $ns = printf "{{ if $labels.object_namespace }}{{ $labels.object_namespace }}{{ else }}%s{{ end }}" $.Release.Namespace -}}
{{- end -}}
{{- $labels := dict "severity" (default $a.severity $o.severity) "namespace" $ns -}}
{{- $labels = merge $labels (deepCopy ($cfg.additionalAlertLabels | default dict)) -}}
{{- /* Thresholds in the texts come from the agent's config: [[key]] is config.detectors.<storm>.<key>,
[[key:MiB]] the same in MiB. */ -}}
{{- $ann := dict "summary" $a.summary "description" $a.description -}}
{{- range $k, $text := $ann -}}
{{- if $a.storm -}}
{{- range $key, $v := index $.Values.config.detectors $a.storm -}}
{{- if not (kindIs "slice" $v) -}}
{{- $text = replace (printf "[[%s:MiB]]" $key) (divf $v 1048576 | toString) $text -}}
{{- $text = replace (printf "[[%s]]" $key) (toString $v) $text -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if contains "[[" $text -}}{{- fail (printf "files/alerts.yaml: %s %s: unknown threshold in %q" $a.alert $k $text) -}}{{- end -}}
{{- $_ := set $ann $k $text -}}
{{- end -}}
{{- $_ := set $ann "runbook_url" (printf "%s/%s" $base $a.runbook) -}}
{{- $rule := dict "alert" $a.alert "expr" $expr "labels" $labels "annotations" $ann -}}
{{- /* Every alert has a `for`: storms prometheusRule.for, agent health their own (files/alerts.yaml). */ -}}
{{- $for := default (ternary $cfg.for $a.for (eq $kind "storms")) $o.for | toString -}}
{{- $_ := set $rule "for" $for -}}
{{- $rules = append $rules $rule -}}
{{- end -}}
{{- end -}}
{{- if $rules -}}
{{- $groups = append $groups (dict "name" (printf "stormwatch.%s" $kind) "rules" $rules) -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "groups" $groups) -}}
{{- end -}}
