{{/*
Names. The prefix is cut to 50 characters so every Service name with its
suffix ("-headless", "-backend") stays within the 63 of a DNS label.
*/}}
{{- define "hub.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 50 | trimSuffix "-" }}
{{- end }}

{{- define "hub.fullname" -}}
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

{{- define "hub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hub.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "hub.selectorLabels" . }}
app.kubernetes.io/version: {{ default .Chart.AppVersion .Values.image.tag | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: hub
app.kubernetes.io/part-of: stargate
{{- end }}

{{- define "hub.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
An environment value as text: YAML numbers arrive as float64, and a whole
one must not print as 8.388608e+06.
*/}}
{{- define "hub.envValue" -}}
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
{{- define "hub.goMemLimit" -}}
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
.Values.extraEnv. HUB_ID is the pod name, so logs and handshake acks name
the replica.
*/}}
{{- define "hub.env" -}}
{{- $env := list
  (dict "name" "HUB_ID" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name")))
  (dict "name" "HUB_LISTEN" "value" (printf "0.0.0.0:%v" .Values.ports.http))
  (dict "name" "HUB_BACKEND_LISTEN" "value" (printf "0.0.0.0:%v" .Values.ports.backend))
  (dict "name" "HUB_METRICS_LISTEN" "value" (printf "0.0.0.0:%v" .Values.ports.metrics))
}}
{{- if .Values.lbConfig }}
{{- $env = concat $env (list
  (dict "name" "HUB_LB_CONFIG_PATH" "value" "/etc/stargate/lb-config/lb-config.json")
  (dict "name" "HUB_LB_CONFIG_WATCH" "value" (ternary "true" "false" (eq .Values.lbConfigUpdate "reload")))
) }}
{{- end }}
{{- if .Values.registrationToken.enabled }}
{{- $env = append $env (dict "name" "HUB_REGISTRATION_TOKEN_FILE" "value" "/etc/stargate/registration-token/token") }}
{{- end }}
{{- if .Values.gatewayToken.enabled }}
{{- $env = append $env (dict "name" "HUB_GATEWAY_TOKEN_FILE" "value" "/etc/stargate/gateway-token/token") }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $env = concat $env (list
  (dict "name" "HUB_TLS_CERT_PATH" "value" "/etc/stargate/tls/tls.crt")
  (dict "name" "HUB_TLS_KEY_PATH" "value" "/etc/stargate/tls/tls.key")
) }}
{{- end }}
{{- if .Values.apiTls.enabled }}
{{- $env = concat $env (list
  (dict "name" "HUB_API_TLS_CERT_PATH" "value" "/etc/stargate/api-tls/tls.crt")
  (dict "name" "HUB_API_TLS_KEY_PATH" "value" "/etc/stargate/api-tls/tls.key")
) }}
{{- end }}
{{- if .Values.adminToken.enabled }}
{{- $env = append $env (dict "name" "HUB_ADMIN_TOKEN_FILE" "value" "/etc/stargate/admin-token/token") }}
{{- end }}
{{- with include "hub.goMemLimit" . }}
{{- $env = append $env (dict "name" "GOMEMLIMIT" "value" .) }}
{{- end }}
{{- range $name := keys .Values.config | sortAlpha }}
{{- $env = append $env (dict "name" $name "value" (include "hub.envValue" (get $.Values.config $name))) }}
{{- end }}
{{- $env = concat $env .Values.extraEnv }}
{{- toYaml $env }}
{{- end }}

{{/* The headless Service pylons resolve to reach every replica. */}}
{{- define "hub.headless" -}}
{{- printf "%s-headless" (include "hub.fullname" .) }}
{{- end }}
