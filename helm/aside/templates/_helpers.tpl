{{/* Names and labels shared by every object. */}}

{{- define "aside.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-<chart>", or the release name when it already contains the
chart name; at most 63 characters (a Service name is a DNS label). */}}
{{- define "aside.fullname" -}}
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

{{/* The StatefulSet's headless Service. */}}
{{- define "aside.headlessName" -}}
{{- printf "%s-headless" (include "aside.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{- define "aside.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that never change for a release: the workload selector. */}}
{{- define "aside.selectorLabels" -}}
app.kubernetes.io/name: {{ include "aside.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "aside.labels" -}}
helm.sh/chart: {{ include "aside.chart" . }}
{{ include "aside.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/component: load-balancer
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "aside.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "aside.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "aside.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/* Where the chart mounts what the server reads. */}}
{{- define "aside.configDir" -}}/etc/aside{{- end }}
{{- define "aside.configFile" -}}
{{- if .Values.configReload.enabled -}}
{{ include "aside.configDir" . }}/config/aside.yaml
{{- else -}}
{{ include "aside.configDir" . }}/aside.yaml
{{- end -}}
{{- end }}
{{- define "aside.adminDir" -}}/etc/aside/admin{{- end }}
{{- define "aside.tlsDir" -}}/etc/aside/tls{{- end }}
{{- define "aside.clientCaDir" -}}/etc/aside/client-ca{{- end }}
{{- define "aside.sessionDir" -}}/etc/aside/session{{- end }}
{{- define "aside.etcdTlsDir" -}}/etc/aside/etcd-tls{{- end }}
{{- define "aside.etcdCredentialsDir" -}}/etc/aside/etcd-credentials{{- end }}

{{/* "true" when Admin-created state lives in etcd (store.etcd.endpoints
set), "" otherwise. */}}
{{- define "aside.etcdEnabled" -}}
{{- if .Values.store.etcd.endpoints }}true{{ end }}
{{- end }}

{{/* The etcd members' ports, unique, as a YAML list of numbers; every
endpoint must be host:port. */}}
{{- define "aside.etcdPorts" -}}
{{- if not (kindIs "slice" .Values.store.etcd.endpoints) }}
{{- fail (printf "store.etcd.endpoints: expected a list of host:port, got %q (with --set: store.etcd.endpoints={a:2379,b:2379})" (toString .Values.store.etcd.endpoints)) }}
{{- end }}
{{- $ports := list }}
{{- range $i, $ep := .Values.store.etcd.endpoints }}
{{- $text := toString $ep }}
{{- if not (regexMatch "^[^/]+:[0-9]{1,5}$" $text) }}
{{- fail (printf "store.etcd.endpoints[%d]: %q is not host:port (e.g. etcd-0.etcd.db.svc:2379)" $i $text) }}
{{- end }}
{{- $port := regexFind "[0-9]+$" $text | int }}
{{- if or (lt $port 1) (gt $port 65535) }}
{{- fail (printf "store.etcd.endpoints[%d]: port %d out of range 1..65535" $i $port) }}
{{- end }}
{{- $ports = append $ports $port }}
{{- end }}
{{- toYaml (uniq $ports) }}
{{- end }}

{{/* The `store` block of aside.yaml (etcd only; SQLite is the server's
default and needs no block). */}}
{{- define "aside.storeConfig" -}}
{{- $e := .Values.store.etcd }}
{{- $_ := include "aside.etcdPorts" . }}
{{- $prefix := toString ($e.prefix | default "/aside/") }}
{{- if not (hasSuffix "/" $prefix) }}
{{- fail (printf "store.etcd.prefix: %q must end with '/'" $prefix) }}
{{- end }}
{{- $etcd := dict "endpoints" $e.endpoints "prefix" $prefix }}
{{- with $e.dialTimeout }}{{ $_ := set $etcd "dial_timeout" (toString .) }}{{ end }}
{{- with $e.requestTimeout }}{{ $_ := set $etcd "request_timeout" (toString .) }}{{ end }}
{{- if $e.tls.existingSecret }}
{{- if and (not $e.tls.caKey) (not $e.tls.certKey) }}
{{- fail "store.etcd.tls.existingSecret needs store.etcd.tls.caKey or store.etcd.tls.certKey (what to read from the Secret)" }}
{{- end }}
{{- with $e.tls.caKey }}{{ $_ := set $etcd "ca_file" (printf "%s/%s" (include "aside.etcdTlsDir" $) .) }}{{ end }}
{{- if $e.tls.certKey }}
{{- $key := required "store.etcd.tls.keyKey is required with store.etcd.tls.certKey (the client key for mutual TLS)" $e.tls.keyKey }}
{{- $_ := set $etcd "cert_file" (printf "%s/%s" (include "aside.etcdTlsDir" .) $e.tls.certKey) }}
{{- $_ := set $etcd "key_file" (printf "%s/%s" (include "aside.etcdTlsDir" .) $key) }}
{{- end }}
{{- end }}
{{- if $e.credentials.existingSecret }}
{{- $_ := set $etcd "credentials_file" (printf "%s/%s" (include "aside.etcdCredentialsDir" .) $e.credentials.key) }}
{{- end }}
{{- toYaml (dict "type" "etcd" "etcd" $etcd) }}
{{- end }}

{{/* The Secret holding the client CA bundle. */}}
{{- define "aside.clientCaSecret" -}}
{{- default .Values.tls.existingSecret .Values.tls.clientCA.existingSecret }}
{{- end }}

{{/* The port the kubelet probes: the plaintext health port, or the gRPC
port when there is none (possible only without TLS). */}}
{{- define "aside.probePort" -}}
{{- if gt (int .Values.ports.health) 0 -}}
health
{{- else if .Values.tls.enabled -}}
{{- fail "ports.health is 0 while tls.enabled: kubelet gRPC probes cannot do TLS, so the plaintext health port is needed" -}}
{{- else -}}
grpclb
{{- end -}}
{{- end }}

{{/* Whole seconds (rounded up) of a duration written like the server's
config: 500ms, 10s, 1m, 1h30m, 1.5s; "0" is 0. */}}
{{- define "aside.durationSeconds" -}}
{{- $text := toString . | trim }}
{{- $ns := 0.0 }}
{{- if ne $text "0" }}
{{- if not (regexMatch "^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$" $text) }}
{{- fail (printf "config.shutdown_grace: invalid duration %q (expected e.g. 500ms, 10s, 1m)" $text) }}
{{- end }}
{{- range $part := regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h)" $text -1 }}
{{- $unit := regexFind "(ns|us|ms|s|m|h)$" $part }}
{{- $number := float64 (trimSuffix $unit $part) }}
{{- $scale := get (dict "ns" 1.0 "us" 1e3 "ms" 1e6 "s" 1e9 "m" 6e10 "h" 3.6e12) $unit }}
{{- $ns = addf $ns (mulf $number $scale) }}
{{- end }}
{{- end }}
{{- ceil (divf $ns 1e9) | int }}
{{- end }}

{{/* terminationGracePeriodSeconds: given, or shutdown_grace + preStop
delay + 5 s; always larger than shutdown_grace + the preStop delay. */}}
{{- define "aside.terminationGracePeriodSeconds" -}}
{{- $grace := include "aside.durationSeconds" (.Values.config.shutdown_grace | default "10s") | int }}
{{- $needed := add $grace (int .Values.preStopDelaySeconds) }}
{{- if kindIs "string" .Values.terminationGracePeriodSeconds }}
{{- if .Values.terminationGracePeriodSeconds }}
{{- fail "terminationGracePeriodSeconds: expected a number of seconds or empty" }}
{{- end }}
{{- add $needed 5 }}
{{- else }}
{{- $given := int .Values.terminationGracePeriodSeconds }}
{{- if le $given $needed }}
{{- fail (printf "terminationGracePeriodSeconds: %d must exceed config.shutdown_grace (%ds) + preStopDelaySeconds (%d), or in-flight calls are killed" $given $grace (int .Values.preStopDelaySeconds)) }}
{{- end }}
{{- $given }}
{{- end }}
{{- end }}

{{/* The server's aside.yaml: .Values.config (the chart's defaults merged
with the user's values) plus the keys the chart owns, which follow from the
ports, mounts and Secrets it sets up. */}}
{{- define "aside.config" -}}
{{- $config := deepCopy (.Values.config | default dict) }}
{{- range $key := list "listen" "metrics" "health_listen" "state_dir" "tls" "admin" "session_key_file" "store" "load_reports" "groups" }}
{{- if hasKey $config $key }}
{{- fail (printf "config.%s is set by the chart; use the values ports, persistence, tls, admin, sessionKey, store, loadReports and groups instead" $key) }}
{{- end }}
{{- end }}
{{- $host := .Values.listenHost | default "0.0.0.0" }}
{{- $_ := set $config "listen" (printf "%s:%d" $host (int .Values.ports.grpc)) }}
{{- if gt (int .Values.ports.metrics) 0 }}
{{- $_ := set $config "metrics" (printf "%s:%d" $host (int .Values.ports.metrics)) }}
{{- else }}
{{- $_ := set $config "metrics" "" }}
{{- end }}
{{- if gt (int .Values.ports.health) 0 }}
{{- $_ := set $config "health_listen" (printf "%s:%d" $host (int .Values.ports.health)) }}
{{- end }}
{{- $_ := set $config "state_dir" .Values.persistence.mountPath }}
{{- $admin := dict }}
{{- if .Values.admin.existingSecret }}
{{- $_ := set $admin "token_file" (printf "%s/%s" (include "aside.adminDir" .) .Values.admin.secretKey) }}
{{- end }}
{{- if .Values.admin.allowedIdentities }}
{{- if not (and .Values.tls.enabled .Values.tls.clientCA.enabled) }}
{{- fail "admin.allowedIdentities needs tls.enabled and tls.clientCA.enabled (identities come from verified client certificates)" }}
{{- end }}
{{- $_ := set $admin "allowed_identities" .Values.admin.allowedIdentities }}
{{- end }}
{{- if $admin }}
{{- $_ := set $config "admin" $admin }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $secret := required "tls.existingSecret is required when tls.enabled (a Secret with the server certificate and key)" .Values.tls.existingSecret }}
{{- $tls := dict "cert_file" (printf "%s/%s" (include "aside.tlsDir" .) .Values.tls.certKey) "key_file" (printf "%s/%s" (include "aside.tlsDir" .) .Values.tls.keyKey) }}
{{- if .Values.tls.clientCA.enabled }}
{{- $_ := set $tls "client_ca_file" (printf "%s/%s" (include "aside.clientCaDir" .) .Values.tls.clientCA.key) }}
{{- end }}
{{- if .Values.tls.requireClientCert }}
{{- if not .Values.tls.clientCA.enabled }}
{{- fail "tls.requireClientCert needs tls.clientCA.enabled (a CA to verify client certificates with)" }}
{{- end }}
{{- $_ := set $tls "require_client_cert" true }}
{{- end }}
{{- $_ := set $config "tls" $tls }}
{{- else if or .Values.tls.clientCA.enabled .Values.tls.requireClientCert }}
{{- fail "tls.clientCA and tls.requireClientCert need tls.enabled" }}
{{- end }}
{{- if .Values.sessionKey.existingSecret }}
{{- $_ := set $config "session_key_file" (printf "%s/%s" (include "aside.sessionDir" .) .Values.sessionKey.secretKey) }}
{{- end }}
{{- if include "aside.etcdEnabled" . }}
{{- $_ := set $config "store" (include "aside.storeConfig" . | fromYaml) }}
{{- end }}
{{- $lr := .Values.loadReports }}
{{- if not (has (toString $lr.auth) (list "token" "open")) }}
{{- fail (printf "loadReports.auth: %q is not token or open" (toString $lr.auth)) }}
{{- end }}
{{- $share := float64 $lr.maxReporterShare }}
{{- if or (lt $share 0.01) (gt $share 1.0) }}
{{- fail (printf "loadReports.maxReporterShare: %v out of range 0.01..1" $lr.maxReporterShare) }}
{{- end }}
{{- $_ := set $config "load_reports" (dict "auth" (toString $lr.auth) "max_reporter_share" $share) }}
{{- $_ := set $config "groups" (.Values.groups | default list) }}
{{- toYaml $config }}
{{- end }}

{{/*
The part of aside.yaml that only a restart applies: everything but the
groups and the settings the server reloads in place (docs/operations.md,
"Reloading without a restart"). With configReload.enabled the pods roll on
a change of this part only.
*/}}
{{- define "aside.restartConfig" -}}
{{- $config := include "aside.config" . | fromYaml }}
{{- range $key := list "groups" "log_level" "log_format" "shutdown_grace" "config_reload" }}
{{- $_ := unset $config $key }}
{{- end }}
{{- toYaml $config }}
{{- end }}
