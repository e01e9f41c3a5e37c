{{/*
The `app.kubernetes.io/name` label: the chart's name unless nameOverride.
*/}}
{{- define "browser-controller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' names: fullnameOverride, else the release name when it contains the chart's name
(`helm install browser-controller` gives the names of deploy/), else `<release>-<name>`.
*/}}
{{- define "browser-controller.fullname" -}}
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

{{/*
Labels of every object: the selector label of deploy/ and Helm's own (chart, release, version,
managed-by), which tests/helm_chart.rs names as the only labels kustomize's objects lack.
*/}}
{{- define "browser-controller.labels" -}}
{{ include "browser-controller.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
What the Deployment, the PodDisruptionBudget, the Service and the monitors select the operator's
pods by. One release per namespace: a second would select the first one's pods.
*/}}
{{- define "browser-controller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "browser-controller.name" . }}
{{- end }}

{{/*
The operator's image: the tag defaults to the chart's appVersion.
*/}}
{{- define "browser-controller.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/*
The subject of every binding: the operator's ServiceAccount.
*/}}
{{- define "browser-controller.subject" -}}
- kind: ServiceAccount
  name: {{ include "browser-controller.fullname" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
What the operator needs in each namespace it serves, for both group layouts (selenosis.io, and
browser.selenosis.io / browserconfig.selenosis.io of the selenosis Helm chart): the rules of
rbac/namespaced/watched-namespace.yaml, which rbac/cluster-role.yaml grants in all namespaces.
*/}}
{{- define "browser-controller.watchedNamespaceRules" -}}
# Watch Browsers; finalizer and labels are patched, failed Browsers deleted.
- apiGroups: [selenosis.io, browser.selenosis.io]
  resources: [browsers]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [selenosis.io, browser.selenosis.io]
  resources: [browsers/status]
  verbs: [patch]
# A pod's owner reference with blockOwnerDeletion needs update on the owner's finalizers.
- apiGroups: [selenosis.io, browser.selenosis.io]
  resources: [browsers/finalizers]
  verbs: [update]
# Watch BrowserConfigs; patch only releases the Go browser-controller's finalizer
# (browserconfig.selenosis.io/finalizer) from a config being deleted, which after a switch
# from it nothing else would, leaving the config Terminating for ever. RBAC cannot narrow a
# patch to one field or value: no smaller rule removes a finalizer.
- apiGroups: [selenosis.io, browserconfig.selenosis.io]
  resources: [browserconfigs]
  verbs: [list, watch, patch]
- apiGroups: [selenosis.io, browserconfig.selenosis.io]
  resources: [browserconfigs/status]
  verbs: [patch]
# Browser pods: server-side apply (patch; an apply that creates needs create too, also for the
# dry runs that validate BrowserConfigs), watch, read, delete.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
# Events on Browsers and BrowserConfigs (events.k8s.io/v1; a repeat is patched into a series).
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
# The capacity queue reads whether a ResourceQuota has room before creating a pod.
- apiGroups: [""]
  resources: [resourcequotas]
  verbs: [list, watch]
{{- end }}

{{/*
The operator checks its own permissions at start (SelfSubjectAccessReview, cluster-scoped).
*/}}
{{- define "browser-controller.accessReviewRules" -}}
- apiGroups: [authorization.k8s.io]
  resources: [selfsubjectaccessreviews]
  verbs: [create]
{{- end }}

{{/*
Image pre-pull: the pre-pull DaemonSets, watched, server-side applied and deleted.
*/}}
{{- define "browser-controller.prepullRules" -}}
- apiGroups: [apps]
  resources: [daemonsets]
  verbs: [list, watch, create, patch, delete]
{{- end }}
