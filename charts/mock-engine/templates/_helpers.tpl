{{/*
Names. The prefix is cut to 50 characters so every Service name with its
suffix ("-headless") stays within the 63 of a DNS label.
*/}}
{{- define "mock-engine.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 50 | trimSuffix "-" }}
{{- end }}

{{- define "mock-engine.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mock-engine.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mock-engine.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mock-engine.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "mock-engine.selectorLabels" . }}
app.kubernetes.io/version: {{ default .Chart.AppVersion .Values.image.tag | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: engine
app.kubernetes.io/part-of: stargate
{{- end }}

{{- define "mock-engine.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
An environment value as text: YAML numbers arrive as float64, and a whole
one must not print as 8.388608e+06.
*/}}
{{- define "mock-engine.envValue" -}}
{{- if kindIs "float64" . }}
{{- if eq (float64 (int64 .)) . }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else }}{{ . }}
{{- end }}
{{- end }}

{{/*
GOMEMLIMIT at 90 % of limits.memory (Mi or Gi), so the Go collector works
harder before the kernel kills the pod; Olric's partition tables count in
the heap the collector sees.
*/}}
{{- define "mock-engine.goMemLimit" -}}
{{- $mem := "" }}
{{- with .Values.resources }}{{ with .limits }}{{ with .memory }}{{ $mem = toString . }}{{ end }}{{ end }}{{ end }}
{{- if hasSuffix "Gi" $mem }}
{{- printf "%dMiB" (div (mul (trimSuffix "Gi" $mem | int) 1024 9) 10) }}
{{- else if hasSuffix "Mi" $mem }}
{{- printf "%dMiB" (div (mul (trimSuffix "Mi" $mem | int) 9) 10) }}
{{- end }}
{{- end }}

{{/*
The container environment: the settings the chart wires itself, then
.Values.config by name (values.schema.json keeps the two apart), then
.Values.extraEnv. The engine id is the pod name, so an answer's
x-mock-engine-id says which engine served it.
*/}}
{{- define "mock-engine.env" -}}
{{- $env := list
  (dict "name" "MOCK_ENGINE_LISTEN" "value" (printf "0.0.0.0:%v" .Values.port))
  (dict "name" "MOCK_ENGINE_MODEL_NAME" "value" .Values.model)
  (dict "name" "MOCK_ENGINE_ENGINE_ID" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name")))
}}
{{- with include "mock-engine.goMemLimit" . }}
{{- $env = append $env (dict "name" "GOMEMLIMIT" "value" .) }}
{{- end }}
{{- range $name := keys .Values.config | sortAlpha }}
{{- $env = append $env (dict "name" $name "value" (include "mock-engine.envValue" (get $.Values.config $name))) }}
{{- end }}
{{- $env = concat $env .Values.extraEnv }}
{{- toYaml $env }}
{{- end }}

{{- define "mock-engine.headless" -}}
{{- printf "%s-headless" (include "mock-engine.fullname" .) }}
{{- end }}
