{{/*
Names. The prefix is cut to 50 characters so every Service name with its
suffix ("-olric") stays within the 63 of a DNS label.
*/}}
{{- define "gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 50 | trimSuffix "-" }}
{{- end }}

{{- define "gateway.fullname" -}}
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

{{- define "gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gateway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ default .Chart.AppVersion .Values.image.tag | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: gateway
app.kubernetes.io/part-of: stargate
{{- end }}

{{- define "gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Pods the gateway runs with: the HPA's floor when it scales them. */}}
{{- define "gateway.pods" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.minReplicas }}{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/*
Olric's partition copies: the value when set, else 2 with more than one pod
(a lost member then loses no hint or counter) and 1 alone (a second copy
needs a second member).
*/}}
{{- define "gateway.olricReplicaCount" -}}
{{- if not (kindIs "invalid" .Values.olric.replicaCount) }}
{{- .Values.olric.replicaCount }}
{{- else if gt (int (include "gateway.pods" .)) 1 }}2
{{- else }}1
{{- end }}
{{- end }}

{{- define "gateway.olricService" -}}
{{- printf "%s-olric" (include "gateway.fullname" .) }}
{{- end }}

{{/* The Secret holding Olric's shared secret: the operator's, or the generated one. */}}
{{- define "gateway.olricAuthSecret" -}}
{{- default (printf "%s-olric-auth" (include "gateway.fullname" .)) .Values.olric.auth.existingSecret }}
{{- end }}

{{- define "gateway.olricAuthKey" -}}
{{- if .Values.olric.auth.existingSecret }}{{ .Values.olric.auth.existingSecretKey }}{{ else }}secret{{ end }}
{{- end }}

{{/*
Olric's shared secret is mounted when Olric runs with auth; running
without it must be asked for in config, as the binary requires.
*/}}
{{- define "gateway.olricAuth" -}}
{{- if and .Values.olric.enabled .Values.olric.auth.enabled }}true{{ end }}
{{- end }}

{{/*
An environment value as text: YAML numbers arrive as float64, and a whole
one must not print as 8.388608e+06.
*/}}
{{- define "gateway.envValue" -}}
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
{{- define "gateway.goMemLimit" -}}
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
.Values.extraEnv.

Olric in a pod: the data listener and memberlist both bind the pod IP
(the data address is the member's name, which peers and the gateway's own
cluster client dial; the binary refuses a wildcard, which Olric would
replace by an address it guesses), and memberlist advertises it. The
headless Service's answer holds the pod's own address too; the gateway's
discovery drops it. The shared secret is a file from a Secret.
*/}}
{{- define "gateway.env" -}}
{{- $env := list
  (dict "name" "GATEWAY_LISTEN" "value" (printf "0.0.0.0:%v" .Values.ports.http))
  (dict "name" "GATEWAY_METRICS_LISTEN" "value" (printf "0.0.0.0:%v" .Values.ports.metrics))
  (dict "name" "STARGATE_URL" "value" (tpl .Values.hubURL .))
}}
{{- if .Values.apiKeys.enabled }}
{{- $env = append $env (dict "name" "GATEWAY_API_KEYS_FILE" "value" "/etc/stargate/api-keys/keys") }}
{{- end }}
{{- if .Values.hubToken.enabled }}
{{- $env = append $env (dict "name" "GATEWAY_HUB_TOKEN_FILE" "value" "/etc/stargate/hub-token/token") }}
{{- end }}
{{- if .Values.modelConfig }}
{{- $env = append $env (dict "name" "GATEWAY_MODEL_CONFIG" "value" "/etc/stargate/model-config/model-config.json") }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $env = concat $env (list
  (dict "name" "GATEWAY_TLS_CERT_PATH" "value" "/etc/stargate/tls/tls.crt")
  (dict "name" "GATEWAY_TLS_KEY_PATH" "value" "/etc/stargate/tls/tls.key")
) }}
{{- end }}
{{- $env = append $env (dict "name" "OLRIC_ENABLED" "value" (toString .Values.olric.enabled)) }}
{{- if .Values.olric.enabled }}
{{- $podIP := dict "fieldRef" (dict "fieldPath" "status.podIP") }}
{{- $env = concat $env (list
  (dict "name" "OLRIC_BIND_ADDR" "valueFrom" $podIP)
  (dict "name" "OLRIC_BIND_PORT" "value" (toString .Values.olric.port))
  (dict "name" "OLRIC_MEMBERLIST_BIND_ADDR" "valueFrom" $podIP)
  (dict "name" "OLRIC_MEMBERLIST_BIND_PORT" "value" (toString .Values.olric.memberlistPort))
  (dict "name" "OLRIC_MEMBERLIST_ADVERTISE_ADDR" "valueFrom" $podIP)
  (dict "name" "OLRIC_K8S_SERVICE" "value" (printf "%s.%s.svc.%s" (include "gateway.olricService" .) .Release.Namespace .Values.clusterDomain))
  (dict "name" "OLRIC_REPLICA_COUNT" "value" (include "gateway.olricReplicaCount" .))
) }}
{{- if include "gateway.olricAuth" . }}
{{- $env = append $env (dict "name" "OLRIC_AUTH_SECRET_FILE" "value" "/etc/stargate/olric-auth/secret") }}
{{- end }}
{{- end }}
{{- with include "gateway.goMemLimit" . }}
{{- $env = append $env (dict "name" "GOMEMLIMIT" "value" .) }}
{{- end }}
{{- range $name := keys .Values.config | sortAlpha }}
{{- $env = append $env (dict "name" $name "value" (include "gateway.envValue" (get $.Values.config $name))) }}
{{- end }}
{{- $env = concat $env .Values.extraEnv }}
{{- toYaml $env }}
{{- end }}
