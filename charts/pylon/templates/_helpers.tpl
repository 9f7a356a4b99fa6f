{{/*
Names. The prefix is cut to 40 characters so a backend's name (up to 22)
can follow it within the 63 of a DNS label.
*/}}
{{- define "pylon.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" }}
{{- end }}

{{- define "pylon.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "pylon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pylon.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "pylon.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "pylon.selectorLabels" . }}
app.kubernetes.io/version: {{ default .Chart.AppVersion .Values.image.tag | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: pylon
app.kubernetes.io/part-of: stargate
{{- end }}

{{- define "pylon.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
An environment value as text: YAML numbers arrive as float64, and a whole
one must not print as 8.388608e+06.
*/}}
{{- define "pylon.envValue" -}}
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
{{- define "pylon.goMemLimit" -}}
{{- $mem := "" }}
{{- with .Values.resources }}{{ with .limits }}{{ with .memory }}{{ $mem = toString . }}{{ end }}{{ end }}{{ end }}
{{- if hasSuffix "Gi" $mem }}
{{- printf "%dMiB" (div (mul (trimSuffix "Gi" $mem | int) 1024 9) 10) }}
{{- else if hasSuffix "Mi" $mem }}
{{- printf "%dMiB" (div (mul (trimSuffix "Mi" $mem | int) 9) 10) }}
{{- end }}
{{- end }}

{{/*
The backend's environment: the settings the chart wires from the values
(the backend's own overrides first), then config merged over by the
backend's config, by name (values.schema.json keeps wired and config names
apart), then extraEnv. Called with (dict "root" $ "backend" $backend).
*/}}
{{- define "pylon.env" -}}
{{- $ := .root }}
{{- $v := $.Values }}
{{- $b := .backend }}
{{- $id := default (printf "%s-%s" $v.clusterId $b.name) $b.inferenceServerId }}
{{- $tps := $v.calibration.initialInputTPS }}
{{- if hasKey $b "initialInputTPS" }}{{ $tps = $b.initialInputTPS }}{{ end }}
{{- $mec := $v.maxEngineConcurrency }}
{{- if hasKey $b "maxEngineConcurrency" }}{{ $mec = $b.maxEngineConcurrency }}{{ end }}
{{- $env := list
  (dict "name" "PYLON_CLUSTER_ID" "value" $v.clusterId)
  (dict "name" "PYLON_INFERENCE_SERVER_ID" "value" $id)
  (dict "name" "PYLON_STARGATE_ADDRESS" "value" (tpl $v.hubAddress $))
  (dict "name" "PYLON_UPSTREAM_HTTP_BASE_URL" "value" (tpl (join "," $b.engineURLs) $))
  (dict "name" "PYLON_MODEL_NAME" "value" (join "," $v.models))
  (dict "name" "PYLON_LISTEN" "value" (printf "0.0.0.0:%v" $v.ports.http))
  (dict "name" "PYLON_METRICS_LISTEN" "value" (printf "0.0.0.0:%v" $v.ports.metrics))
  (dict "name" "PYLON_MAX_ENGINE_CONCURRENCY" "value" (include "pylon.envValue" $mec))
  (dict "name" "PYLON_DO_CALIBRATION" "value" (toString $v.calibration.enabled))
  (dict "name" "PYLON_BENCHMARK_PIN_INPUT_TPS" "value" (toString $v.calibration.pinInputTPS))
  (dict "name" "PYLON_QUEUE_MISMATCH_RETRY_ENABLED" "value" (toString $v.queueAdmission.enabled))
}}
{{- $optional := list
  (list "PYLON_INITIAL_INPUT_TPS" $tps)
  (list "PYLON_CALIBRATION_REQUESTS" $v.calibration.requests)
  (list "PYLON_CALIBRATION_PROMPT_UNITS" $v.calibration.promptUnits)
  (list "PYLON_CALIBRATION_MAX_CONCURRENCY" $v.calibration.maxConcurrency)
  (list "PYLON_BRINGUP_CALIBRATION_TIMEOUT_MS" $v.calibration.stepTimeoutMs)
  (list "PYLON_QUEUE_MISMATCH_MIN_DELTA_MS" $v.queueAdmission.minDeltaMs)
  (list "PYLON_QUEUE_MISMATCH_TOLERANCE_FACTOR" $v.queueAdmission.toleranceFactor)
  (list "PYLON_QUEUE_MISMATCH_RETRY_AFTER_MS" $v.queueAdmission.retryAfterMs)
}}
{{- range $optional }}
{{- if not (kindIs "invalid" (index . 1)) }}
{{- $env = append $env (dict "name" (index . 0) "value" (include "pylon.envValue" (index . 1))) }}
{{- end }}
{{- end }}
{{- if $v.region }}
{{- $env = append $env (dict "name" "PYLON_REGION" "value" $v.region) }}
{{- end }}
{{- if $v.authToken.enabled }}
{{- $env = append $env (dict "name" "STARGATE_AUTH_TOKEN_FILE" "value" "/etc/stargate/auth-token/token") }}
{{- end }}
{{- if $v.tls.caSecretName }}
{{- $env = append $env (dict "name" "STARGATE_TLS_CERT_PATH" "value" "/etc/stargate/hub-ca/ca.crt") }}
{{- end }}
{{- with include "pylon.goMemLimit" $ }}
{{- $env = append $env (dict "name" "GOMEMLIMIT" "value" .) }}
{{- end }}
{{- $config := merge (deepCopy (default dict $b.config)) $v.config }}
{{- range $name := keys $config | sortAlpha }}
{{- $env = append $env (dict "name" $name "value" (include "pylon.envValue" (get $config $name))) }}
{{- end }}
{{- $env = concat $env $v.extraEnv }}
{{- toYaml $env }}
{{- end }}

{{/* Refuses values the pylon would refuse at startup, naming the value. */}}
{{- define "pylon.validate" -}}
{{- $v := .Values }}
{{- if not $v.clusterId }}{{ fail "pylon: clusterId is required" }}{{ end }}
{{- if not $v.models }}{{ fail "pylon: models is required (the engines' model names)" }}{{ end }}
{{- if not $v.backends }}{{ fail "pylon: backends is empty: list at least one {name, engineURLs}" }}{{ end }}
{{- $names := dict }}
{{- range $i, $b := $v.backends }}
{{- if not $b.name }}{{ fail (printf "pylon: backends[%d].name is required" $i) }}{{ end }}
{{- if hasKey $names (toString $b.name) }}{{ fail (printf "pylon: backends[%d].name %q is used twice" $i $b.name) }}{{ end }}
{{- $_ := set $names (toString $b.name) true }}
{{- if not $b.engineURLs }}{{ fail (printf "pylon: backends[%d].engineURLs is required" $i) }}{{ end }}
{{- $tps := $v.calibration.initialInputTPS }}
{{- if hasKey $b "initialInputTPS" }}{{ $tps = $b.initialInputTPS }}{{ end }}
{{- if and $v.calibration.enabled (not (kindIs "invalid" $tps)) }}{{ fail (printf "pylon: backends[%d]: calibration.enabled and initialInputTPS exclude each other" $i) }}{{ end }}
{{- if and (not $v.calibration.enabled) (kindIs "invalid" $tps) }}{{ fail (printf "pylon: backends[%d]: set calibration.initialInputTPS (or the backend's initialInputTPS) or calibration.enabled: without input TPS the hub never routes to the model" $i) }}{{ end }}
{{- if and $v.calibration.pinInputTPS (kindIs "invalid" $tps) }}{{ fail (printf "pylon: backends[%d]: calibration.pinInputTPS needs initialInputTPS" $i) }}{{ end }}
{{- end }}
{{- if and $v.calibration.enabled (gt (len $v.backends) 1) }}{{ fail "pylon: calibration.enabled needs a cluster of one backend (the hub sums a cluster's input TPS)" }}{{ end }}
{{- $yes := dict "true" true }}
{{- if and (not $v.authToken.enabled) (not (hasKey $yes (toString (index $v.config "PYLON_INSECURE_NO_AUTH")))) }}{{ fail "pylon: authToken.enabled is false: the pylon refuses to dial without a registration token; set config.PYLON_INSECURE_NO_AUTH: true for a hub that accepts anonymous pylons" }}{{ end }}
{{- $tls := or $v.tls.caSecretName (hasKey $yes (toString (index $v.config "PYLON_TLS"))) (hasKey $yes (toString (index $v.config "PYLON_TLS_INSECURE"))) }}
{{- if and $v.authToken.enabled (not $tls) (not (hasKey $yes (toString (index $v.config "PYLON_INSECURE_PLAINTEXT")))) }}{{ fail "pylon: the registration token would cross the network in plaintext: set tls.caSecretName (or config.PYLON_TLS: true), or config.PYLON_INSECURE_PLAINTEXT: true when the path to the hubs is trusted" }}{{ end }}
{{- end }}
