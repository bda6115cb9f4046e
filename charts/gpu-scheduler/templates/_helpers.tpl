{{/*
The chart's name, and the full name every object is named after: the release name when it holds
the chart's name (`helm install gpu-scheduler ...`: gpu-scheduler, as the kustomize base names
its objects), else <release>-<chart>; cut to 52 characters so that suffixes such as
"-leader-election" stay within the 63 of a label value.
*/}}
{{- define "gpu-scheduler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-scheduler.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels that select the scheduler pods. */}}
{{- define "gpu-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-scheduler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The labels of every object. */}}
{{- define "gpu-scheduler.labels" -}}
{{ include "gpu-scheduler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
The daemon's configuration as rendered into the ConfigMap: .Values.config with the Lease named
after the release (leaderElection.leaseName: the full name, leaseNamespace: the release's
namespace, unless set) and the `webhooks` section from .Values.webhooks. Returned as YAML.
*/}}
{{- define "gpu-scheduler.config" -}}
{{- $config := deepCopy .Values.config }}
{{- $election := deepCopy (default (dict) $config.leaderElection) }}
{{- if not $election.leaseName }}
{{- $_ := set $election "leaseName" (include "gpu-scheduler.fullname" .) }}
{{- end }}
{{- if not $election.leaseNamespace }}
{{- $_ := set $election "leaseNamespace" .Release.Namespace }}
{{- end }}
{{- $_ := set $config "leaderElection" $election }}
{{- if .Values.webhooks.enabled }}
{{- $webhooks := dict "enabled" true "address" "0.0.0.0" "port" .Values.webhooks.port "certDir" (include "gpu-scheduler.webhookCertDir" .) }}
{{- $_ := set $config "webhooks" $webhooks }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* The Lease the replicas compete for, as "namespace/name" parts of the configuration. */}}
{{- define "gpu-scheduler.leaseName" -}}
{{- (include "gpu-scheduler.config" . | fromYaml).leaderElection.leaseName }}
{{- end }}

{{- define "gpu-scheduler.leaseNamespace" -}}
{{- (include "gpu-scheduler.config" . | fromYaml).leaderElection.leaseNamespace }}
{{- end }}

{{/* The metrics server's port: the port of config.metricsAddress. */}}
{{- define "gpu-scheduler.metricsPort" -}}
{{- regexReplaceAll "^.*:([0-9]+)$" .Values.config.metricsAddress "${1}" }}
{{- end }}

{{/* /metrics speaks HTTPS (config.metricsServing.secure). */}}
{{- define "gpu-scheduler.metricsScheme" -}}
{{- if and .Values.config.metricsServing .Values.config.metricsServing.secure }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{- define "gpu-scheduler.webhookService" -}}
{{- printf "%s-webhooks" (include "gpu-scheduler.fullname" .) }}
{{- end }}

{{- define "gpu-scheduler.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "gpu-scheduler.fullname" .) }}
{{- end }}

{{- define "gpu-scheduler.webhookCertDir" -}}
/etc/gpu-scheduler-webhook-tls
{{- end }}

{{- define "gpu-scheduler.metricsScraper" -}}
{{- printf "%s-metrics-scraper" (include "gpu-scheduler.fullname" .) }}
{{- end }}

{{/*
The objects of one file of the kustomize base, shipped in the chart under files/ (copies of
manifests/ files: `python -m hack.localcluster.chart_files` refreshes them, and
tests/unit/test_chart_drift.py fails while one differs), as a YAML list: every document of the
file, comments dropped. Call with (dict "root" $ "file" "files/<name>.yaml") and read back with
fromYamlArray.
*/}}
{{- define "gpu-scheduler.baseObjects" -}}
{{- $objects := list }}
{{- range regexSplit "(?m)^---[ \t]*$" (.root.Files.Get .file) -1 }}
{{- $object := fromYaml . }}
{{- if hasKey $object "Error" }}
{{- fail (printf "%s: %s" $.file $object.Error) }}
{{- end }}
{{- if $object }}
{{- $objects = append $objects $object }}
{{- end }}
{{- end }}
{{- if not $objects }}
{{- fail (printf "%s: no objects" .file) }}
{{- end }}
{{- toYaml $objects }}
{{- end }}

{{/*
One object of the kustomize base re-homed into the release, as YAML: its name's "gpu-scheduler"
prefix becomes the full name (so do the names it refers to: a roleRef, a policyName), a
namespaced object and every ServiceAccount subject move to the release's namespace (the leader
election Role and its binding to the Lease's), the chart's labels are added, and `annotations`
(a dict) merged into its own. Call with (dict "root" $ "object" <object> "annotations" <dict>).
*/}}
{{- define "gpu-scheduler.rehome" -}}
{{- $root := .root }}
{{- $fullname := include "gpu-scheduler.fullname" $root }}
{{- $object := deepCopy .object }}
{{- $metadata := $object.metadata }}
{{- $_ := set $metadata "name" (regexReplaceAll "^gpu-scheduler" $metadata.name $fullname) }}
{{- $namespace := $root.Release.Namespace }}
{{- if has $object.kind (list "Role" "RoleBinding") }}
{{- $namespace = include "gpu-scheduler.leaseNamespace" $root }}
{{- end }}
{{- if hasKey $metadata "namespace" }}
{{- $_ := set $metadata "namespace" $namespace }}
{{- end }}
{{- $labels := merge (default (dict) $metadata.labels) (include "gpu-scheduler.labels" $root | fromYaml) }}
{{- $_ := set $metadata "labels" $labels }}
{{- $annotations := merge (default (dict) $metadata.annotations) (default (dict) .annotations) }}
{{- if $annotations }}
{{- $_ := set $metadata "annotations" $annotations }}
{{- end }}
{{- if $object.roleRef }}
{{- $_ := set $object.roleRef "name" (regexReplaceAll "^gpu-scheduler" $object.roleRef.name $fullname) }}
{{- end }}
{{- range $object.subjects }}
{{- if eq .kind "ServiceAccount" }}
{{- $_ := set . "name" (regexReplaceAll "^gpu-scheduler" .name $fullname) }}
{{- $_ := set . "namespace" $root.Release.Namespace }}
{{- end }}
{{- end }}
{{- if and $object.spec $object.spec.policyName }}
{{- $_ := set $object.spec "policyName" (regexReplaceAll "^gpu-scheduler" $object.spec.policyName $fullname) }}
{{- end }}
{{- toYaml $object }}
{{- end }}
