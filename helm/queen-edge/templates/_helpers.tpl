{{/* Chart name, overridable. */}}
{{- define "queen-edge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name used for every resource. */}}
{{- define "queen-edge.fullname" -}}
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

{{/* Labels on every resource. */}}
{{- define "queen-edge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "queen-edge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the pods. */}}
{{- define "queen-edge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "queen-edge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "queen-edge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "queen-edge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Secret with the JWT secret, admin token and Redis URL. */}}
{{- define "queen-edge.secretName" -}}
{{- default (include "queen-edge.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* Secret with the server certificate; empty when none is configured (self-signed). */}}
{{- define "queen-edge.tlsSecretName" -}}
{{- if .Values.tls.existingSecret }}
{{- .Values.tls.existingSecret }}
{{- else if .Values.tls.cert }}
{{- printf "%s-tls" (include "queen-edge.fullname" .) }}
{{- end }}
{{- end }}

{{/* preStop sleep + drain timeout + 15 s to close Redis and exit, unless set. */}}
{{- define "queen-edge.terminationGracePeriodSeconds" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add .Values.preStopSleepSeconds (div (int .Values.config.server.drainTimeoutMs) 1000) 15 }}
{{- else }}
{{- .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* The image; the chart names no registry, the operator pushes the image (helm/README.md). */}}
{{- define "queen-edge.image" -}}
{{- $repo := required "image.repository is required: build the image from the project's Dockerfile and push it to your registry (helm/README.md)" .Values.image.repository }}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) | quote }}
{{- end }}
