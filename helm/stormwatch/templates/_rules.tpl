{{/* The alert rule groups, built from files/alerts.yaml (see its header) and values
prometheusRule. Output: a Prometheus rules document (`groups:`), used as the PrometheusRule's
spec and, rendered with default values, as deploy/prometheus/stormwatch-rules.yaml. */}}
{{- define "stormwatch.ruleGroups" -}}
{{- $cfg := .Values.prometheusRule -}}
{{- $catalog := .Files.Get "files/alerts.yaml" | fromYaml -}}
{{- if $catalog.Error }}{{ fail (printf "files/alerts.yaml: %s" $catalog.Error) }}{{ end -}}
{{- $base := trimSuffix "/" $cfg.runbookBaseURL -}}
{{- $by := concat (list "storm" "client" "group" "resource") ($cfg.additionalAggregationLabels | default list) | uniq | join ", " -}}
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
{{- $labels := dict "severity" (default $a.severity $o.severity) -}}
{{- $labels = merge $labels (deepCopy ($cfg.additionalAlertLabels | default dict)) -}}
{{- $rule := dict "alert" $a.alert "expr" $expr "labels" $labels "annotations" (dict "summary" $a.summary "description" $a.description "runbook_url" (printf "%s/%s" $base $a.runbook)) -}}
{{- $for := default (default "0s" $a.for) $o.for | toString -}}
{{- if and (ne $for "0s") (ne $for "0") -}}{{- $_ := set $rule "for" $for -}}{{- end -}}
{{- $rules = append $rules $rule -}}
{{- end -}}
{{- end -}}
{{- if $rules -}}
{{- $groups = append $groups (dict "name" (printf "stormwatch.%s" $kind) "rules" $rules) -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "groups" $groups) -}}
{{- end -}}
